"""Experiment: does FFmpeg's frame threading still beat PyAV's own NVDEC loop with no teardown tick in the runs?

The benchmark's "beat PyAV's single-stream figure" experiments (frame threads 1.09-1.25x) were timed cold, where
each run's time is rounded up to the driver's ~250 ms teardown tick (bench/cuda_teardown.py). Here one idle
NVDEC decoder is held for every case (interop.nvdec_warm), and raw PyAV, raw PyAV with frame threads and
open_nvdec(frame_threads=True) + torch_views(vf) take turns, RUNS times per clip.

    python bench/cuda_frame_threads_warm.py [RUNS]
"""

from __future__ import annotations

import statistics
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b
    from interop.mappers.ffmpeg_to_cuda import open_nvdec
    from interop.nvdec_warm import keep_nvdec_warm
    from interop.tensors.cuda import torch_views

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    clips = b.make_clips(False)
    raw = b._consume_raw(torch)
    keep_nvdec_warm(0)
    cases = {
        "raw PyAV": lambda p: b.loop_plain(p, raw),
        "raw PyAV + frame threads": lambda p: b.loop_plain(p, raw, frame_threads=True),
        "open_nvdec(frame_threads=True) + torch_views(vf)":
            lambda p: b.loop_plain(p, torch_views, opener=lambda q: open_nvdec(str(q), frame_threads=True)),
    }
    for name, path in clips.items():
        b.loop_plain(path, raw, 30)
        got: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(runs):
            for k, fn in cases.items():
                got[k].append(b.timed(partial(fn, path), torch))
        ref = statistics.median(got["raw PyAV"])
        for k, xs in got.items():
            m = statistics.median(xs)
            print(f"{name:12s} {k:50s} {m:7.1f} fps  {m / ref:5.3f}x raw  {[round(x, 1) for x in xs]}", flush=True)


if __name__ == "__main__":
    main()
