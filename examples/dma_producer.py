"""Decode a video into pooled DMA-BUF frames and serve them to a consumer process over a Unix socket.

Each decoded frame is written into a free buffer of a FramePool (a dma-buf heap where the kernel has one, else a
sealed memfd), committed, and sent: fds travel by SCM_RIGHTS, the layout in a small header. The consumer maps the
very same pages (zero-copy) and releases the frame when done, which returns the buffer to the pool. A consumer
that dies returns its buffers too; the producer then waits for the next consumer.

PyAV cannot decode into foreign buffers, so writing a decoded frame into its DMA buffer is one copy per frame,
made here by the producer (that is the decode step of a DMA pipeline, as a V4L2 or VA decoder would do in place).

    python examples/dma_producer.py --socket /tmp/frames.sock [VIDEO] [--frames N] [--pool 4] [--consumers 1]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import av
import numpy as np

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.cli_lines import error_line
from interop.clip import default_clip
from interop.pipeline import open_video
from interop.tensors.dma import FramePool
from interop.transport import FrameServer, PeerClosedError, TransportTimeoutError


def serve(tx, container, stream, pool: FramePool, frames: int) -> int:  # type: ignore[no-untyped-def]
    sent = 0
    for vf in container.decode(stream):
        if sent == frames:
            break
        if vf.format.name != "yuv420p":
            vf = vf.reformat(format="yuv420p")
        f = pool.acquire(timeout=30)  # waits while every buffer is with the consumer
        try:
            src = interop.map(interop.wrap(vf), MemoryType.CPU)  # views of the decoder's planes
            with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as dst:
                for s, d in zip(src, dst):
                    np.copyto(np.asarray(d), np.asarray(s))
            src.release()
            f.pts, f.time_base = vf.pts, vf.time_base
            tx.send(f)  # commits the buffer, then sends fds + layout
            sent += 1
        except PeerClosedError:
            print("producer: consumer gone; its buffers are back in the pool", file=sys.stderr)
            break
        finally:
            f.release()
    return sent


# one line on stderr in the interop CLI's style ("dma_producer: error: Type: message"); returns the exit status, 1
_error = functools.partial(error_line, "dma_producer")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("video", nargs="?", default=None)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--frames", type=int, default=60, help="frames per consumer")
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=1, help="serve this many consumers, one after another")
    ap.add_argument("--accept-timeout", type=float, default=60.0)
    args = ap.parse_args(argv)

    video = args.video or default_clip()
    try:
        container, _ = open_video(video)  # VideoInputError saying why for a missing, text, non-video file...
        with container:
            return _run(container, args)
    except TransportTimeoutError as e:  # accept() waited in vain
        return _error(e, f"no consumer connected to {args.socket} within {args.accept_timeout} s: "
                         f"start one: python examples/dma_consumer.py --socket {args.socket}")
    except interop.InteropError as e:  # interop's messages say what to do (a socket path in use, ...)
        return _error(e)
    except av.error.FFmpegError as e:
        return _error(e, f"decoding {video!r} failed: {e.strerror or e}: the file is damaged; "
                         f"re-encode it or give another video")


def _run(container, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    stream = container.streams.video[0]
    cc = stream.codec_context
    pool = FramePool(FrameFormat.I420, cc.width, cc.height, args.pool)
    kind = "dma-buf" if pool.context.is_dmabuf else "sealed memfd (no dma-buf heap here)"
    with FrameServer(args.socket) as srv:
        print(f"producer: {cc.width}x{cc.height} I420, pool of {pool.size} {kind}; listening on {args.socket}",
              file=sys.stderr, flush=True)
        for n in range(args.consumers):
            tx = srv.accept(timeout=args.accept_timeout)
            t0 = time.perf_counter()
            sent = serve(tx, container, stream, pool, args.frames)
            back = tx.wait_returned(30)
            tx.close()
            dt = time.perf_counter() - t0
            print(f"producer: consumer {n + 1}: sent {sent} frames in {dt:.2f} s, all returned: {back}, "
                  f"pool free {pool.free_count}/{pool.size}", file=sys.stderr, flush=True)
    pool.close()
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
