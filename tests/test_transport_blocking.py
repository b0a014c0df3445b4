"""Every call of the frame transport that can wait returns within its timeout when the peer stalls, and releasing a
received frame (also from a GC finalizer) never waits on the producer."""

from __future__ import annotations

import array
import gc
import socket
import threading
import time

import pytest

from interop import FrameFormat, InteropError
from interop.tensors.dma import DMAContext
from interop.transport import (
    FrameReceiver,
    FrameSender,
    FrameServer,
    InvalidTimeoutError,
    PeerClosedError,
    TransportTimeoutError,
    _encode_frame,
    connect,
    seqpacket_pair,
)

SLACK = 1.0  # scheduling noise on a loaded 2-core machine; the waits under test are far longer without the fix


def _timed(fn, *a, **kw):
    t = time.monotonic()
    try:
        return fn(*a, **kw), None, time.monotonic() - t
    except BaseException as e:  # noqa: BLE001 - the caller asserts on the type
        return None, e, time.monotonic() - t


def _in_thread(fn, *a, **kw) -> dict:
    """Run fn in a daemon thread; the dict gets 'result'/'error' and 'done' (an Event)."""
    out: dict = {"done": threading.Event()}

    def run() -> None:
        try:
            out["result"] = fn(*a, **kw)
        except BaseException as e:  # noqa: BLE001
            out["error"] = e
        out["done"].set()

    threading.Thread(target=run, daemon=True).start()
    return out


def _fill_consumer(tx: FrameSender, frame) -> int:
    """Send until the stalled consumer's socket is full (send(timeout=0) times out); returns frames sent."""
    n = 0
    while True:
        try:
            tx.send(frame, timeout=0)
        except TransportTimeoutError:
            return n
        n += 1
        assert n < 10_000, "the consumer's socket never filled"


def test_send_to_a_stalled_consumer_times_out_and_locks_nothing():
    a, b = seqpacket_pair()  # b: a consumer that never reads
    tx = FrameSender(a)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    sent = _fill_consumer(tx, f)
    assert sent > 0 and tx.in_flight == sent
    res, err, took = _timed(tx.send, f, timeout=0.3)
    assert isinstance(err, TransportTimeoutError) and isinstance(err, TimeoutError) and isinstance(err, InteropError)
    assert "did not read" in str(err) and 0.25 <= took < 0.3 + SLACK
    assert tx.in_flight == sent  # the frame that timed out is not held

    # a send blocked with no timeout holds no lock: in_flight and wait_returned(timeout) answer at once
    blocked = _in_thread(tx.send, f)
    time.sleep(0.1)
    assert not blocked["done"].is_set()
    _, err, took = _timed(lambda: tx.in_flight)
    assert err is None and took < SLACK
    res, err, took = _timed(tx.wait_returned, timeout=0.2)
    assert res is False and err is None and took < 0.2 + SLACK
    # the consumer goes away: the blocked send ends with PeerClosedError, every buffer comes back
    b.close()
    assert blocked["done"].wait(5)
    assert isinstance(blocked.get("error"), PeerClosedError)
    assert tx.wait_returned(5) and tx.in_flight == 0
    tx.close()
    f.release()


def test_recv_from_a_stalled_producer_times_out_and_timeout_zero_polls():
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    _, err, took = _timed(rx.recv, timeout=0.3)
    assert isinstance(err, TransportTimeoutError) and isinstance(err, TimeoutError) and 0.25 <= took < 0.3 + SLACK
    _, err, took = _timed(rx.recv, timeout=0)
    assert isinstance(err, TimeoutError) and took < SLACK
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    tx.send(f)
    time.sleep(0.05)
    g = rx.recv(timeout=0)  # a frame is queued: timeout=0 polls and returns it
    assert g is not None and g.format is FrameFormat.GRAY8
    g.release()
    assert tx.wait_returned(5)
    tx.close()
    rx.close()
    f.release()


@pytest.mark.parametrize("bad", [float("nan"), -1, -0.001, float("-inf")])
def test_nan_and_negative_timeouts_are_typed_errors(bad):
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    for call in (lambda: rx.recv(timeout=bad), lambda: tx.send(f, timeout=bad), lambda: tx.wait_returned(bad)):
        with pytest.raises(InvalidTimeoutError, match="timeout must be >= 0"):
            call()
    assert tx.in_flight == 0  # a refused send holds nothing
    with pytest.raises(TypeError):
        rx.recv(timeout="1")
    with pytest.raises(InvalidTimeoutError):
        connect("/nonexistent/frames.sock", timeout=bad)
    tx.close()
    rx.close()
    f.release()


def test_accept_with_no_consumer_times_out(tmp_path):
    with FrameServer(str(tmp_path / "s.sock")) as srv:
        _, err, took = _timed(srv.accept, timeout=0.3)
        assert isinstance(err, TransportTimeoutError) and 0.25 <= took < 0.3 + SLACK
        _, err, took = _timed(srv.accept, timeout=0)
        assert isinstance(err, TimeoutError) and took < SLACK


def test_connect_to_a_server_that_never_accepts_times_out(tmp_path):
    path = str(tmp_path / "busy.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(0)  # a stalled server: never accepts, its backlog fills
    held = []
    try:
        _, err, took = _timed(connect, path, timeout=0.5)
        while err is None:  # the backlog took that one; fill it
            held.append(_)
            assert len(held) < 64
            _, err, took = _timed(connect, path, timeout=0.5)
        assert isinstance(err, TransportTimeoutError) and 0.45 <= took < 0.5 + SLACK
        assert "did not accept" in str(err)
    finally:
        for r in held:
            r.close()
        srv.close()
    _, err, took = _timed(connect, str(tmp_path / "nobody.sock"), timeout=0.2)
    assert isinstance(err, PeerClosedError) and isinstance(err, ConnectionError) and took < 0.2 + SLACK


def _raw_frame(sock: socket.socket, fid: int, frame) -> None:
    bufs = [frame[0].buffer]
    msg = _encode_frame(fid, frame, bufs, 0, 2**64 - 1)
    sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [bufs[0].fd]))])


def _done_ids(sock: socket.socket) -> list[int]:
    import struct

    out = []
    while True:
        try:
            m = sock.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        out.append(struct.unpack_from("<4sHHQ", m)[3])


def test_release_never_blocks_when_the_producer_stops_reading_done():
    """A producer that reads no DONE fills its socket; releases (and finalizers) still return at once; the DONEs
    queued meanwhile all arrive once the producer reads again."""
    prod, b = seqpacket_pair()
    rx = FrameReceiver(b)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    n = 400  # more DONEs than the producer's socket holds
    worst = 0.0
    for i in range(1, n + 1):
        _raw_frame(prod, i, f)
        g = rx.recv(timeout=5)
        t = time.monotonic()
        if i % 2:
            g.release()
        else:
            del g  # the finalizer path
            gc.collect()
        worst = max(worst, time.monotonic() - t)
    assert worst < SLACK
    got: list[int] = []
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        got += _done_ids(prod)
        time.sleep(0.01)
    assert sorted(got) == list(range(1, n + 1))  # every DONE arrived, none twice
    rx.close()
    prod.close()
    f.release()


def test_release_after_the_producer_is_gone_returns_at_once():
    prod, b = seqpacket_pair()
    rx = FrameReceiver(b)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    _raw_frame(prod, 1, f)
    g = rx.recv(timeout=5)
    prod.close()
    _, err, took = _timed(g.release)
    assert err is None and took < SLACK
    assert rx.recv(timeout=5) is None
    rx.close()
    f.release()


def test_producer_that_never_reads_done_is_dropped_after_the_bound():
    """Past MAX_PENDING unsent DONEs the producer is treated as gone: releases stay non-blocking and the queue stops
    growing (documented in FrameReceiver)."""
    prod, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.MAX_PENDING = 8  # the bound, small for the test
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    fid = 0
    while rx.dropped_done == 0:
        fid += 1
        assert fid < 2000, "DONEs were never dropped"
        _raw_frame(prod, fid, f)
        g = rx.recv(timeout=5)
        _, err, took = _timed(g.release)
        assert err is None and took < SLACK
    assert len(rx._done._pending) == 0
    rx.close()
    prod.close()
    f.release()


def test_close_of_a_sender_blocked_in_send_wakes_it():
    a, b = seqpacket_pair()
    tx = FrameSender(a)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    _fill_consumer(tx, f)
    blocked = _in_thread(tx.send, f, timeout=30)
    time.sleep(0.1)
    tx.close()
    assert blocked["done"].wait(5)
    assert isinstance(blocked.get("error"), PeerClosedError)
    b.close()
    f.release()
