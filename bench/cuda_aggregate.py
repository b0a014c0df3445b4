"""Experiment: the N-decoder NVDEC aggregate (1080p HEVC, 500 frames per decoder), raw PyAV against
interop.map + torch_views, with PyAV's default decoder threading and with FFmpeg's frame threads in every decoder
(``open_nvdec(frame_threads=True)``; raw gets the same ``thread_type = "AUTO"``). Consumers and configurations
are interleaved run by run. For each run it prints the aggregate fps and when each decoder thread finished (from
the common start): a slow run whose decoders all finish late is a slower rate for all; one with a few late
finishers is stragglers.

    python bench/cuda_aggregate.py [REPS] [N,N,...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    counts = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [7]
    clip = b.make_clip(b.clip_dir() / "libx265_1920x1080_600.mp4", "libx265", 1920, 1080, 600)
    consumers = {"raw": b._consume_raw(torch), "interop + torch_views": b._consume_interop_views(torch)}
    loops = {"default threads": b.loop_plain, "frame threads": b.loop_frame_threads}
    for c in consumers.values():
        for lp in loops.values():
            lp(clip, c, 30)
    for n in counts:
        res: dict[tuple[str, str], list[float]] = {}
        for r in range(reps):
            for lname, lp in loops.items():
                for cname, c in consumers.items():
                    secs: list[float] = []
                    fps = b.concurrent(clip, c, n, 500, torch, lp, secs)
                    res.setdefault((lname, cname), []).append(fps)
                    ends = " ".join(f"{s:.2f}" for s in sorted(secs))
                    print(f"x{n} run {r} {lname:15s} {cname:22s} {fps:7.0f} fps  threads done at [{ends}] s",
                          flush=True)
        for lname in loops:
            raw = statistics.median(res[(lname, "raw")])
            via = statistics.median(res[(lname, "interop + torch_views")])
            print(f"x{n} {lname:15s} raw {raw:6.0f} {[round(x) for x in res[(lname, 'raw')]]}  interop+views "
                  f"{via:6.0f} {[round(x) for x in res[(lname, 'interop + torch_views')]]}  ratio {via / raw:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
