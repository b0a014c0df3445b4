"""DMA-BUF frames: map+release, and a full hand-off to a consumer process (send fds + layout, rebuild, map, read,
release, DONE back) per frame, beside one in-process copy of the frame and beside a copying transport (the
frame's bytes through a stream socket into the consumer's buffer, ack back), at 1080p and 4K NV12."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from . import Result, median

NAME = "dma"
SUMMARY = "DMA-BUF frames: map + release and a hand-off to another process, beside copying the frame"
REQUIRES: tuple[tuple[str, str], ...] = ()

# the consumer process: receive, map, read one byte, release (which sends DONE), until the producer closes
_CONSUMER = """
import socket, sys, numpy as np, interop
from interop.transport import FrameReceiver
rx = FrameReceiver(socket.socket(fileno=int(sys.argv[1])))
while (g := rx.recv()) is not None:
    with interop.map(g, interop.MemoryType.CPU) as c:
        np.asarray(c[0])[0, 0]
    g.release()
"""

# the copying transport's consumer: read the whole frame into its buffer, then ack
_COPY_CONSUMER = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1])); n = int(sys.argv[2]); mv = memoryview(bytearray(n))
while True:
    got = 0
    while got < n:
        k = s.recv_into(mv[got:])
        if not k:
            sys.exit(0)
        got += k
    s.send(b"k")
"""


def _time(fn: Callable[[], None], n: int) -> float:
    for _ in range(max(3, n // 10)):
        fn()
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return median(xs)


def _child(code: str, sock: socket.socket, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code, str(sock.fileno()), *args], pass_fds=[sock.fileno()])
    sock.close()
    return p


def _one_size(label: str, w: int, h: int, n: int) -> list[Result]:
    import interop
    from interop import AccessMode, FrameFormat, MemoryType
    from interop.tensors.dma import FramePool
    from interop.transport import FrameSender, seqpacket_pair

    pool = FramePool(FrameFormat.NV12, w, h, 2)
    f = pool.acquire()
    c = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE)
    for t in c.tensors if isinstance(c, interop.Frame) else [c]:
        np.asarray(t)[:] = 1
    c.release()
    nbytes = sum(t.info.nbytes for t in f)
    src = bytearray(b"\x01" * nbytes)
    dst = bytearray(nbytes)
    a, b = seqpacket_pair()
    consumer = _child(_CONSUMER, b)
    tx = FrameSender(a)
    c1, c2 = socket.socketpair()
    copier = _child(_COPY_CONSUMER, c2, str(nbytes))

    def copy() -> None:
        dst[:] = src

    def map_release() -> None:
        interop.map(f, MemoryType.CPU).release()

    def hand_off() -> None:
        tx.send(f)
        tx.wait_returned(5)  # the consumer mapped it, read it and released it

    def bytes_hand_off() -> None:
        c1.sendall(src)
        c1.recv(1)

    try:
        t_copy = _time(copy, n)
        times = {f"dma_to_cpu map+release {label}": _time(map_release, n),
                 f"hand-off to a process {label}": _time(hand_off, n),
                 f"bytes through a socket {label}": _time(bytes_hand_off, max(10, n // 3))}
    finally:
        tx.close()
        c1.close()
        consumer.wait(10)
        copier.wait(10)
        f.release()
        pool.close()
    return [Result(NAME, case, round(t / t_copy, 4), "x one frame copy",
                   {"us": round(t * 1e6, 1), "copy_us": round(t_copy * 1e6, 1), "frame_bytes": nbytes,
                    "allocator": pool.context.device}) for case, t in times.items()]


def run(quick: bool = False) -> list[Result]:
    n = 30 if quick else 300
    out: list[Result] = []
    for label, (w, h) in (("1080p", (1920, 1080)), ("4K", (3840, 2160))):
        out += _one_size(label, w, h, n)
    return out
