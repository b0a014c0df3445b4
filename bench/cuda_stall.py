"""Experiment: where does a decoder thread of the N-decoder NVDEC aggregate lose its ~250 ms? (1080p HEVC)

Each thread records when it opened its container, when its first frame came out, its longest gap between
two frames (and at which frame), when its last frame came out and how long closing the container took. Variants: all threads open and start decoding at once (as the benchmark), and
the same with a lock held by each thread from av.open until its first frame (decoder creation serialized).

    python bench/cuda_stall.py [REPS] [N] [--keep-nvcuvid] [--long] [--views]

``--long``: the benchmark's 2000-frame HEVC clip, whole, per decoder (default: 500 frames of a 600-frame clip);
``--views``: the consumer is interop.map + torch_views (default: raw PyAV capsules).

``--keep-nvcuvid`` loads libnvcuvid.so.1 once for the whole process first (as interop's open_nvdec does), so
closing the last decoder does not unload it.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(args[0]) if args else 5
    n = int(args[1]) if len(args) > 1 else 7
    if "--keep-nvcuvid" in sys.argv:
        import ctypes

        keep = ctypes.CDLL("libnvcuvid.so.1")
        print(f"holding {keep._name}", flush=True)
    if "--long" in sys.argv:
        clip, frames = b.make_clips(False, ["1080p HEVC"])["1080p HEVC"], 2000
    else:
        clip, frames = b.make_clip(b.clip_dir() / "libx265_1920x1080_600.mp4", "libx265", 1920, 1080, 600), 500
    raw = b._consume_interop_views(torch) if "--views" in sys.argv else b._consume_raw(torch)
    b.loop_plain(clip, raw, 30)

    def run(serial: bool) -> tuple[float, list[tuple[float, float, float, int, float, float]]]:
        lock = threading.Lock()
        start = threading.Barrier(n + 1)
        rec: list[Any] = [None] * n

        def work(i: int) -> None:
            start.wait()
            t0 = time.perf_counter()
            if serial:
                lock.acquire()
            c = b._nvdec(clip)
            t_open = time.perf_counter()
            first = None
            last = t_open
            gap, at, k = 0.0, -1, 0
            for vf in c.decode(video=0):
                raw(vf)
                now = time.perf_counter()
                if first is None:
                    first = now
                    if serial:
                        lock.release()
                elif now - last > gap:
                    gap, at = now - last, k
                last = now
                k += 1
                if k >= frames:
                    break
            c.close()
            rec[i] = (t_open - t0, first - t0, gap, at, last - t0, time.perf_counter() - last)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        torch.cuda.synchronize()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
        return n * frames / (time.perf_counter() - t0), rec

    res: dict[bool, list[float]] = {False: [], True: []}
    for r in range(reps):
        for serial in (False, True):
            fps, rec = run(serial)
            res[serial].append(fps)
            print(f"x{n} run {r} {'serial first frame' if serial else 'all at once':18s} {fps:6.0f} fps", flush=True)
            for o, f, g, at, end, close in sorted(rec, key=lambda x: x[4]):
                print(f"    open {o * 1e3:6.1f} ms  first frame {f * 1e3:6.1f} ms  longest gap {g * 1e3:6.1f} ms "
                      f"(frame {at:3d})  last frame {end:5.2f} s  close {close * 1e3:6.1f} ms", flush=True)
    for serial in (False, True):
        print(f"x{n} {'serial first frame' if serial else 'all at once':18s} median {statistics.median(res[serial]):6.0f} "
              f"{[round(x) for x in res[serial]]}", flush=True)


if __name__ == "__main__":
    main()
