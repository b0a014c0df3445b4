"""A FORGET queued while the producer's send lock is held goes out once the lock is let go, not with a later send.

A buffer that had a slot can be closed or collected at any allocation, also inside FrameSender._send_slots (the
collector runs a weakref callback there) or on another thread while a send holds the lock. At the end of a stream
no later send comes, so the queued FORGET must leave when the send that held the lock ends: otherwise the consumer
keeps the fd until the connection closes.
"""

from __future__ import annotations

import threading

import pytest

from interop import FrameFormat
from interop.tensors.dma import DMAContext, buffers_of
from interop.transport import FrameReceiver, FrameSender, TransportTimeoutError, seqpacket_pair


@pytest.fixture
def pair():
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    rx._done.start()
    yield tx, rx
    tx.close()
    rx.close()


def _cross(tx, rx, frame) -> None:
    tx.send(frame)
    g = rx.recv(timeout=5)
    assert g is not None
    g.release()
    assert tx.wait_returned(5)


def test_forget_queued_inside_a_send_goes_out_when_that_send_ends(pair, monkeypatch):
    tx, rx = pair
    ctx = DMAContext()
    old, last = ctx.alloc_frame(FrameFormat.GRAY8, 16, 16), ctx.alloc_frame(FrameFormat.GRAY8, 16, 16)
    _cross(tx, rx, old)
    assert rx.slots_held == 1
    old_buf = buffers_of(old)[0]
    refs = tx._slots.refs

    def closing_inside(bufs, forgotten):  # what a collection inside the critical section does: the old buffer closes
        out = refs(bufs, forgotten)  # the new buffer takes another slot: the old one is still held here
        assert tx._send_lock.locked()
        old.release()
        old_buf.close()
        return out

    monkeypatch.setattr(tx._slots, "refs", closing_inside)
    _cross(tx, rx, last)  # the stream's last frame: no send after it
    assert rx.slots_held == 2
    with pytest.raises(TransportTimeoutError):
        rx.recv(timeout=0.3)  # handles the FORGET that the send queued
    assert rx.slots_held == 1, "the FORGET queued during the last send was never sent"
    last.release()


def test_forget_from_another_thread_while_a_send_holds_the_lock(pair):
    tx, rx = pair
    ctx = DMAContext()
    old, last = ctx.alloc_frame(FrameFormat.GRAY8, 16, 16), ctx.alloc_frame(FrameFormat.GRAY8, 16, 16)
    _cross(tx, rx, old)
    old_buf = buffers_of(old)[0]
    with tx._send_lock:  # a send in progress on this thread; the buffer closes on another
        t = threading.Thread(target=old_buf.close)
        t.start()
        t.join(5)
        assert tx._forgets, "the FORGET was not queued while the lock was held"
    tx._after_send()  # what the send that held the lock does when it lets go
    with pytest.raises(TransportTimeoutError):
        rx.recv(timeout=0.3)
    assert rx.slots_held == 0
    old.release()
    last.release()
