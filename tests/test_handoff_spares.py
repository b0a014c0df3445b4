"""FrameReceiver.recv_views() makes the views of the next frame in a known layout before it waits (a spare), and
polls without a select().

- A spare holds no frame: dropped unused (the receiver closed or dropped, its layout replaced) it sends no DONE;
  each frame handed out sends exactly one.
- A spare is handed out once: two threads receiving at once get distinct holds, each with its own frame's DONE.
- A view of a frame that came after its spare was made holds that frame until it is gone, as any view does.
- ``timeout=0`` (recv_views and recv) returns a queued frame, else raises at once, without a select().
"""

from __future__ import annotations

import gc
import logging
import threading
import time

import numpy as np
import pytest

import interop
import interop.transport as transport
from interop import AccessMode, FrameFormat, MemoryType
from interop.tensors.dma import FramePool, PoolTimeoutError
from interop.transport import FrameReceiver, FrameSender, TransportTimeoutError, seqpacket_pair


def _send(pool, tx, value: int) -> int:
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
    fid = tx.send(f)
    f.release()
    return fid


def _prepare_spare(rx) -> None:
    """A poll with nothing queued: recv_views makes the spare of the layout it used last, then finds no frame."""
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0)
    assert rx._spares, "no spare was made before the wait"


def _warm(pool, tx, rx, frames: int = 4) -> None:
    """Frames through recv_views until its layouts are known (past the general path), each released."""
    for k in range(frames):
        _send(pool, tx, k)
        rx.recv_views(timeout=5).release()
        assert tx.wait_returned(5)


@pytest.mark.parametrize("end", ["close", "drop"])
def test_a_spare_dropped_unused_sends_no_done(end, caplog):
    pool = FramePool(FrameFormat.NV12, 64, 32, 2)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    caplog.set_level(logging.WARNING, logger="interop")
    _warm(pool, tx, rx)
    _prepare_spare(rx)
    if end == "close":
        rx.close()
        assert not rx._spares
    del rx
    gc.collect()
    time.sleep(0.2)  # the sender's reader thread sees whatever came, and the EOF
    assert tx.returned == 4 and tx.sent == 4
    assert tx.bad_messages == 0, "a spare dropped unused sent a DONE"
    assert not [r for r in caplog.records if "hold" in r.getMessage()]
    tx.close()
    pool.close()


def test_a_spare_dropped_with_its_layout_sends_no_done(link, caplog):
    """The pool closes a buffer (FORGET): the layouts over it go, and their spares with them, unused, while the
    receiver goes on."""
    pool, tx, rx = link
    caplog.set_level(logging.WARNING, logger="interop")
    _warm(pool, tx, rx)
    _prepare_spare(rx)
    pool.close()  # both buffers are free: both are forgotten
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0.2)  # takes the FORGETs
    assert not rx._spares and rx.slots_held == 0
    gc.collect()
    time.sleep(0.2)
    assert tx.returned == 4 and tx.bad_messages == 0
    assert not [r for r in caplog.records if "hold" in r.getMessage()]


def test_each_frame_handed_out_sends_exactly_one_done(link):
    pool, tx, rx = link
    _warm(pool, tx, rx)
    for k in range(20):
        _prepare_spare(rx)
        fid = _send(pool, tx, k)
        v = rx.recv_views(timeout=5)
        assert v.frame_id == fid and (v[0] == k).all()
        del v  # dropped, not released: the hold's end sends the DONE
        assert tx.wait_returned(5)
    assert tx.returned == tx.sent == 24 and tx.bad_messages == 0


def test_a_view_of_a_frame_received_after_a_spare_was_made_holds_the_frame():
    pool = FramePool(FrameFormat.NV12, 64, 32, 1)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    _warm(pool, tx, rx)
    for k in range(4):
        _prepare_spare(rx)
        _send(pool, tx, 10 + k)
        v = rx.recv_views(timeout=5)
        assert type(v._shape).__name__ == "_ViewLayout"  # by the fast path, from the spare
        y = v[0][2:4]
        v.release()
        del v
        gc.collect()
        assert tx.in_flight == 1
        with pytest.raises(PoolTimeoutError):
            pool.acquire(timeout=0.1)  # the producer cannot reuse the buffer while y is alive
        assert (y == 10 + k).all()
        del y
        assert tx.wait_returned(5)
    tx.close()
    rx.close()
    pool.close()


def test_two_threads_receiving_at_once_get_distinct_holds():
    """Two consumer threads on one receiver, every frame in one layout (a pool of one buffer: one spare to race
    for): each frame reaches one thread, with a hold of its own whose DONE is that frame's."""
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 1)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    for k in range(4):
        _send(pool, tx, k)
        rx.recv_views(timeout=5).release()
        assert tx.wait_returned(5)
    got: list[tuple[int, int, int]] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            while True:
                v = rx.recv_views(timeout=5)
                if v is None:
                    return
                got.append((v.frame_id, v._hold.token, int(v[0][0, 0])))
                v.release()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    sent = {}
    for k in range(200):
        sent[_send(pool, tx, k % 251)] = k % 251  # acquire waits for the consumer's DONE of the last frame
    assert tx.wait_returned(5)
    tx.close()
    for t in threads:
        t.join(10)
    assert not errors
    assert sorted(fid for fid, _, _ in got) == sorted(sent)
    assert all(fid == token and sent[fid] == value for fid, token, value in got)
    assert tx.returned == tx.sent == 204 and tx.bad_messages == 0
    rx.close()
    pool.close()


class _CountingSelect:
    """The transport's ``select`` module, counting select() calls that wait on one socket (the receiver's: its DONE
    thread selects on a pipe of its own)."""

    def __init__(self, sock) -> None:
        self.calls = 0
        self.sock = sock
        self.real = transport.select

    def __getattr__(self, name: str):
        return getattr(self.real, name)

    def select(self, rd, *a):  # type: ignore[no-untyped-def]
        self.calls += self.sock in rd
        return self.real.select(rd, *a)


@pytest.mark.parametrize("how", ["recv_views", "recv"])
def test_a_poll_raises_at_once_without_a_select(link, monkeypatch, how):
    pool, tx, rx = link
    counting = _CountingSelect(rx._sock)
    monkeypatch.setattr(transport, "select", counting)
    receive = getattr(rx, how)
    with pytest.raises(TransportTimeoutError):
        receive(timeout=0)
    assert counting.calls == 0
    _send(pool, tx, 7)
    g = receive(timeout=0)  # a frame already queued is returned
    assert g is not None and g.metadata["frame_id"] == 1
    g.release()
    with pytest.raises(TransportTimeoutError):
        receive(timeout=0.0)
    assert counting.calls == 0
    with pytest.raises(TransportTimeoutError):
        receive(timeout=0.05)  # a real timeout still waits in select()
    assert counting.calls >= 1


def test_a_spare_made_as_another_thread_forgets_its_buffers_is_not_kept(monkeypatch):
    """Another thread's FORGET (the slot table's version moves on, the layouts go) landing while this one makes the
    spare of the layout it used last: that spare would keep the forgotten buffer mapped until the next drop."""
    pool = FramePool(FrameFormat.GRAY8, 64, 32, 1)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    try:
        _warm(pool, tx, rx)
        real = transport._spare_views

        def forget_meanwhile(lay):
            monkeypatch.setattr(transport, "_spare_views", real)
            rx._table.version += 1  # what a FORGET does to the table, then to recv_views' layouts
            rx._drop_layouts()
            return real(lay)

        monkeypatch.setattr(transport, "_spare_views", forget_meanwhile)
        with pytest.raises(TransportTimeoutError):
            rx.recv_views(timeout=0)
        assert rx._spares == {}
        with pytest.raises(TransportTimeoutError):  # nor made on a later call for that layout
            rx.recv_views(timeout=0)
        assert rx._spares == {}
    finally:
        tx.close()
        rx.close()
        pool.close()


def test_the_producer_gone_lets_go_of_the_layouts_and_spares():
    """At the end of the stream (the producer closed) recv_views' layouts and spares, which keep the buffers'
    mappings, go at once, not when the receiver is closed or collected."""
    pool = FramePool(FrameFormat.GRAY8, 64, 32, 1)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    try:
        _warm(pool, tx, rx)
        _prepare_spare(rx)
        tx.close()
        assert rx.recv_views(timeout=5) is None
        assert rx._spares == {} and not any(rx._view_layouts)
    finally:
        rx.close()
        pool.close()
