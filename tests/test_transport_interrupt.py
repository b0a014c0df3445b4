"""A Ctrl-C inside FrameSender.send() never gives back a buffer the consumer may have, and never leaks the send lock.

Python raises a signal's exception (KeyboardInterrupt) as a system call returns: one landing while send() sends the
message is raised after the consumer got it. The frame then stays in flight (its buffer comes back with the
consumer's release, or when the sender closes), never back in the pool under the consumer's views. One landing
while send() takes its lock is raised with nothing sent: the lock is let go and the buffer comes back at once.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
import time

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.tensors.dma import FramePool, PoolTimeoutError
from interop.transport import FrameReceiver, FrameSender, seqpacket_pair


class _InterruptedAfterSend:
    """The sender's socket, with a Ctrl-C raised as the next send returns (the message already went out)."""

    def __init__(self, sock):
        self._sock = sock
        self.armed = True

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def _after(self, n):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return n

    def send(self, *args):
        return self._after(self._sock.send(*args))

    def sendmsg(self, *args):
        return self._after(self._sock.sendmsg(*args))


def _write(pool, value: int):
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
    return f


def _send(pool, tx, value: int) -> None:
    f = _write(pool, value)
    tx.send(f)
    f.release()


@contextlib.contextmanager
def _connected(buffers: int, **sender):
    """A pool of ``buffers`` GRAY8 frames, a sender (``sender``: its options) and a receiver; closed after."""
    pool = FramePool(FrameFormat.GRAY8, 32, 16, buffers)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a, **sender), FrameReceiver(b)
    try:
        yield pool, tx, rx
    finally:
        tx.close()
        rx.close()
        pool.close()


@pytest.mark.parametrize("path", ["first send of a buffer (fds)", "planned (slot reference)", "fds with every frame"])
def test_a_ctrl_c_as_the_message_goes_out_keeps_the_frame_in_flight(path):
    with _connected(1, **({"slots": 0} if path == "fds with every frame" else {})) as (pool, tx, rx):
        if path == "planned (slot reference)":
            for k in range(3):  # the buffer crossed and its plan is made
                _send(pool, tx, k)
                rx.recv_views(timeout=5).release()
                assert tx.wait_returned(5)
        tx._sock = _InterruptedAfterSend(tx._sock)
        f = _write(pool, 77)
        with pytest.raises(KeyboardInterrupt):
            tx.send(f)
        f.release()
        assert tx.in_flight == 1  # it went out: held for the consumer
        with pytest.raises(PoolTimeoutError):  # so not back in the pool, where the next frame would overwrite it
            pool.acquire(timeout=0.05)
        views = rx.recv_views(timeout=5)  # the consumer has it, intact
        assert int(views[0][0, 0]) == 77
        views.release()
        assert tx.wait_returned(5) and tx.in_flight == 0
        _send(pool, tx, 78)  # and the sender goes on
        views = rx.recv_views(timeout=5)
        assert int(views[0][0, 0]) == 78
        views.release()
        assert tx.wait_returned(5)


def test_a_ctrl_c_while_send_takes_its_lock_lets_the_lock_go():
    with _connected(2) as (pool, tx, rx):
        for k in range(3):
            _send(pool, tx, k)
            rx.recv_views(timeout=5).release()
            assert tx.wait_returned(5)
        lock = tx._send_lock
        lock.acquire()

        def ctrl_c() -> None:  # let go of the lock and interrupt the main thread, as a SIGINT does
            time.sleep(0.2)
            lock.release()
            _thread.interrupt_main()

        threading.Thread(target=ctrl_c).start()
        f = _write(pool, 5)
        with pytest.raises(KeyboardInterrupt):
            tx.send(f)
            time.sleep(5)  # the interrupt lands in send() or, at the latest, here
        f.release()
        assert not lock.locked()
        done = threading.Event()

        def again() -> None:
            _send(pool, tx, 6)
            done.set()

        threading.Thread(target=again, daemon=True).start()
        assert done.wait(5), "a later send() hung on the lock"
        while True:  # every frame sent reaches the consumer and comes back
            try:
                views = rx.recv_views(timeout=0.5)
            except TimeoutError:
                break
            views.release()
        assert tx.wait_returned(5) and tx.in_flight == 0
