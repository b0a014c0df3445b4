"""The other process in the DMA transport tests: ``python tests/dma_peer.py MODE SOCKET_FD [ARG]``.

It talks over the SOCK_SEQPACKET socket it inherits and prints one line per event on stdout (the test reads them).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
import time

import numpy as np

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.tensors.dma import FramePool
from interop.transport import FrameReceiver, FrameSender, commit


def spawn(mode: str, arg: str = "") -> tuple[object, socket.socket]:
    """Start this script as a peer on one end of a new SOCK_SEQPACKET pair; returns (Popen, our end)."""
    import subprocess

    from interop.transport import seqpacket_pair

    ours, theirs = seqpacket_pair()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, str(theirs.fileno()), arg],
                         pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    theirs.close()
    return p, ours


def read_line(p: object, timeout: float = 20.0) -> str:
    """The peer's next stdout line (fails the test after ``timeout`` seconds)."""
    import select

    out = p.stdout  # type: ignore[attr-defined]
    if not select.select([out], [], [], timeout)[0]:
        raise AssertionError(f"the peer printed nothing within {timeout} s")
    return out.readline().strip()


def fill(frame: object, value: int) -> None:
    """Write ``value`` into every plane of a DMA frame through a WRITE mapping."""
    with interop.map(frame, MemoryType.CPU, mode=AccessMode.WRITE) as c:  # type: ignore[arg-type]
        for t in c:
            np.asarray(t)[:] = value


def say(*a: object) -> None:
    print(*a, flush=True)


def main() -> int:
    mode, fd = sys.argv[1], int(sys.argv[2])
    arg = sys.argv[3] if len(sys.argv) > 3 else ""
    sock = socket.socket(fileno=fd)
    if mode == "write_received":  # write into a frame the parent sent, then release it (DONE)
        rx = FrameReceiver(sock)
        f = rx.recv(timeout=10)
        with interop.map(f, MemoryType.CPU, mode=AccessMode.READ_WRITE) as c:
            y, uv = np.asarray(c[0]), np.asarray(c[1])
            say("saw", int(y[0, 0]), int(uv[0, 0, 0]))
            y[:] = 0x5A
            uv[:] = 0x33
            y[3, 7] = 7
            del y, uv  # numpy views keep the buffer in use (out of the sender's pool) until they are gone
        f.release()
        time.sleep(0.2)
        return 0
    if mode == "send_own":  # the reverse: the parent writes into our frame; we read its writes through our mapping
        pool = FramePool(FrameFormat.NV12, 64, 48, 1)
        tx = FrameSender(sock)
        f = pool.acquire()
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c[0])[:] = 0x11
        tx.send(f)
        ok = tx.wait_returned(10)
        with interop.map(f, MemoryType.CPU) as c:
            say("returned", ok, int(np.asarray(c[0])[0, 0]), int(np.asarray(c[0])[47, 63]), int(np.asarray(c[1])[0, 0, 1]))
        return 0
    if mode == "hold_and_hang":  # receive frames, hold them mapped, wait to be killed
        rx = FrameReceiver(sock)
        held = []
        for _ in range(int(arg or 1)):
            f = rx.recv(timeout=10)
            held.append((f, interop.map(f, MemoryType.CPU)))
        say("holding", len(held))
        time.sleep(60)
        return 1
    if mode == "consume":  # receive N frames, check their first byte is the frame number, release them
        rx = FrameReceiver(sock)
        vals = []
        for _ in range(int(arg)):
            f = rx.recv(timeout=10)
            with interop.map(f, MemoryType.CPU) as c:
                vals.append(int(np.asarray(c[0])[0, 0]))
            f.release()
        say("values", *vals)
        time.sleep(0.2)
        return 0
    if mode == "consume_slots":  # like consume, then report how many fds came and how many buffers are kept
        rx = FrameReceiver(sock)
        vals = []
        for _ in range(int(arg)):
            f = rx.recv(timeout=10)
            with interop.map(f, MemoryType.CPU) as c:
                vals.append(int(np.asarray(c[0])[0, 0]))
            f.release()
        say("values", *vals)
        say("fds", rx.fds_received, "slots", rx.slots_held)
        time.sleep(0.2)
        return 0
    if mode == "truncate":  # a hostile peer: try to shrink, grow and write-seal the buffer it received
        rx = FrameReceiver(sock)
        f = rx.recv(timeout=10)
        bfd = f[0].fd
        out = []
        for what, fn in (("shrink", lambda: os.ftruncate(bfd, 0)), ("grow", lambda: os.ftruncate(bfd, 1 << 24)),
                         ("seal_write", lambda: fcntl.fcntl(bfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE))):
            try:
                fn()
                out.append(f"{what}=allowed")
            except OSError as e:
                out.append(f"{what}={errno.errorcode[e.errno]}")
        say("attempts", *out)
        f.release()
        time.sleep(0.2)
        return 0
    if mode == "produce_then_die":  # send one whole frame, then die in the middle of writing the next one
        pool = FramePool(FrameFormat.NV12, 64, 48, 2)
        tx = FrameSender(sock)
        f = pool.acquire()
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c[0])[:] = 1
        tx.send(f)
        f.release()
        g = pool.acquire()
        c = interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE)
        np.asarray(c[0])[:24] = 2  # half the frame written
        say("writing")
        time.sleep(60)
        return 1
    if mode == "produce":  # send N frames numbered 1..N, wait until all came back
        pool = FramePool(FrameFormat.NV12, 64, 48, 2)
        tx = FrameSender(sock)
        for i in range(1, int(arg) + 1):
            f = pool.acquire(timeout=10)
            with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
                np.asarray(c[0])[:] = i
            tx.send(f)
            f.release()
        say("sent", tx.sent, "returned", tx.wait_returned(10), "free", pool.free_count)
        return 0
    if mode == "write_and_commit":  # a writer process of the parent's pool fills a buffer and commits it
        rx = FrameReceiver(sock, writer=True)
        f = rx.recv(timeout=10)
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c[0])[:] = int(arg)
        commit(f)
        f.release()
        say("committed")
        time.sleep(0.2)
        return 0
    if mode == "write_half_and_hang":  # a writer process of the parent's pool dies mid-write (marker stays WRITING)
        rx = FrameReceiver(sock, writer=True)
        f = rx.recv(timeout=10)
        c = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE)
        np.asarray(c[0])[:10] = 0xEE
        say("writing")
        time.sleep(60)
        return 1
    say("unknown mode", mode)
    return 2


if __name__ == "__main__":
    sys.exit(main())
