"""FrameReceiver.recv_views(): a received frame as numpy views of its planes, without a Frame or interop.map().

- The views show what recv() + interop.map(frame, CPU) shows (pixels, shapes, pitches, pts, sequence, frame id),
  on the first frames (general path) and once the layout is known (the fast path: no general-path call).
- A view held past release() keeps the frame out of the producer's pool: it never shows a later frame's data.
  Dropping everything sends the DONE; the views are read-only for a reader, writable for a writer, which commits.
- The fast path still checks what a peer could get wrong: frame id, pts, torn frames, references; EOF, timeouts,
  FRAME messages (fds with every frame) and FORGETs while views are held work as with recv().
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InvalidTensorError
from interop.tensors.dma import (
    MARKER_COMMITTED,
    MARKER_MAGIC,
    FramePool,
    PoolTimeoutError,
    buffers_of,
    read_marker,
)
from interop.transport import (
    _FID_AT,
    _PTS_AT,
    FrameReceiver,
    FrameSender,
    FrameViews,
    ProtocolError,
    TransportTimeoutError,
    seqpacket_pair,
)
from tests.support.transport_link import capture_sent


def _send(pool, tx, value: int, pts: int | None = None) -> None:
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
        np.asarray(w[1])[:] = value + 1
    f.pts = pts
    tx.send(f)
    f.release()


def _count_general(rx, monkeypatch) -> list[int]:
    calls = [0]
    general = rx._message

    def counting(*a):
        calls[0] += 1
        return general(*a)

    monkeypatch.setattr(rx, "_message", counting)
    return calls


def test_views_show_what_recv_and_map_show(link, monkeypatch):
    pool, tx, rx = link
    general = _count_general(rx, monkeypatch)
    for k in range(8):
        _send(pool, tx, k, pts=100 + k)
        v = rx.recv_views(timeout=5)
        assert isinstance(v, FrameViews) and len(v) == 2
        assert v.format is FrameFormat.NV12 and (v.width, v.height) == (64, 32) and v.pts == 100 + k
        assert v.frame_id == k + 1 and v.metadata["frame_id"] == k + 1 and v.sequence == v.metadata["sequence"]
        y, uv = v
        assert y.shape == (32, 64) and uv.shape == (16, 32, 2) and y.dtype == np.uint8
        assert (y == k).all() and (uv == k + 1).all()
        assert y.strides[0] >= 64 and not y.flags.writeable and not uv.flags.writeable
        with pytest.raises(ValueError):
            y.flags.writeable = True  # the consumer's mapping is read-only: numpy must refuse, never segfault
        v.release()
        del y, uv
        assert tx.wait_returned(5)
        if k == 3:
            warm = general[0]
    assert general[0] == warm, "a frame in a known layout took the general path"
    # the same frame through recv() + map gives the same bytes and layout
    _send(pool, tx, 42)
    g = rx.recv(timeout=5)
    with interop.map(g, MemoryType.CPU) as c:
        ref = [np.asarray(t) for t in c]
        expect = [r.copy() for r in ref]
        strides = [r.strides for r in ref]
        del ref
    g.release()
    assert tx.wait_returned(5)
    _send(pool, tx, 42)
    with rx.recv_views(timeout=5) as v:
        assert [p.strides for p in v] == strides
        assert all((p == r).all() for p, r in zip(v, expect))
    assert v.released and tx.wait_returned(5)
    with pytest.raises(InvalidTensorError, match="released"):
        v[0]


def test_a_view_held_past_release_keeps_the_buffer_from_the_producer():
    pool = FramePool(FrameFormat.NV12, 64, 32, 1)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    for k in range(4):  # past the general path: the fast path holds too
        _send(pool, tx, k)
        v = rx.recv_views(timeout=5)
        y = v[0][2:4]  # a view of a view
        v.release()
        del v
        gc.collect()
        assert tx.in_flight == 1
        with pytest.raises(PoolTimeoutError):
            pool.acquire(timeout=0.1)  # the producer cannot reuse the buffer: y never shows a later frame
        assert (y == k).all()
        del y
        assert tx.wait_returned(5)
    tx.close()
    rx.close()
    pool.close()


_DERIVED = {
    "slice": lambda y: y[2:4],
    "slice of a slice of a slice": lambda y: y[1:][1:, 2:][::2],
    "np.asarray": np.asarray,
    "np.asarray of a slice": lambda y: np.asarray(y[3:]),
    "view as another dtype": lambda y: y.view(np.uint16),
    "transpose": lambda y: y.T,
    "reshape": lambda y: y[2:4].reshape(2, -1, 4),
    "as_strided": lambda y: np.lib.stride_tricks.as_strided(y, (4, 4), y.strides),
    "memoryview": memoryview,
    "np.ndarray over the view's buffer": lambda y: np.ndarray((4,), np.uint8, buffer=y[0]),
    "subclass view": lambda y: y.view(np.ma.MaskedArray),
    # generic code that normalises an array to its base (the fast path's base is an array too)
    "slice of the view's base": lambda y: _of_base(y)[2:4],
    "the view's base viewed": lambda y: _of_base(y).view(),
    "the view's base transposed": lambda y: _of_base(y).T,
}


def _of_base(y: np.ndarray) -> np.ndarray:
    """``y.base`` where it is an array (the fast path), else ``y`` (the general path's base is no array)."""
    return y.base if isinstance(y.base, np.ndarray) else y


@pytest.mark.parametrize("kind", list(_DERIVED))
def test_anything_derived_from_a_view_alone_keeps_the_frame(link, kind):
    """Only the derived object is left (the FrameViews released, the plane arrays dropped): the producer still
    cannot reuse the buffer, the pixels are this frame's, and writing stays refused; dropping it sends the DONE.
    By the fast path (after the general path's first frames) and by the general path."""
    pool, tx, rx = link
    for k in range(5):
        _send(pool, tx, k)
        v = rx.recv_views(timeout=5)
        assert all(type(p) is np.ndarray for p in v.planes)  # a plain array, whatever keeps the frame behind it
        d = _DERIVED[kind](v[0])
        v.release()
        del v
        gc.collect()
        assert tx.in_flight == 1, f"frame {k}: the buffer went back while a {kind} of its view was alive"
        arr = np.asarray(d)
        assert (arr.view(np.uint8) == k).all()
        if isinstance(d, np.ndarray):
            with pytest.raises(ValueError):
                d.flags.writeable = True
        with pytest.raises(ValueError):
            arr[...] = 0
        del d, arr
        assert tx.wait_returned(5)


def test_dropped_views_send_their_done(link):
    pool, tx, rx = link
    for k in range(6):
        _send(pool, tx, k)
        rx.recv_views(timeout=5)  # dropped at once, never released
        assert tx.wait_returned(5)
    assert tx.returned == 6


def test_writer_views_are_writable_and_commit(link):
    pool, tx, _ = link
    a, b = seqpacket_pair()
    tx2, rxw = FrameSender(a), FrameReceiver(b, writer=True)
    for _ in range(5):
        f = pool.acquire(timeout=5)
        tx2.send(f, commit=False)
        buf = buffers_of(f)[0]
        v = rxw.recv_views(timeout=5)
        v[0][:] = 7
        v.commit()
        _, state, seq = read_marker(buf.mapping(False).address, v.metadata["commit_marker"])
        assert state == MARKER_COMMITTED and seq == v.sequence
        v.release()
        assert tx2.wait_returned(5)
        with interop.map(f, MemoryType.CPU) as c:
            assert (np.asarray(c[0]) == 7).all()
        f.release()
    tx2.close()
    rxw.close()


def test_committing_again_never_shows_another_process_a_part_written_marker(link):
    """A frame committed again (each send of a fan-out commits it) while a consumer in another process reads its
    marker: that reader sees COMMITTED with the frame's sequence on every read, never a cleared or half-written
    word (it would drop a complete frame as torn)."""
    pool, tx, _ = link
    a, b = seqpacket_pair()
    tx2, rxw = FrameSender(a), FrameReceiver(b, writer=True)
    f = pool.acquire(timeout=5)
    tx2.send(f, commit=False)
    v = rxw.recv_views(timeout=5)
    v.commit()
    addr = buffers_of(f)[0].mapping(False).address + v.metadata["commit_marker"]
    want = (MARKER_MAGIC, MARKER_COMMITTED, v.sequence)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader: the same shared pages, read as a consumer's receive does
        code = 1
        try:  # whatever happens, the child never returns into pytest
            bad = reads = 0
            os.write(w, b"r")
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                for _ in range(2000):
                    bad += read_marker(addr, 0) != want
                reads += 2000
            os.write(w, f"{bad} {reads}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)  # the child's end only: a child that fails leaves EOF, not a read that waits for ever
    try:
        assert os.read(r, 1) == b"r"
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for _ in range(2000):
                v.commit()
    finally:
        _, status = os.waitpid(pid, 0)
    got = os.read(r, 100).split()
    os.close(r)
    assert status == 0 and len(got) == 2, (status, got)
    bad, reads = int(got[0]), int(got[1])
    assert reads > 0
    assert bad == 0, f"{bad} of {reads} reads saw a marker that was not COMMITTED with the frame's sequence"
    v.release()
    assert tx2.wait_returned(5)
    f.release()
    tx2.close()
    rxw.close()


def test_a_reader_cannot_commit(link):
    pool, tx, rx = link
    _send(pool, tx, 1)
    with rx.recv_views(timeout=5) as v, pytest.raises(InvalidTensorError, match="writer"):
        v.commit()


def test_the_fast_path_checks_per_frame_fields_and_torn_frames(link):
    pool, tx, rx = link
    for k in range(4):
        _send(pool, tx, k)
        rx.recv_views(timeout=5).release()
        assert tx.wait_returned(5)
    sent = capture_sent(tx)
    _send(pool, tx, 5)
    v = rx.recv_views(timeout=5)
    assert type(v._shape).__name__ == "_ViewLayout"  # it came by the fast path
    v.release()
    assert tx.wait_returned(5)
    good = sent[-1]
    a = tx._sock._sock
    for at, data, match in ((_FID_AT, bytes(8), "frame id 0"), (_PTS_AT, (5).to_bytes(8, "little"), "pts"),
                            (len(good) - 8, (99).to_bytes(8, "little"), "generation"),
                            (6, (9).to_bytes(2, "little"), "not an interop frame message")):
        bad = bytearray(good)
        bad[at:at + len(data)] = data
        a.send(bytes(bad))
        with pytest.raises(ProtocolError, match=match):
            rx.recv_views(timeout=5)
    bad = bytearray(good)  # a sequence the commit marker does not have: torn, dropped, DONE sent
    bad[_FID_AT + 8:_FID_AT + 16] = (12345).to_bytes(8, "little")
    a.send(bytes(bad))
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0.2)
    assert rx.torn == 1
    _send(pool, tx, 6)
    with rx.recv_views(timeout=5) as v:
        assert (v[0] == 6).all()


def test_timeouts_poll_and_eof(link):
    pool, tx, rx = link
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0)
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0.05)
    with pytest.raises(ValueError):
        rx.recv_views(timeout=-1)
    _send(pool, tx, 3)
    with rx.recv_views(timeout=0) as v:
        assert (v[0] == 3).all()
    tx.close()
    assert rx.recv_views(timeout=5) is None
    assert rx.recv_views() is None


def test_fds_with_every_frame_and_forget_while_views_are_held():
    pool = FramePool(FrameFormat.NV12, 64, 32, 2)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a, slots=0), FrameReceiver(b)
    for k in range(3):
        _send(pool, tx, k)
        y = rx.recv_views(timeout=5)[0]
        assert tx.in_flight == 1 and (y == k).all()
        del y
        assert tx.wait_returned(5)
    tx.close()
    rx.close()
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    held = []
    for k in range(6):
        _send(pool, tx, k)
        v = rx.recv_views(timeout=5)
        if k < 4:  # the first four go back; the last two are held while the pool closes
            v.release()
            del v
            assert tx.wait_returned(5)
        else:
            held.append(v)
    pool.close()  # buffers held by the consumer stay open; the others are forgotten
    views = [h[0] for h in held]
    for h in held:
        h.release()
    with pytest.raises(TransportTimeoutError):
        rx.recv_views(timeout=0.2)
    assert [int(y[0, 0]) for y in views] == [4, 5]
    del views, held, v
    assert tx.wait_returned(5)
    tx.close()
    rx.close()
