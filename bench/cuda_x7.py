"""Experiment: what sends the 7-decoder NVDEC aggregate to its lower value? (1080p HEVC, 500 frames per decoder)

Consumers: raw; raw plus a busy wait holding the GIL (the cost of extra Python per frame, nothing else);
interop.map alone (torch views made from PyAV's planes as in raw); interop.map + torch_views.

    python bench/cuda_x7.py [REPS]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    import interop
    from interop.benchmarks import cuda as b

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    clip = b.make_clip(b.clip_dir() / "libx265_1920x1080_600.mp4", "libx265", 1920, 1080, 600)
    raw, views = b._consume_raw(torch), b._consume_interop_views(torch)
    cuda = interop.MemoryType.CUDA

    def spin(us: float) -> Any:
        def f(vf: Any) -> Any:
            end = time.perf_counter() + us * 1e-6
            while time.perf_counter() < end:
                pass
            return raw(vf)
        return f

    def map_then_raw(vf: Any) -> Any:
        f = interop.map(vf, cuda)
        out = raw(vf)
        del f
        return out

    consumers = {"raw": raw, "raw + 6 us": spin(6), "raw + 20 us": spin(20), "map + raw views": map_then_raw,
                 "interop + torch_views": views}
    for c in consumers.values():
        b.loop_plain(clip, c, 30)
    for n in (7,):
        res: dict[str, list[float]] = {k: [] for k in consumers}
        for _ in range(reps):
            for k, c in consumers.items():
                res[k].append(b.concurrent(clip, c, n, 500, torch))
        for k, v in res.items():
            print(f"x{n} {k:24s} median {statistics.median(v):6.0f}  runs {[round(x) for x in v]}", flush=True)


if __name__ == "__main__":
    main()
