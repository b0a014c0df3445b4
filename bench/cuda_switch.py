"""Experiment: does the interpreter's GIL switch interval decide the 7-decoder aggregate? (1080p HEVC, NVDEC)

    python bench/cuda_switch.py [REPS]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    clip = b.make_clip(b.clip_dir() / "libx265_1920x1080_600.mp4", "libx265", 1920, 1080, 600)
    raw, views = b._consume_raw(torch), b._consume_interop_views(torch)
    b.loop_plain(clip, views, 30)
    b.loop_plain(clip, raw, 30)
    for interval in (0.005, 0.001, 0.0002):
        sys.setswitchinterval(interval)
        for n in (4, 7):
            res: dict[str, list[float]] = {"raw": [], "interop + torch_views": []}
            for _ in range(reps):
                res["raw"].append(b.concurrent(clip, raw, n, 500, torch))
                res["interop + torch_views"].append(b.concurrent(clip, views, n, 500, torch))
            med = {k: statistics.median(v) for k, v in res.items()}
            print(f"switch {interval * 1e3:.1f} ms x{n}: raw {med['raw']:.0f} {[round(x) for x in res['raw']]}, "
                  f"interop+views {med['interop + torch_views']:.0f} {[round(x) for x in res['interop + torch_views']]}, "
                  f"ratio {med['interop + torch_views'] / med['raw']:.3f}", flush=True)


if __name__ == "__main__":
    main()
