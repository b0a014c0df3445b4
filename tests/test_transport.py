"""Frames across processes over a Unix socket: fds by SCM_RIGHTS, rebuilt zero-copy, buffers returned to the pool."""

from __future__ import annotations

import gc
import os
import socket
import time
from fractions import Fraction

import numpy as np
import pytest

import interop
from interop import AccessMode, ColorRange, ColorSpace, FrameFormat, InvalidTensorError, MemoryType
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, DMATensor, FramePool, frame_from_fds, live_buffers
from interop.transport import (
    FrameReceiver,
    FrameSender,
    FrameServer,
    PeerClosedError,
    ProtocolError,
    connect,
    seqpacket_pair,
)
from tests.dma_peer import fill as _fill
from tests.dma_peer import read_line, spawn


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_child_writes_into_parent_frame_parent_sees_them_through_its_mapping():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    f = pool.acquire()
    _fill(f, 0xAB)
    p, sock = spawn("write_received")
    tx = FrameSender(sock)
    tx.send(f)
    assert read_line(p) == f"saw {0xAB} {0xAB}"
    assert tx.wait_returned(10)  # the child released the frame: DONE came back
    with interop.map(f, MemoryType.CPU) as c:
        y, uv = np.asarray(c[0]), np.asarray(c[1])
        assert y[3, 7] == 7 and np.count_nonzero(y == 0x5A) == y.size - 1
        assert np.all(uv == 0x33)
        # our view is our own mapping of the same pages the child wrote
        assert y.ctypes.data == f[0].buffer.mapping(False).address + f[0].offset
        del y, uv  # views keep the buffer in use; drop them before giving it back
    assert p.wait(10) == 0
    f.release()
    tx.close()
    assert pool.free_count == pool.size


def test_parent_writes_into_child_frame_child_sees_them():
    p, sock = spawn("send_own")
    rx = FrameReceiver(sock)
    f = rx.recv(timeout=10)
    assert f.format is FrameFormat.NV12 and (f.width, f.height) == (64, 48)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.READ_WRITE) as c:
        y = np.asarray(c[0])
        assert y[0, 0] == 0x11  # the child's data, zero-copy
        assert y.ctypes.data == f[0].buffer.mapping(True).address + f[0].offset
        y[:] = 0x77
        np.asarray(c[1])[:] = 0x42
        del y  # a live view keeps the buffer in use: the DONE waits for the last one
    f.release()  # sends DONE
    assert read_line(p) == "returned True 119 119 66"
    assert p.wait(10) == 0
    rx.close()


def test_metadata_and_layout_round_trip_in_process():
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    pool = FramePool(FrameFormat.I420, 854, 480, 1, pitch_align=128)
    f = pool.acquire()
    f.pts, f.time_base = 3003, Fraction(1, 30000)
    f.colorspace, f.color_range = ColorSpace.BT709, ColorRange.LIMITED
    tx.send(f)
    g = rx.recv(timeout=5)
    assert g.format is FrameFormat.I420 and (g.width, g.height) == (854, 480)
    assert (g.pts, g.time_base, g.colorspace, g.color_range) == (3003, Fraction(1, 30000), ColorSpace.BT709, ColorRange.LIMITED)
    for s, r in zip(f.tensors, g.tensors):
        assert (r.offset, r.pitch, r.info, r.drm_fourcc, r.drm_modifier) == (s.offset, s.pitch, s.info, s.drm_fourcc, s.drm_modifier)
        assert r.fd != s.fd and os.fstat(r.fd).st_ino == os.fstat(s.fd).st_ino  # same memory, our own fd
    assert g.metadata["sequence"] == 1 and rx.torn == 0
    g.release()
    f.release()
    assert tx.wait_returned(5) and pool.free_count == 1
    tx.close()
    rx.close()


def test_server_and_connect_by_path(tmp_path):
    path = str(tmp_path / "frames.sock")
    with FrameServer(path) as srv:
        rx = connect(path, timeout=5)
        tx = srv.accept(timeout=5)
        ctx = DMAContext()
        f = ctx.alloc_frame(FrameFormat.GRAY8, 32, 16)
        _fill(f, 9)
        tx.send(f)
        g = rx.recv(timeout=5)
        with interop.map(g, MemoryType.CPU) as c:
            assert np.all(np.asarray(c[0]) == 9)
        g.release()
        assert tx.wait_returned(5)
        rx.close()
        assert tx.wait_returned(5) and not _wait_dead(tx)
        with pytest.raises(PeerClosedError, match="consumer is gone"):
            tx.send(f)
        tx.close()


def _wait_dead(tx: FrameSender) -> bool:
    import time

    t = time.monotonic() + 5
    while tx.alive and time.monotonic() < t:
        time.sleep(0.01)
    return tx.alive


def test_receiver_refuses_unsealed_memfd_from_a_peer():
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    fd = os.memfd_create("unsealed")  # a peer could truncate this under our mapping: SIGBUS
    os.ftruncate(fd, 64 * 48)
    f = frame_from_fds(fd, FrameFormat.GRAY8, 64, 48)
    os.close(fd)
    tx.send(f)
    n = _fd_count()
    with pytest.raises(InvalidTensorError, match="unsealed memfd.*SIGBUS"):
        rx.recv(timeout=5)
    assert _fd_count() == n  # the received fd was closed
    f.release()
    assert tx.wait_returned(5)  # refused frames are returned to the producer at once
    tx.close()
    rx.close()


def test_receiver_rejects_foreign_messages_and_keeps_working():
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    a.send(b"hello, not a frame" * 10)
    with pytest.raises(ProtocolError, match="not an interop frame message"):
        rx.recv(timeout=5)
    tx = FrameSender(a)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    tx.send(f)
    assert rx.recv(timeout=5) is not None
    tx.close()
    assert rx.recv(timeout=5) is None and rx.closed  # EOF: the producer is gone


def test_sender_needs_seqpacket_and_dma_frames():
    s1, s2 = socket.socketpair()
    with pytest.raises(InvalidTensorError, match="SOCK_SEQPACKET"):
        FrameSender(s1)
    with pytest.raises(InvalidTensorError, match="SOCK_SEQPACKET"):
        FrameReceiver(s2)
    s1.close()
    s2.close()
    a, b = seqpacket_pair()
    tx = FrameSender(a)
    cpu = interop.wrap(np.zeros((4, 4, 3), np.uint8), format=FrameFormat.RGB)
    with pytest.raises(InvalidTensorError, match="DMA Frame"):
        tx.send(cpu)
    tx.close()
    b.close()


def test_no_fd_leak_over_allocate_map_send_release_cycles(soak):
    n = 10_000 if soak else 300
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    ctx = DMAContext()

    def cycle(i: int) -> None:
        fresh = ctx.alloc_frame(FrameFormat.GRAY8, 32, 8)  # allocate
        _fill(fresh, i & 0xFF)  # map
        with DMATensor.from_fd(fresh[0].fd, info=fresh[0].info) as dup:  # wrap a caller's fd: a dup of ours
            assert dup.fd != fresh[0].fd
        f = pool.acquire(timeout=5)
        _fill(f, i & 0xFF)
        tx.send(f)  # send
        tx.send(fresh)
        f.release()
        fresh.release()
        for _ in range(2):
            g = rx.recv(timeout=5)
            with interop.map(g, MemoryType.CPU) as c:
                assert np.asarray(c[0])[0, 0] == i & 0xFF
            g.release()  # release
        assert tx.wait_returned(5)

    for i in range(5):  # warm-up
        cycle(i)
    gc.collect()
    fds, bufs, maps = _fd_count(), live_buffers(), nd.live_mappings()
    for i in range(n):
        cycle(i)
    gc.collect()
    assert _fd_count() == fds
    assert live_buffers() == bufs
    assert nd.live_mappings() == maps
    assert pool.free_count == pool.size
    tx.close()
    rx.close()


def test_frame_with_an_fd_per_plane_crosses_with_both_fds():
    y, uv = nd.memfd_alloc(64 * 48), nd.memfd_alloc(64 * 24)
    os.pwrite(y, b"\x07" * 64, 0)
    os.pwrite(uv, b"\x09" * 64, 0)
    f = frame_from_fds([y, uv], FrameFormat.NV12, 64, 48)
    os.close(y)
    os.close(uv)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    tx.send(f)
    g = rx.recv(timeout=5)
    assert g[0].fd != g[1].fd and g[0].offset == g[1].offset == 0
    with interop.map(g, MemoryType.CPU) as c:
        assert np.asarray(c[0])[0, 5] == 7 and np.asarray(c[1])[0, 5, 1] == 9
    g[0].release()
    time.sleep(0.05)  # give a (wrong) early DONE time to arrive
    assert tx.in_flight == 1  # DONE only when every plane's buffer is free
    g.release()
    assert tx.wait_returned(5)
    f.release()
    tx.close()
    rx.close()


# ---- issue 15: everything a peer sends is checked on receipt; typed errors; FrameServer's path ----------------

import array  # noqa: E402
import struct  # noqa: E402

from interop import InteropError  # noqa: E402
from interop.tensors.dma import MARKER_SIZE, read_marker  # noqa: E402
from interop.transport import (  # noqa: E402
    _FRAME,
    _HEAD,
    _PLANE,
    PathInUseError,
    TransportTimeoutError,
    _encode_frame,
    commit,
)

PLANE_AT = _HEAD.size + _FRAME.size


def _pool_message(fmt=FrameFormat.NV12, w=16, h=12):
    pool = FramePool(fmt, w, h, 1)
    f = pool.acquire()
    seq = pool.commit(f)
    buf = f[0].buffer
    return pool, f, bytearray(_encode_frame(1, f, [buf], seq, pool.marker_offset)), buf


def _send_raw(sock: socket.socket, msg: bytes, fds: list[int]) -> None:
    sock.sendmsg([bytes(msg)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])


def _refused(msg: bytes, fds: list[int], match: str, *, writer: bool = False) -> None:
    a, b = seqpacket_pair()
    rx = FrameReceiver(b, writer=writer)
    n = _fd_count()
    _send_raw(a, msg, fds)
    with pytest.raises(ProtocolError, match=match):
        rx.recv(timeout=5)
    assert _fd_count() == n  # nothing received is kept
    rx.close()
    a.close()


@pytest.mark.parametrize("writer", [False, True])
def test_commit_marker_offset_beyond_the_buffer_is_refused_for_readers_and_writers(writer):
    pool, f, msg, buf = _pool_message()
    # just past the end of the buffer (inside the same page, so the old code wrote there silently)
    struct.pack_into("<Q", msg, 24, buf.size)
    _refused(msg, [buf.fd], "commit marker offset", writer=writer)
    struct.pack_into("<Q", msg, 24, 1 << 40)
    _refused(msg, [buf.fd], "commit marker offset", writer=writer)
    struct.pack_into("<Q", msg, 24, 0)  # inside the buffer but over the Y plane
    _refused(msg, [buf.fd], "overlaps a plane", writer=writer)
    f.release()
    pool.close()


def test_writer_commit_refuses_a_marker_offset_changed_after_receipt():
    pool, f, msg, buf = _pool_message()
    a, b = seqpacket_pair()
    rx = FrameReceiver(b, writer=True)
    _send_raw(a, msg, [buf.fd])
    g = rx.recv(timeout=5)
    g.metadata["commit_marker"] = g[0].buffer.size - MARKER_SIZE + 1
    with pytest.raises(InvalidTensorError, match="not inside this frame's buffer"):
        commit(g)
    g.metadata["commit_marker"] = pool.marker_offset
    commit(g)
    assert read_marker(g[0].buffer.mapping(False).address, pool.marker_offset)[2] == g.metadata["sequence"]
    g.release()
    rx.close()
    a.close()
    f.release()
    pool.close()


def test_header_with_no_planes_and_a_commit_marker_is_a_protocol_error():
    pool, f, msg, buf = _pool_message()
    msg[_HEAD.size + 20] = 0  # planes
    msg[_HEAD.size + 21] = 0  # fds
    _refused(bytes(msg[:PLANE_AT]), [], "planes")  # was an IndexError
    f.release()
    pool.close()


@pytest.mark.parametrize("what, at, value, match", [
    ("UV plane with 0 channels", PLANE_AT + _PLANE.size + 32 + 16, 0, "shape"),
    ("Y pitch 2**62", PLANE_AT + 64, 1 << 62, "row pitch"),
    ("UV pitch 2**62", PLANE_AT + _PLANE.size + 64, 1 << 62, "row pitch"),
    ("width that disagrees with the planes", _HEAD.size + 8, 8, "width/height and planes disagree"),
    ("height that disagrees with the planes", _HEAD.size + 12, 24, "width/height and planes disagree"),
    ("plane offset past the buffer", PLANE_AT + 8, 1 << 40, "beyond its buffer"),
    ("dtype of another size", PLANE_AT + 2, int.from_bytes(b"<u2\0", "little"), "dtype"),
])
def test_bad_plane_fields_are_protocol_errors(what, at, value, match):
    pool, f, msg, buf = _pool_message()
    fmt = "<I" if at - _HEAD.size in (8, 12) and at < PLANE_AT else "<Q"
    struct.pack_into(fmt, msg, at, value)
    _refused(bytes(msg), [buf.fd], match)
    f.release()
    pool.close()


def test_transport_errors_have_builtin_bases():
    assert issubclass(PeerClosedError, InteropError) and issubclass(PeerClosedError, ConnectionError)
    assert issubclass(ProtocolError, InteropError) and issubclass(ProtocolError, ValueError)
    assert issubclass(TransportTimeoutError, InteropError) and issubclass(TransportTimeoutError, TimeoutError)
    assert issubclass(PathInUseError, InteropError) and issubclass(PathInUseError, FileExistsError)


def test_wire_codes_are_fixed_numbers():
    from interop.transport import _CR_CODE, _CS_CODE

    assert _CS_CODE == {None: 0, ColorSpace.BT601: 1, ColorSpace.BT709: 2, ColorSpace.BT2020: 3, ColorSpace.SRGB: 4}
    assert _CR_CODE == {None: 0, ColorRange.LIMITED: 1, ColorRange.FULL: 2}
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    f.colorspace, f.color_range = ColorSpace.BT2020, ColorRange.FULL
    msg = _encode_frame(1, f, [f[0].buffer], 0, 2**64 - 1)
    assert (msg[_HEAD.size + 22], msg[_HEAD.size + 23]) == (3, 2)
    f.release()


def test_server_refuses_to_remove_a_regular_file(tmp_path):
    path = tmp_path / "frames.sock"
    path.write_text("user data")
    with pytest.raises(PathInUseError, match="not a socket"):
        FrameServer(str(path))
    assert path.read_text() == "user data"


def test_server_refuses_to_take_over_a_live_servers_path(tmp_path):
    path = str(tmp_path / "frames.sock")
    with FrameServer(path) as first:
        with pytest.raises(PathInUseError, match="live server"):
            FrameServer(path)
        rx = connect(path, timeout=5)  # the first server still owns its path
        tx = first.accept(timeout=5)
        f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
        tx.send(f)
        g = rx.recv(timeout=5)
        assert g is not None
        g.release()
        tx.close()
        rx.close()
        f.release()


def test_server_replaces_a_stale_socket(tmp_path):
    path = str(tmp_path / "frames.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(path)
    dead.close()  # the socket file stays: a server that died
    with FrameServer(path) as srv:
        rx = connect(path, timeout=5)
        tx = srv.accept(timeout=5)
        assert tx.alive
        tx.close()
        rx.close()
    assert not os.path.exists(path)


def test_an_empty_message_is_not_taken_for_the_producer_leaving():
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    a.send(b"")  # reads like SEQPACKET EOF, but the producer is still there
    with pytest.raises(ProtocolError, match="empty message"):
        rx.recv(timeout=5)
    assert not rx.closed
    tx = FrameSender(a)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    tx.send(f)
    g = rx.recv(timeout=5)
    assert g is not None
    g.release()
    tx.close()
    assert rx.recv(timeout=5) is None and rx.closed  # a real EOF still ends the stream
    f.release()
