"""GstFramePool.claim(): the claimed frame's planes each hold the pool buffer themselves (_own_frame).

What is checked: the slot comes back to the FramePool exactly once, and only when GStreamer freed the memory (the
_Lease) *and* the claimed frame let go, whatever the order, with the frame released twice or never; an exception
while the planes are made leaves no use behind; the metadata the decode worker sets afterwards reaches the consumer,
and a claimed frame sent again from a slot the sender already sent takes the planned send (no general path).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, cast

import pytest

import interop  # noqa: F401 - before gi: interop sets up the runtime first
from interop import ColorRange, ColorSpace
from interop.dma import FrameReceiver, FrameSender, seqpacket_pair
from interop.elements import pool as gst_pool
from interop.elements.pool import _Layout, _Lease, _own_frame
from interop.frame import Frame
from interop.tensors.dma import DMABuffer, DMATensor, FramePool, buffers_of
from interop.types import FrameFormat


@pytest.fixture
def fp() -> Iterator[FramePool]:
    with FramePool(FrameFormat.NV12, 64, 32, 1) as p:
        yield p


def _lent(fp: FramePool) -> _Lease:
    """What GstFramePool._acquire makes: a pool frame kept by the GstMemory's lease (the only hold on it)."""
    f = fp.acquire(timeout=1)
    return _Lease(f)


def test_released_twice_gives_the_slot_back_once_and_only_after_gstreamer(fp: FramePool) -> None:
    lease = _lent(fp)
    b = buffers_of(lease.frame)[0]
    base = b.users  # the lease frame's hold and the lease's own use
    c = _own_frame(lease.frame, None)
    assert b.users == base + len(c.tensors)
    c.release()
    c.release()  # twice: idempotent, no second unuse
    assert b.users == base and fp.free_count == 0
    del lease  # GStreamer frees the memory
    gc.collect()
    assert b.users == 0 and fp.free_count == 1 and fp._free == [0]


def _claimed_then_freed(fp: FramePool) -> tuple[DMABuffer, Frame]:
    """A frame claimed from a pool frame lent to GStreamer, which then frees the memory (the sample goes)."""
    lease = _lent(fp)
    c = _own_frame(lease.frame, None)
    del lease
    gc.collect()
    return buffers_of(c)[0], c


def test_gstreamer_freeing_first_keeps_the_slot_until_the_frame_lets_go(fp: FramePool) -> None:
    b, c = _claimed_then_freed(fp)
    assert b.users == len(c.tensors) and fp.free_count == 0
    assert not any(t.released for t in c.tensors)
    c.release()
    assert b.users == 0 and fp.free_count == 1 and fp._free == [0]
    c.release()
    assert b.users == 0 and fp._free == [0]


def test_a_claimed_frame_never_released_gives_the_slot_back_when_dropped(fp: FramePool) -> None:
    b, c = _claimed_then_freed(fp)
    assert fp.free_count == 0
    del c  # the planes' finalisers end their uses
    gc.collect()
    assert b.users == 0 and fp._free == [0]


def test_two_claims_of_one_sample_each_hold_the_slot() -> None:
    with FramePool(FrameFormat.I420, 64, 32, 1) as fp:
        lease = _lent(fp)
        b = buffers_of(lease.frame)[0]
        c1, c2 = _own_frame(lease.frame, None), _own_frame(lease.frame, None)
        del lease
        gc.collect()
        c1.release()
        assert fp.free_count == 0 and b.users == 3
        c2.release()
        assert fp._free == [0] and b.users == 0


def test_a_padded_pool_frame_is_cropped_with_the_pools_pitches_and_offsets() -> None:
    lay = _Layout(FrameFormat.NV12, "NV12", 60, 30, 96, 48, 1, 0, True)
    with FramePool(FrameFormat.NV12, 96, 48, 1, pitch_align=1) as fp:
        lease = _lent(fp)
        b = buffers_of(lease.frame)[0]
        c = _own_frame(lease.frame, lay)
        assert (c.width, c.height) == (60, 30)
        planes = [cast(DMATensor, t) for t in c.tensors]
        assert [t.pitch for t in planes] == list(fp.pitches)
        assert [t.offset for t in planes] == list(fp.offsets)
        assert [t.info.shape[:2] for t in c.tensors] == [(30, 60), (15, 30)]
        del lease
        gc.collect()
        assert fp.free_count == 0
        c.release()
        assert fp._free == [0] and b.users == 0


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_error_making_the_second_plane_leaves_no_use_behind(fp: FramePool, monkeypatch: Any, exc: type) -> None:
    lease = _lent(fp)
    b = buffers_of(lease.frame)[0]
    base = b.users
    real = gst_pool.trusted_plane
    calls = []

    def second_fails(*a: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise exc("interrupted")
        return real(*a)

    monkeypatch.setattr(gst_pool, "trusted_plane", second_fails)
    with pytest.raises(exc):
        _own_frame(lease.frame, None)
    gc.collect()
    assert len(calls) == 2 and b.users == base
    del lease
    gc.collect()
    assert b.users == 0 and fp._free == [0]


def test_an_error_making_the_frame_leaves_no_use_behind(fp: FramePool, monkeypatch: Any) -> None:
    lease = _lent(fp)
    b = buffers_of(lease.frame)[0]
    base = b.users

    def refuse(*a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(gst_pool, "Frame", refuse)
    with pytest.raises(KeyboardInterrupt):
        _own_frame(lease.frame, None)
    assert b.users == base
    del lease
    gc.collect()
    assert b.users == 0 and fp._free == [0]


@pytest.mark.parametrize("lay", [None, _Layout(FrameFormat.NV12, "NV12", 60, 30, 64, 32, 64, 0, True)])
def test_claimed_frames_sent_as_the_worker_does_take_the_planned_send(lay: _Layout | None, monkeypatch: Any) -> None:
    """_gst_worker: claim, set pts / time base / colour, GStreamer lets go, send, release. From the second round on
    each slot's frame must go out by the sender's plan (no general path), with its metadata."""
    a, s = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(s)
    general = []
    real_slots = tx._send_slots

    def spy(*args: Any) -> Any:
        general.append(args[0])
        return real_slots(*args)

    monkeypatch.setattr(tx, "_send_slots", spy)
    ns = Fraction(1, 1_000_000_000)
    try:
        with FramePool(FrameFormat.NV12, 64, 32, 2) as fp:
            for i in range(8):
                lease = _lent(fp)
                f = _own_frame(lease.frame, lay)
                f.pts, f.time_base = 1000 * i, ns
                f.colorspace, f.color_range = ColorSpace.BT709, ColorRange.LIMITED
                del lease  # gf.release(): the sample goes
                gc.collect()
                tx.send(f)
                f.release()
                g = rx.recv(timeout=5)
                assert g is not None
                assert (g.pts, g.time_base, g.colorspace, g.color_range) == (1000 * i, ns, ColorSpace.BT709,
                                                                            ColorRange.LIMITED)
                assert (g.width, g.height) == ((64, 32) if lay is None else (60, 30))
                g.release()
                assert tx.wait_returned(5)
            assert fp.free_count == 2
        assert len(general) == 2, f"sends by the general path: {len(general)} of 8 (2 slots)"
    finally:
        rx.close()
        tx.close()


def test_a_real_claim_keeps_its_slot_through_gstreamer_and_the_worker() -> None:
    """End to end in-process: a videotestsrc frame claimed, GStreamer lets go first, the frame is sent and released;
    the slot is back exactly once the consumer let go."""
    from tests.support.requirements import need

    need("gst")
    from interop.elements.appsink import AppSinkSource
    from interop.elements.pool import GstFramePool

    pool = GstFramePool()
    src: Any = AppSinkSource("videotestsrc num-buffers=4 ! video/x-raw,format=NV12,width=64,height=48", timeout=10,
                        pool=pool, max_buffers=1)
    a, s = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(s)
    try:
        pool.set_count(3)
        sample = src.read()
        f = pool.claim(sample.native) if sample is not None else None
        assert f is not None, "videotestsrc did not write into the offered pool"
        b = buffers_of(f)[0]
        sample.release()
        del sample
        src.close()  # the pipeline stops; dropping it frees every memory GStreamer had (the appsink's last sample)
        src = None
        gc.collect()
        assert not pool._leases
        assert b.users == len(f.tensors) and b.pool_slot.index not in pool.frames._free  # type: ignore[union-attr]
        tx.send(f)
        f.release()
        assert b.users == 1 and b.pool_slot.index not in pool.frames._free  # type: ignore[union-attr]
        g = rx.recv(timeout=5)
        assert g is not None
        g.release()
        assert tx.wait_returned(5)
        assert b.users == 0 and pool.frames._free.count(b.pool_slot.index) == 1  # type: ignore[union-attr]
    finally:
        if src is not None:
            src.close()
        rx.close()
        tx.close()
        pool.close()
