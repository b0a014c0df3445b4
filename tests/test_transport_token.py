"""FrameSender's token path: a FramePool frame as acquire() made it carries the pool's layout token
(Frame._pool_token), and the sender matches it to the plan of its buffer by that token instead of comparing the
layout field by field.

The token stands only for what a caller cannot change on such a frame (format, size, its own planes and their
layout). Each test here alters a token frame in a way the token does not stand for (pts present or not, time base,
colour, a plane replaced, reordered or released, a frame not made by acquire carrying a token) and checks that what
arrives is what was sent, data and layout: trusting the token blindly would send the plan's stale message. The
promises of the planned path hold on the token path too: the buffer is held until the consumer's DONE, a consumer
gone is a PeerClosedError, a buffer's fd crosses once.
"""

from __future__ import annotations

import ctypes
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

import interop
from interop import ColorRange, ColorSpace, FrameFormat, MemoryType
from interop.errors import InteropError, InvalidTensorError
from interop.tensors.dma import DMAContext, DMATensor, FramePool, buffers_of, dma_frame
from interop.transport import FrameReceiver, FrameSender, PeerClosedError, ProtocolError, seqpacket_pair
from tests.support.transport_link import capture_sent


def _paths(tx: FrameSender, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the field-by-field plan check and of the general path's sends from here on."""
    calls = {"fields": 0, "general": 0}
    fields, general = tx._fitting_plan, tx._send_slots

    def counting_fields(*a, **k):  # type: ignore[no-untyped-def]
        calls["fields"] += 1
        return fields(*a, **k)

    def counting_general(*a, **k):  # type: ignore[no-untyped-def]
        calls["general"] += 1
        return general(*a, **k)

    monkeypatch.setattr(tx, "_fitting_plan", counting_fields)
    monkeypatch.setattr(tx, "_send_slots", counting_general)
    return calls


def _pattern(pool: FramePool) -> dict[int, np.ndarray]:
    """Every pool buffer's pixel bytes set to a pattern of its own (no two rows alike); the writable byte array of
    each buffer, by slot index (the marker after them is left alone)."""
    out = {}
    for slot in pool.slots:
        m = slot.buffer.mapping(True)
        mem = np.ctypeslib.as_array((ctypes.c_uint8 * slot.marker_offset).from_address(m.address))
        mem[:] = (np.arange(mem.size) * 7 + 3 * slot.index + 1) % 251
        out[slot.index] = mem
    return out


def _plane_bytes(mem: np.ndarray, offset: int, shape: tuple[int, ...], pitch: int) -> np.ndarray:
    rows, row_bytes = shape[0], int(np.prod(shape[1:]))
    return np.stack([mem[offset + r * pitch:offset + r * pitch + row_bytes] for r in range(rows)]).reshape(shape)


def _prime(pool: FramePool, tx: FrameSender, rx: FrameReceiver, *, pts: int | None = None,
           time_base: Fraction | None = None, colorspace: ColorSpace | None = None) -> None:
    """Send a frame of every buffer of the pool with these attributes: each buffer gets a plan made from a token
    frame. Then a frame of each again, which must take the token path (checked)."""
    for _ in range(2):
        frames = [pool.acquire(timeout=5) for _ in range(pool.size)]
        for f in frames:
            f.pts, f.time_base, f.colorspace = pts, time_base, colorspace
            tx.send(f)
            f.release()
            rx.recv_views(timeout=5).release()
    assert tx.wait_returned(5)
    assert all(p.layout is pool._layout_token for p in tx._plans.values()) and len(tx._plans) == pool.size


def _received(rx: FrameReceiver) -> tuple[interop.Frame, list[np.ndarray]]:
    """The next frame (recv: the general receive, layout checked there) and copies of its planes' pixels."""
    g = rx.recv(timeout=5)
    assert g is not None
    with interop.map(g, MemoryType.CPU) as c:
        arrays = [np.array(c[i]) for i in range(len(c))]
    return g, arrays


def test_unaltered_pool_frames_take_the_token_path(link, monkeypatch):
    pool, tx, rx = link
    mems = _pattern(pool)
    _prime(pool, tx, rx, pts=1, time_base=Fraction(1, 25))
    calls = _paths(tx, monkeypatch)
    for k in range(6):
        f = pool.acquire(timeout=5)
        f.pts, f.time_base = 100 + k, Fraction(1, 25)  # a new pts and a new (equal) Fraction: still the token path
        i = f.metadata["pool_slot"]
        mems[i][pool.offsets[0]:pool.offsets[0] + 64] = k  # the first Y row
        seq = pool.slot_of(f).seq
        fid = tx.send(f)
        f.release()
        g, (y, uv) = _received(rx)
        assert (g.pts, g.time_base, g.metadata["frame_id"], g.metadata["sequence"]) == \
            (100 + k, Fraction(1, 25), fid, seq)
        assert (y[0] == k).all() and (y[1:] == _plane_bytes(mems[i], pool.offsets[0], (32, 64), pool.pitches[0])[1:]).all()
        assert (uv == _plane_bytes(mems[i], pool.offsets[1], (16, 32, 2), pool.pitches[1])).all()
        g.release()
    assert calls == {"fields": 0, "general": 0}
    assert tx.wait_returned(5)
    assert tx.fds_sent == pool.size  # each buffer's fd crossed once, with its first frame
    assert pool.free_count == pool.size and all(b.users == 0 for b in pool._buffers)


@pytest.mark.parametrize("before, after", [
    ({"pts": None}, {"pts": 5}),  # the plan's message has no pts flag
    ({"pts": 5}, {"pts": None}),  # the plan's message carries a pts (the last one written into it)
    ({"time_base": Fraction(1, 25)}, {"time_base": Fraction(1, 90000)}),
    ({"time_base": Fraction(1, 25)}, {"time_base": None}),
    ({"colorspace": None}, {"colorspace": ColorSpace.BT709}),
])
def test_changed_attributes_arrive_as_set(link, monkeypatch, before, after):
    pool, tx, rx = link
    _prime(pool, tx, rx, **before)
    calls = _paths(tx, monkeypatch)
    want = {"pts": None, "time_base": None, "colorspace": None} | after
    f = pool.acquire(timeout=5)
    for k, v in want.items():
        setattr(f, k, v)
    tx.send(f)
    f.release()
    g, _ = _received(rx)
    assert (g.pts, g.time_base, g.colorspace) == (want["pts"], want["time_base"], want["colorspace"])
    g.release()
    assert calls["general"] == 1  # the token did not stand for the change: a new plan
    f = pool.acquire(timeout=5)  # again (the other buffer's plan, if it is that one, has the old attributes)
    for k, v in want.items():
        setattr(f, k, v)
    tx.send(f)
    f.release()
    g, _ = _received(rx)
    assert (g.pts, g.time_base, g.colorspace) == (want["pts"], want["time_base"], want["colorspace"])
    g.release()
    assert tx.wait_returned(5)


def test_colour_range_change_arrives(link):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    f.color_range = ColorRange.FULL
    tx.send(f)
    f.release()
    g, _ = _received(rx)
    assert g.color_range is ColorRange.FULL
    g.release()
    assert tx.wait_returned(5)


def test_a_plane_replaced_over_the_same_buffer_is_sent_as_it_is(link):
    pool, tx, rx = link
    mems = _pattern(pool)
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    i = f.metadata["pool_slot"]
    y = f[0]
    moved = y.offset + 8 * pool.pitches[0]  # the same shape, 8 rows further into the buffer
    f._tensors[0] = DMATensor(buffers_of(f)[0], y.info, offset=moved, drm_fourcc=y.drm_fourcc)
    tx.send(f)  # the plane replaced is still live (not released): only the planes themselves tell the change
    y.release()
    g, (gy, guv) = _received(rx)
    assert g[0].offset == moved
    assert (gy == _plane_bytes(mems[i], moved, (32, 64), pool.pitches[0])).all()
    assert (guv == _plane_bytes(mems[i], pool.offsets[1], (16, 32, 2), pool.pitches[1])).all()
    g.release()
    f.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size


def test_a_plane_of_another_buffer_is_sent_as_it_is(link):
    pool, tx, rx = link
    mems = _pattern(pool)
    _prime(pool, tx, rx)
    f, h = pool.acquire(timeout=5), pool.acquire(timeout=5)
    i, j = f.metadata["pool_slot"], h.metadata["pool_slot"]
    own_y = f[0]
    f._tensors[0] = h[0]  # the other frame's Y plane: a frame over two buffers now
    tx.send(f)
    own_y.release()
    f.release()
    h.release()
    assert pool.free_count == 0  # both buffers held for the consumer
    g, (gy, guv) = _received(rx)
    assert (gy == _plane_bytes(mems[j], pool.offsets[0], (32, 64), pool.pitches[0])).all()
    assert (guv == _plane_bytes(mems[i], pool.offsets[1], (16, 32, 2), pool.pitches[1])).all()
    g.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size


def test_planes_reordered_are_not_the_plan(link):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    f._tensors.reverse()  # UV first: not an NV12 layout
    tx.send(f)  # sent as it is (the general path does not check plane shapes against the format) ...
    with pytest.raises(ProtocolError, match="plane 0"):  # ... and the consumer refuses it (the plan's would pass)
        rx.recv(timeout=5)
    f.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size


def test_a_released_plane_is_refused(link):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    f[1].release()
    with pytest.raises(InvalidTensorError):
        tx.send(f)
    assert tx.in_flight == 0
    f.release()
    assert pool.free_count == pool.size
    f = pool.acquire(timeout=5)
    f.release()  # the whole frame
    with pytest.raises(InvalidTensorError):
        tx.send(f)
    assert tx.in_flight == 0 and pool.free_count == pool.size


def test_frames_not_made_by_acquire(link):
    pool, tx, rx = link
    mems = _pattern(pool)
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    i = f.metadata["pool_slot"]
    buf = buffers_of(f)[0]
    # a frame built by hand over the same buffer, its UV plane elsewhere, carrying the acquired frame's token
    uv_at = pool.offsets[1] - 4 * pool.pitches[1]
    h = dma_frame([DMATensor(buf, f[0].info, offset=pool.offsets[0], drm_fourcc=f[0].drm_fourcc),
                   DMATensor(buf, f[1].info, offset=uv_at, drm_fourcc=f[1].drm_fourcc)], f.format, 64, 32)
    h._pool_token = f._pool_token
    tx.send(h)
    g, (gy, guv) = _received(rx)
    assert g[1].offset == uv_at
    assert (guv == _plane_bytes(mems[i], uv_at, (16, 32, 2), pool.pitches[1])).all()
    g.release()
    # a crop of a pool frame (derived: no token of its own) arrives cropped
    c = f.crop(16, 8, 32, 16)
    assert c._pool_token is None
    tx.send(c)
    g, (gy, guv) = _received(rx)
    assert (g.width, g.height) == (32, 16) and gy.shape == (16, 32) and guv.shape == (8, 16, 2)
    assert (gy == _plane_bytes(mems[i], pool.offsets[0] + 8 * pool.pitches[0] + 16, (16, 32), pool.pitches[0])).all()
    g.release()
    c.release()
    h.release()
    f.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size


def test_token_sends_hold_the_buffer_until_done(link, monkeypatch):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    calls = _paths(tx, monkeypatch)
    f = pool.acquire(timeout=5)
    tx.send(f)
    tx.send(f)  # the same frame twice: two frames in flight over the one hold of the frame
    f.release()
    assert tx.in_flight == 2 and pool.free_count == pool.size - 1
    v = rx.recv_views(timeout=5)
    v.release()
    deadline = time.monotonic() + 5
    while tx.in_flight != 1 and time.monotonic() < deadline:  # the DONE of the first one comes back
        time.sleep(0.005)
    assert tx.in_flight == 1
    assert pool.free_count == pool.size - 1  # the second frame is still the consumer's
    w = rx.recv_views(timeout=5)
    w.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size and all(b.users == 0 for b in pool._buffers)
    assert calls == {"fields": 0, "general": 0}


def test_consumer_gone_is_peer_closed_and_gives_the_buffer_back(link):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    rx.close()
    with pytest.raises(PeerClosedError):
        for _ in range(1000):  # until the sender has seen the consumer go (a send may still go out before)
            f = pool.acquire(timeout=5)
            try:
                tx.send(f)
            finally:
                f.release()
    assert tx.wait_returned(5)
    assert tx.in_flight == 0 and pool.free_count == pool.size


def test_a_frame_without_token_in_the_pool_layout_takes_the_field_checked_plan(link, monkeypatch):
    pool, tx, rx = link
    mems = _pattern(pool)
    f = pool.acquire(timeout=5)
    i = f.metadata["pool_slot"]
    buf = buffers_of(f)[0]
    h = dma_frame([DMATensor(buf, f[k].info, offset=pool.offsets[k], drm_fourcc=f[k].drm_fourcc) for k in range(2)],
                  f.format, 64, 32)
    assert h._pool_token is None
    tx.send(h)  # the general path: its plan is not the pool's layout token's
    rx.recv_views(timeout=5).release()
    assert tx._plans[id(buf)].layout is None
    calls = _paths(tx, monkeypatch)
    for k in range(3):
        mems[i][pool.offsets[0]:pool.offsets[0] + 64] = 50 + k
        h.pts = k
        tx.send(h)
        g, (gy, guv) = _received(rx)
        assert g.pts == k and (gy[0] == 50 + k).all()
        assert (guv == _plane_bytes(mems[i], pool.offsets[1], (16, 32, 2), pool.pitches[1])).all()
        g.release()
    assert calls["fields"] == 3 and calls["general"] == 1  # pts added once: a new plan, then planned by fields
    f.release()
    h.release()
    assert tx.wait_returned(5)
    assert pool.free_count == pool.size and all(b.users == 0 for b in pool._buffers)


# ---- review: lifetimes and threads on the token path, and defects found in transport.py (fixed) ----------------


def test_a_frame_released_while_its_message_goes_out_stays_held_until_done(link, monkeypatch):
    # Another thread releasing the frame at the moment its message leaves: the in-flight record holds the frame's
    # lease (taken by the token check), so the buffer stays out of the pool until the consumer's DONE.
    pool, tx, rx = link
    mems = _pattern(pool)
    _prime(pool, tx, rx)
    calls = _paths(tx, monkeypatch)
    sent = capture_sent(tx)
    f = pool.acquire(timeout=5)
    i = f.metadata["pool_slot"]
    real = tx._sock.send

    def send_then_release(data, flags=0):  # type: ignore[no-untyped-def]
        n = real(data, flags)
        f.release()
        return n

    tx._sock.send = send_then_release
    fid = tx.send(f)
    assert len(sent) == 1 and f._released
    assert calls == {"fields": 0, "general": 0}
    assert tx.in_flight == 1 and pool.free_count == pool.size - 1  # the consumer's: not back in the pool
    g, (gy, guv) = _received(rx)
    assert g.metadata["frame_id"] == fid
    assert (gy == _plane_bytes(mems[i], pool.offsets[0], (32, 64), pool.pitches[0])).all()
    g.release()
    assert tx.wait_returned(5)
    _settled(pool)


def _settled(pool: FramePool) -> None:
    """Wait (a little) for the last returned buffer to reach the pool: wait_returned() can come back between
    FrameSender._return's removal of the record and the end of the hold it removed."""
    deadline = time.monotonic() + 5
    while pool.free_count != pool.size and time.monotonic() < deadline:
        time.sleep(0.002)
    assert pool.free_count == pool.size and all(b.users == 0 for b in pool._buffers)


def test_two_threads_sending_frames_of_one_pool(monkeypatch):
    pool = FramePool(FrameFormat.NV12, 64, 32, 6)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    try:
        _prime(pool, tx, rx, pts=0, time_base=Fraction(1, 25))
        calls = _paths(tx, monkeypatch)
        n, errors, seen = 300, [], []

        def produce(tid: int) -> None:
            try:
                for k in range(n):
                    f = pool.acquire(timeout=10)
                    m = buffers_of(f)[0].mapping(True)
                    np.ctypeslib.as_array((ctypes.c_uint8 * 64).from_address(m.address + pool.offsets[0]))[:] = \
                        (tid * 97 + k) % 251
                    f.pts, f.time_base = tid * 1_000_000 + k, Fraction(1, 25)
                    tx.send(f)
                    f.release()
            except Exception as e:  # reported below
                errors.append(repr(e))

        def consume() -> None:
            try:
                for _ in range(2 * n):
                    v = rx.recv_views(timeout=10)
                    tid, k = divmod(v.pts, 1_000_000)
                    seen.append((tid, k, bool((v.planes[0][0] == (tid * 97 + k) % 251).all()), v.time_base))
                    v.release()
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(2)] + [threading.Thread(target=consume)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert sorted((tid, k) for tid, k, _, _ in seen) == [(t, k) for t in range(2) for k in range(n)]
        assert all(ok and tb == Fraction(1, 25) for _, _, ok, tb in seen)
        assert calls == {"fields": 0, "general": 0}
        assert tx.fds_sent == pool.size  # still once per buffer
        assert tx.wait_returned(5)
        _settled(pool)
    finally:
        tx.close()
        rx.close()
        pool.close()


def test_a_closed_pool_held_frame_and_a_new_pool_in_its_place(link, monkeypatch):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    pool.close()  # the frame still held: its buffer stays open until the frame and the consumer let go
    calls = _paths(tx, monkeypatch)
    tx.send(f)  # the token path: the held buffer's plan is still good
    assert calls == {"fields": 0, "general": 0}
    buf = buffers_of(f)[0]
    f.release()
    assert not buf.closed  # the consumer has it
    rx.recv(timeout=5).release()
    assert tx.wait_returned(5)
    deadline = time.monotonic() + 5
    while not buf.closed and time.monotonic() < deadline:
        time.sleep(0.002)
    assert buf.closed
    del f, buf
    fds = tx.fds_sent
    monkeypatch.undo()
    # a new pool of the same layout (its buffers may take the old ones' ids): its own fds cross, nothing of the old
    # pool's plans is used
    new = FramePool(FrameFormat.NV12, 64, 32, 2)
    try:
        mems = _pattern(new)
        for k in range(4):
            h = new.acquire(timeout=5)
            i = h.metadata["pool_slot"]
            mems[i][new.offsets[0]:new.offsets[0] + 64] = 200 + k
            tx.send(h)
            h.release()
            g, (gy, _) = _received(rx)
            assert (gy[0] == 200 + k).all()
            g.release()
        assert tx.fds_sent == fds + new.size
        assert tx.wait_returned(5)
    finally:
        new.close()


def _forget_during_the_next_send(pool: FramePool, tx: FrameSender, rx: FrameReceiver,
                                 monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Prime the pool's token path, then make the next message's send close another buffer that has a slot (what
    another thread or a collection does while the send holds the lock: a FORGET is queued meanwhile). Returns the
    counts of the field check and the general path (_paths)."""
    _prime(pool, tx, rx)
    old = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)  # a buffer of its own with a slot
    tx.send(old)
    rx.recv(timeout=5).release()
    assert tx.wait_returned(5)
    old_buf = buffers_of(old)[0]
    old.release()
    calls = _paths(tx, monkeypatch)
    capture_sent(tx)
    real = tx._sock.send

    def closing_inside(data, flags=0):  # type: ignore[no-untyped-def]
        assert tx._send_lock.locked()
        old_buf.close()
        return real(data, flags)

    tx._sock.send = closing_inside
    return calls


def test_a_forget_queued_during_a_token_send_goes_out_when_it_ends(link, monkeypatch):
    pool, tx, rx = link
    calls = _forget_during_the_next_send(pool, tx, rx, monkeypatch)
    f = pool.acquire(timeout=5)
    tx.send(f)
    assert calls == {"fields": 0, "general": 0}
    v = rx.recv_views(timeout=5)  # held: no DONE comes back to flush the FORGET
    assert not tx._forgets, "the FORGET queued during the token send is still waiting"
    v.release()
    f.release()


def test_a_ctrl_c_after_a_token_send_leaves_the_sent_frame_in_flight(link, monkeypatch):
    """A Ctrl-C landing in the FORGET flush after the message went out: the consumer has the frame, so its buffer
    stays out of the pool until DONE (it went back at once, for the producer to overwrite while it was read)."""
    pool, tx, rx = link
    calls = _forget_during_the_next_send(pool, tx, rx, monkeypatch)  # a FORGET queued: flushed after the send
    real_after = tx._after_send
    sender = threading.current_thread()

    def interrupted() -> None:
        # the send's own flush once the message went out (not the close's under the lock, nor the reader's on DONE)
        if threading.current_thread() is sender and not tx._send_lock.locked():
            raise KeyboardInterrupt
        real_after()

    monkeypatch.setattr(tx, "_after_send", interrupted)
    f = pool.acquire(timeout=5)
    with pytest.raises(KeyboardInterrupt):
        tx.send(f)
    assert calls == {"fields": 0, "general": 0}
    assert tx.in_flight == 1, "the frame the consumer received went back to the pool"
    f.release()
    v = rx.recv_views(timeout=5)
    assert v is not None
    assert tx.in_flight == 1
    v.release()
    del v
    assert tx.wait_returned(5)


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["token", "general"])
def test_a_pts_that_does_not_fit_the_message_is_an_interop_error(link, timeout):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    f.pts = 2**63
    try:
        with pytest.raises(InteropError):
            tx.send(f, timeout=timeout)
        assert tx.in_flight == 0
    finally:
        f.release()


class _ReleasedMidCheck(list):  # type: ignore[type-arg]
    """A frame's plane list that releases the frame while send() iterates it: what a release() on another thread
    does at that moment."""

    frame: interop.Frame

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.frame.release()
        return super().__iter__()


def test_a_release_racing_the_token_check_is_an_interop_error_or_a_send(link):
    pool, tx, rx = link
    _prime(pool, tx, rx)
    f = pool.acquire(timeout=5)
    racing = _ReleasedMidCheck(f._tensors)
    racing.frame = f
    f._tensors = racing
    try:
        tx.send(f)  # either sent (the lease was taken first: held until DONE) ...
        rx.recv_views(timeout=5).release()
    except InteropError:  # ... or refused as a released frame
        pass
    assert tx.wait_returned(5)
    _settled(pool)
