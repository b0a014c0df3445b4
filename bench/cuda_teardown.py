"""Experiment: is the 7-decoder aggregate's wall time quantized by NVDEC's teardown? (1080p HEVC, whole clip)

The benchmark's 7-decoder wall figures take a few values (14000 frames in ~2.54, ~2.79, ~3.04 s: steps of ~0.25 s)
while the time to the last frame varies smoothly. This times, run by run, the last frame, every close and the
end, and prints each close's end modulo 0.25 s from a fixed origin: if the slow closes end on a common phase, the
driver finishes them on a periodic tick and the wall figure is the last frame rounded up to that tick.

Variants: ``plain`` (as the benchmark), ``keepalive`` (one more NVDEC decoder of the same clip, opened before and
kept open through the run, idle: does the last close stall only when the process's last decoder goes?) and
``warm`` (interop.nvdec_warm's idle decoder: one 256x144 H.264 picture). Then one decoder at a time, file after
file (300 frames each), cold and warm: what the tick costs a pipeline that takes videos one by one.

    python bench/cuda_teardown.py [REPS] [N]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ORIGIN = time.perf_counter()
TICK = 0.25


def main() -> None:
    import torch

    from interop.benchmarks import cuda as b

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(args[0]) if args else 6
    n = int(args[1]) if len(args) > 1 else 7
    clip = b.make_clips(False, ["1080p HEVC"])["1080p HEVC"]
    frames = 2000
    raw = b._consume_raw(torch)
    b.loop_plain(clip, raw, 30)

    def run() -> dict[str, Any]:
        start = threading.Barrier(n + 1)
        rec: list[Any] = [None] * n

        def work(i: int) -> None:
            start.wait()
            c = b._nvdec(clip)
            k, last = 0, 0.0
            for vf in c.decode(video=0):
                raw(vf)
                last = time.perf_counter()
                k += 1
                if k >= frames:
                    break
            t = time.perf_counter()
            c.close()
            rec[i] = (last, t, time.perf_counter(), k)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        torch.cuda.synchronize()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
        end = time.perf_counter()
        total = sum(r[3] for r in rec)
        last_frame = max(r[0] for r in rec)
        closes = sorted(rec, key=lambda r: r[2])
        return {"wall": end - t0, "to_last": last_frame - t0, "fps": total / (end - t0),
                "fps_last": total / (last_frame - t0),
                "closes": [((r[2] - r[1]) * 1e3, (r[2] - ORIGIN) % TICK * 1e3) for r in closes],
                "t0_phase": (t0 - ORIGIN) % TICK * 1e3}

    from interop.nvdec_warm import keep_nvdec_warm, release_nvdec_warm

    out: dict[str, list[dict[str, Any]]] = {"plain": [], "keepalive": [], "warm": []}
    for r in range(reps):
        for variant in out:
            keep = None
            if variant == "keepalive":
                keep = b._nvdec(clip)
                next(keep.decode(video=0))
            if variant == "warm":
                keep_nvdec_warm(0)
            res = run()
            if keep is not None:
                keep.close()
            release_nvdec_warm()
            out[variant].append(res)
            cl = "  ".join(f"{d:5.0f}ms@{ph:3.0f}" for d, ph in res["closes"])
            print(f"x{n} run {r} {variant:9s} wall {res['wall']:.3f} s ({res['fps']:6.0f} fps)  last frame "
                  f"{res['to_last']:.3f} s ({res['fps_last']:6.0f})  start phase {res['t0_phase']:3.0f}  "
                  f"closes (duration@end phase ms): {cl}", flush=True)
    for variant, rs in out.items():
        print(f"x{n} {variant:9s} median wall fps {statistics.median(r['fps'] for r in rs):6.0f} "
              f"{[round(r['fps']) for r in rs]}; to last frame {statistics.median(r['fps_last'] for r in rs):6.0f}; "
              f"last close median {statistics.median(r['closes'][-1][0] for r in rs):.0f} ms", flush=True)
    files = 10
    for _r in range(2):
        for variant in ("cold", "warm"):
            if variant == "warm":
                keep_nvdec_warm(0)
            closes, t0 = [], time.perf_counter()
            for _ in range(files):
                c = b._nvdec(clip)
                for k, vf in enumerate(c.decode(video=0)):
                    raw(vf)
                    if k + 1 >= 300:
                        break
                t = time.perf_counter()
                c.close()
                closes.append((time.perf_counter() - t) * 1e3)
            wall = time.perf_counter() - t0
            release_nvdec_warm()
            print(f"one decoder, {files} files of 300 frames one after another, {variant}: {wall / files * 1e3:.0f} ms "
                  f"per file ({files * 300 / wall:.0f} fps); closes {[round(x) for x in closes]} ms", flush=True)


if __name__ == "__main__":
    main()
