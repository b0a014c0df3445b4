"""Experiment: which part of torch_views(vf) lowers the odds of the fastest 7-decoder aggregate? (1080p HEVC, the
benchmark's 2000-frame clip, whole, per decoder; consumers interleaved run by run.)

Consumers: raw; raw + torch's current-stream query; raw + the frame checks (format, sw_format, device);
torch_views(vf).

    python bench/cuda_x7_parts.py [REPS]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b
    from interop.tensors.cuda import _torch_stream, torch_views

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    clip = b.make_clips(False, ["1080p HEVC"])["1080p HEVC"]
    raw = b._consume_raw(torch)

    def with_stream(vf: Any) -> Any:
        _torch_stream(0)
        return raw(vf)

    def with_checks(vf: Any) -> Any:
        if vf.format.name != "cuda" or vf.sw_format.name not in ("nv12", "p010le"):
            raise ValueError
        vf.planes[0].__dlpack_device__()
        return raw(vf)

    consumers = {"raw": raw, "raw + stream query": with_stream, "raw + frame checks": with_checks,
                 "torch_views(vf)": torch_views}
    for c in consumers.values():
        b.loop_plain(clip, c, 30)
    res: dict[str, list[float]] = {k: [] for k in consumers}
    for _ in range(reps):
        for k, c in consumers.items():
            res[k].append(b.concurrent(clip, c, 7, 2000, torch))
    top = max(max(v) for v in res.values())
    for k, v in res.items():
        fast = sum(x > 0.97 * top for x in v)
        print(f"x7 {k:22s} median {statistics.median(v):6.0f}  mean {statistics.mean(v):6.0f}  at the top value "
              f"{fast} of {len(v)}  runs {[round(x) for x in v]}", flush=True)


if __name__ == "__main__":
    main()
