"""FrameSender's planned path: a frame over one buffer in a layout already sent from that buffer goes out as the
message of the plan made then, with frame id, sequence and pts written in.

- It is taken for a pool cycling its frames (no general-path call), and what the consumer gets is what the general
  path would send: pixels, pts (changed, removed, added), colour, time base, sequence, commit marker.
- Anything that no longer fits the plan takes the general path: another layout over the same buffer, a slot
  reassigned to another buffer, a closed buffer, a socket that is full, a timeout.
- The use count of the buffer and the frames in flight come back to zero; a plan lets go of its mapping with its
  buffer (no mapping left once the pool and its frames are gone).
"""

from __future__ import annotations

import gc
import threading
from fractions import Fraction

import numpy as np
import pytest

import interop
from interop import AccessMode, ColorSpace, FrameFormat, MemoryType
from interop.errors import InvalidTensorError
from interop.info import TensorInfo
from interop.native import dmabuf as nd
from interop.tensors.dma import DMATensor, FramePool, buffers_of, dma_frame
from interop.transport import FrameReceiver, FrameSender, TransportTimeoutError, seqpacket_pair


def _round_trip(tx, rx, f, timeout: float | None = None) -> None:
    """Send ``f``, receive and release it at the other end, and wait for its buffer to come back."""
    assert tx.send(f, timeout=timeout) > 0
    rx.recv(timeout=5).release()
    assert tx.wait_returned(5)


def _general_calls(tx, monkeypatch) -> list[int]:
    calls = [0]
    general = tx._send_slots

    def counting(*a, **k):
        calls[0] += 1
        return general(*a, **k)

    monkeypatch.setattr(tx, "_send_slots", counting)
    return calls


def _fill(f, value: int) -> None:
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
        np.asarray(w[1])[:] = value + 1


def test_pool_frames_take_the_plan_and_arrive_as_sent(link, monkeypatch):
    pool, tx, rx = link
    for _ in range(4):  # both buffers crossed once: plans made
        f = pool.acquire(timeout=5)
        tx.send(f)
        f.release()
        rx.recv(timeout=5).release()
    assert tx.wait_returned(5)
    calls = _general_calls(tx, monkeypatch)
    cases = [(7, ColorSpace.BT709, Fraction(1, 90000)), (None, ColorSpace.BT709, Fraction(1, 90000)),
             (9, None, None), (11, ColorSpace.BT601, Fraction(1, 25)), (None, None, None), (13, None, Fraction(1, 25))]
    for k, (pts, cs, tb) in enumerate(cases):
        f = pool.acquire(timeout=5)
        _fill(f, 20 + k)
        f.pts, f.colorspace, f.time_base = pts, cs, tb
        seq = pool.slot_of(f).seq
        fid = tx.send(f)
        f.release()
        views = rx.recv_views(timeout=5) if k % 2 else None
        g = None if views else rx.recv(timeout=5)
        got = views if views is not None else g
        assert (got.pts, got.colorspace, got.time_base) == (pts, cs, tb)
        assert got.metadata["frame_id"] == fid and got.metadata["sequence"] == seq
        if views is not None:
            y, uv = views.planes
            views.release()
        else:
            c = interop.map(g, MemoryType.CPU)
            y, uv = np.asarray(c[0]), np.asarray(c[1])
        assert (y == 20 + k).all() and (uv == 21 + k).all()
        del y, uv
        if g is not None:
            c.release()
            g.release()
    assert tx.wait_returned(5)
    # a pts, colour or time base the plan did not have is a new plan: at most one general send per change and buffer
    assert calls[0] <= 2 * len(cases)
    before = calls[0]
    for _ in range(6):  # the same attributes again: every send planned
        f = pool.acquire(timeout=5)
        f.pts, f.colorspace, f.time_base = 13, None, Fraction(1, 25)
        tx.send(f)
        f.release()
        rx.recv_views(timeout=5).release()
    assert tx.wait_returned(5)
    assert calls[0] - before <= 2  # one per buffer at most (its plan had other attributes)
    before = calls[0]
    for _ in range(6):
        f = pool.acquire(timeout=5)
        f.pts, f.colorspace, f.time_base = 14, None, Fraction(1, 25)
        tx.send(f)
        f.release()
        rx.recv_views(timeout=5).release()
    assert tx.wait_returned(5)
    assert calls[0] == before
    assert rx.torn == 0
    assert all(b.users == 0 for b in pool._buffers)
    assert pool.free_count == pool.size


def test_planned_path_commits_and_commit_false_is_dropped(link):
    pool, tx, rx = link
    for _ in range(2):
        f = pool.acquire(timeout=5)
        tx.send(f)
        f.release()
        rx.recv(timeout=5).release()
    assert tx.wait_returned(5)
    f = pool.acquire(timeout=5)  # marked WRITING
    tx.send(f, commit=False)  # planned, but the marker stays as the writer left it
    f.release()
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0.2)
    assert rx.torn == 1
    assert tx.wait_returned(5)
    f = pool.acquire(timeout=5)
    seq = pool.slot_of(f).seq
    tx.send(f)
    f.release()
    v = rx.recv_views(timeout=5)
    assert v.sequence == seq
    v.release()
    assert rx.torn == 1


def test_another_layout_over_the_same_buffer_is_sent_as_it_is(link, monkeypatch):
    pool, tx, rx = link
    f = pool.acquire(timeout=5)
    _fill(f, 5)
    _round_trip(tx, rx, f)
    calls = _general_calls(tx, monkeypatch)
    # a GRAY8 frame over the Y plane of the same buffer, half as high
    y = f[0]
    info = TensorInfo((16, 64), np.uint8, (y.info.strides[0], 1))
    g = dma_frame([DMATensor(buffers_of(f)[0], info, offset=y.offset)], FrameFormat.GRAY8, 64, 16)
    tx.send(g)
    got = rx.recv_views(timeout=5)
    assert got.format is FrameFormat.GRAY8 and got.planes[0].shape == (16, 64) and (got.planes[0] == 5).all()
    got.release()
    tx.send(f)  # and the NV12 frame again
    got = rx.recv_views(timeout=5)
    assert got.format is FrameFormat.NV12 and got.planes[1].shape == (16, 32, 2)
    got.release()
    assert calls[0] == 2
    g.release()
    f.release()
    assert tx.wait_returned(5)


def test_slots_reassigned_send_the_fd_again():
    pool = FramePool(FrameFormat.NV12, 64, 32, 10)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a, slots=8), FrameReceiver(b)
    try:
        frames = [pool.acquire(timeout=5) for _ in range(10)]
        for rnd in range(3):
            for i, f in enumerate(frames):
                _fill(f, (rnd * 10 + i) % 200)
                tx.send(f)
                v = rx.recv_views(timeout=5)
                assert (v.planes[0] == (rnd * 10 + i) % 200).all()
                v.release()
        assert tx.wait_returned(5)
        assert tx.fds_sent > 10  # slots were reassigned: their new buffers' fds crossed again
        assert rx.slots_held <= 8
        for f in frames:
            f.release()
        assert pool.free_count == pool.size
    finally:
        tx.close()
        rx.close()
        pool.close()


def test_closed_buffer_and_timeouts(link):
    pool, tx, rx = link
    f = pool.acquire(timeout=5)
    _round_trip(tx, rx, f)
    buf = buffers_of(f)[0]
    _round_trip(tx, rx, f, timeout=1)  # a timeout: the general path
    buf.close()
    with pytest.raises(InvalidTensorError):
        tx.send(f)
    assert tx.in_flight == 0
    f.release()


def test_full_socket_falls_back_to_waiting(link):
    pool, tx, rx = link
    f = pool.acquire(timeout=5)
    _round_trip(tx, rx, f)
    buf = buffers_of(f)[0]
    base = buf.users
    sent = 0
    with pytest.raises(TransportTimeoutError):
        for _ in range(100000):
            tx.send(f, timeout=0)
            sent += 1
    assert tx.in_flight == sent  # the one that timed out is not held
    assert buf.users == base + sent
    # a planned send (no timeout) into the full socket waits, then goes out once the consumer reads
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(tx.send(f)))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not done
    views = [rx.recv_views(timeout=5)]
    t.join(5)
    assert done and done[0] > 0
    sent += 1
    for _ in range(sent - 1):
        views.append(rx.recv_views(timeout=5))
    assert [v.frame_id for v in views] == sorted(v.frame_id for v in views) and views[-1].frame_id == done[0]
    for v in views:
        v.release()
    del views
    assert tx.wait_returned(5)
    assert buf.users == base
    f.release()


def test_plans_let_go_of_their_mappings():
    gc.collect()
    before = len(nd._live)
    pool = FramePool(FrameFormat.NV12, 64, 32, 3)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    for _ in range(6):
        f = pool.acquire(timeout=5)
        tx.send(f)
        f.release()
        rx.recv_views(timeout=5).release()
    assert tx.wait_returned(5)
    assert len(tx._plans) == 3
    pool.close()
    del f
    gc.collect()
    assert tx._plans == {}
    rx.close()
    tx.close()
    del pool, tx, rx
    gc.collect()
    assert len(nd._live) == before
