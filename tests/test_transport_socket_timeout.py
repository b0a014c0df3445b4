"""FrameReceiver over a socket given a timeout of its own (``sock.settimeout(x)``): the caller's timeout rules.

CPython waits up to the socket's own timeout inside every call on it, even a non-blocking one; FrameReceiver makes its
socket blocking, so a poll returns at once, a short timeout is kept, ``timeout=None`` waits for the frame rather than
raising the socket's TimeoutError, and a DONE never waits (nor takes the producer for gone).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.tensors.dma import FramePool
from interop.transport import FrameReceiver, FrameSender, TransportTimeoutError, seqpacket_pair


@pytest.fixture
def pair():
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 2)
    a, b = seqpacket_pair()
    b.settimeout(1.0)
    tx, rx = FrameSender(a), FrameReceiver(b)
    yield pool, tx, rx
    tx.close()
    rx.close()
    pool.close()


def _send(pool, tx, value: int) -> None:
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
    tx.send(f)
    f.release()


def _value(got) -> int:
    if isinstance(got, interop.Frame):
        with interop.map(got, MemoryType.CPU) as c:
            return int(np.asarray(c[0])[0, 0])
    return int(got[0][0, 0])


@pytest.mark.parametrize("how", ["recv", "recv_views"])
@pytest.mark.parametrize("timeout", [0, 0.1])
def test_the_callers_timeout_not_the_sockets(pair, how, timeout):
    pool, tx, rx = pair
    t0 = time.monotonic()
    with pytest.raises(TransportTimeoutError):
        getattr(rx, how)(timeout=timeout)
    assert time.monotonic() - t0 < timeout + 0.5  # not the socket's 1 s
    _send(pool, tx, 9)  # a queued frame is returned, whatever the timeout
    got = getattr(rx, how)(timeout=timeout)
    assert _value(got) == 9
    got.release()


@pytest.mark.parametrize("how", ["recv", "recv_views"])
def test_no_timeout_waits_past_the_sockets_own(how):
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 2)
    a, b = seqpacket_pair()
    b.settimeout(0.3)
    tx, rx = FrameSender(a), FrameReceiver(b)
    try:
        assert b.gettimeout() is None  # the receiver's socket is blocking: the caller's timeout rules
        sender = threading.Timer(0.8, _send, (pool, tx, 4))
        sender.start()
        got = getattr(rx, how)(timeout=None)
        sender.join()
        assert _value(got) == 4
        got.release()  # the DONE goes out (a socket timeout made it wait, then took the producer for gone)
        assert tx.wait_returned(5) and not rx._done.gone
    finally:
        tx.close()
        rx.close()
        pool.close()


def test_two_threads_receiving_on_a_socket_that_had_a_timeout(pair):
    """Another thread taking the message between a wake-up and the receive: the other goes on waiting (a socket
    timeout made that receive wait the socket's timeout and raise the builtin TimeoutError)."""
    pool, tx, rx = pair
    got, errors = [], []

    def receive() -> None:
        try:
            v = rx.recv_views(timeout=None)
            got.append(_value(v))
            v.release()
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    threads = [threading.Thread(target=receive) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    _send(pool, tx, 1)
    time.sleep(1.5)  # past the socket's own timeout: the thread that did not get the frame is still waiting
    _send(pool, tx, 2)
    for t in threads:
        t.join(10)
    assert errors == [] and sorted(got) == [1, 2]
