"""Run text detection over several videos at once: one decoder per input, one OpenVINO request pool for all.

Each input is decoded on a thread of its own (``--decode processes``: in a worker process of its own, whose frames
cross to this process as buffers of the worker's pool: the fd once, then a slot number per frame) and its frames go
into one ``Inference`` whose requests stay busy with frames of every stream. A stream that fails (an unreadable
file, a worker that dies) ends with its error; the others go on. Usage:

    python examples/many_streams.py [VIDEO ...] [--frames N] [--decode threads|processes]

Without a video it runs the bundled clip twice. Exit status 1 when a stream failed.
"""

from __future__ import annotations

import argparse
import sys
import threading

from interop import textdet
from interop.clip import default_clip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("videos", nargs="*")
    ap.add_argument("--frames", type=int, default=60, help="frames per stream at most")
    ap.add_argument("--decode", choices=["threads", "processes"], default="threads",
                    help="decode each input on a thread of this process (no copy) or in a worker process")
    args = ap.parse_args(argv)
    if args.frames < 1:
        ap.error(f"--frames must be at least 1, not {args.frames}")
    need = textdet.missing_for_detection("av")
    if need:
        print(f"many_streams: cannot run here: needs {need}", file=sys.stderr)
        return 2
    from interop.streams import StreamError, run_streams

    videos = args.videos or [default_clip()] * 2
    shown: dict[int, int] = {}
    lock = threading.Lock()  # the callbacks run on the run's result thread, the summary on ours

    def on_progress(stream: int, done: int, total: int | None) -> None:
        with lock:  # a line every 20 frames per stream
            if done == 0 or done - shown.get(stream, 0) >= 20 or done == total:
                shown[stream] = done
                print(f"[stream {stream}] {done}/{total if total else '?'} frames", flush=True)

    try:
        run = run_streams(videos, frames=args.frames, on_progress=on_progress, decode=args.decode)
    except StreamError as e:  # no input could be opened at all
        print(f"many_streams: {e}", file=sys.stderr)
        return 1
    failed = 0
    for s in run.streams:
        boxes = sum(len(s.run.boxes.get(i, [])) for i in range(s.run.frames))
        line = f"stream {s.index} {s.run.video}: {s.run.frames} frames, {boxes} text boxes, " \
               f"{s.worker_copies} counted copies" + (f" ({s.worker_copy})" if s.worker_copies else "")
        if s.error is not None:
            failed += 1
            line += f"; ended early: {s.error_type}: {s.error}"
        print(line)
    print(f"{len(run.streams)} streams on {run.device}, decoded in {run.decode}: {run.frames} frames at "
          f"{run.fps:.1f} fps together; copies {run.total_copies}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
