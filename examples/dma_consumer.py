"""Receive DMA-BUF frames from examples/dma_producer.py and run OpenVINO text detection on them, zero-copy.

Each frame arrives as fds + layout; it is mapped to OpenVINO over the producer's own pages (no copy), inferred,
and released, which sends the buffer back to the producer's pool. Prints one JSON line at the end.

    python examples/dma_consumer.py --socket /tmp/frames.sock [--frames N]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import interop
from interop import textdet
from interop.cli_lines import error_line
from interop.transport import FrameReceiver, PeerClosedError, TransportTimeoutError, connect

# one line on stderr in the interop CLI's style ("dma_consumer: error: Type: message"); returns the exit status, 1
_error = functools.partial(error_line, "dma_consumer")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--frames", type=int, default=0, help="stop after N frames (0: until the producer stops)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait, silently, for the producer to appear and for each frame (default 60)")
    args = ap.parse_args(argv)
    try:
        rx = connect(args.socket, timeout=args.timeout)
    except (PeerClosedError, TransportTimeoutError) as e:  # no producer there, or one that never took us
        return _error(e, f"no producer took the connection at {args.socket} within {args.timeout} s: start the "
                         f"producer first: python examples/dma_producer.py --socket {args.socket} [VIDEO]")
    except interop.InteropError as e:  # interop's messages say what to do (a bad timeout, ...)
        return _error(e)
    try:
        return _run(rx, args)
    except interop.InteropError as e:
        return _error(e)


def _run(rx: FrameReceiver, args: argparse.Namespace) -> int:
    inf = None
    n, boxes = 0, 0
    t0 = time.perf_counter()
    with interop.copy_meter() as meter:
        while not args.frames or n < args.frames:
            frame = rx.recv(timeout=args.timeout)
            if frame is None:  # the producer finished (or died): we keep nothing torn
                break
            if inf is None:
                inf = interop.Inference(textdet.model_path(), input_size=textdet.input_size_for(frame.width, frame.height),
                                        mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB)
            # Inference maps the frame to OpenVINO (zero-copy over the producer's buffer) and drops that mapping
            # when the request completes, so nothing here holds a view of the buffer after release().
            out = inf.infer(frame)
            found = textdet.boxes_from_map(next(iter(out.values())), frame.width, frame.height)
            boxes += len(found)
            frame.release()  # DONE: the buffer goes back to the producer's pool
            n += 1
            if n == 1:
                t0 = time.perf_counter()  # fps over frames 2..n: model compilation excluded
            print(f"consumer: frame {n} pts={frame.pts}: {len(found)} text boxes", file=sys.stderr)
    dt = time.perf_counter() - t0
    rx.close()
    if inf is not None:
        inf.close()  # stop OpenVINO's request threads before the interpreter exits
    print(json.dumps({"frames": n, "boxes": boxes, "fps": round((n - 1) / dt, 2) if n > 1 and dt else 0.0, "copies": meter.copies,
                      "bytes_copied": meter.bytes, "torn": rx.torn, "device": inf.device if inf else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
