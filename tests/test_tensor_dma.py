"""DMA tensors and frames: fd ownership, handles, allocation, pools, bad input."""

from __future__ import annotations

import ctypes
import errno
import os
import socket

import numpy as np
import pytest

import interop
from interop import (
    AccessMode,
    FrameFormat,
    InvalidTensorError,
    MemoryType,
    TensorInfo,
    UnsupportedFormatError,
)
from interop.native import dmabuf as nd
from interop.tensors.dma import (
    DRM_FOURCC,
    DMAContext,
    DMATensor,
    FramePool,
    dma_frame,
    format_of_fourcc,
    fourcc,
    frame_from_fds,
    live_buffers,
)

I915_FORMAT_MOD_Y_TILED = (1 << 56) | 2  # fourcc_mod_code(INTEL, 2): needs all 64 bits


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def memfd():
    fd = nd.memfd_alloc(4096, "test")
    yield fd
    os.close(fd)


def test_ioctl_numbers_match_the_kernel_headers():
    assert nd.DMA_BUF_IOCTL_SYNC == 0x40086200
    assert nd.UDMABUF_CREATE == 0x40187542
    assert nd.DMA_HEAP_IOCTL_ALLOC == 0xC0184800
    assert nd.DMA_BUF_IOCTL_EXPORT_SYNC_FILE == 0xC0086202 and nd.DMA_BUF_IOCTL_IMPORT_SYNC_FILE == 0x40086203


def test_from_fd_keeps_its_own_dup_and_never_closes_the_callers_fd(memfd):
    n = _fds()
    t = DMATensor.from_fd(memfd, info=TensorInfo((16, 256), np.uint8), offset=0, drm_fourcc=fourcc("R8"),
                          drm_modifier=I915_FORMAT_MOD_Y_TILED)
    assert _fds() == n + 1 and t.fd != memfd
    assert os.fstat(t.fd).st_ino == os.fstat(memfd).st_ino
    assert (t.offset, t.size, t.pitch, t.drm_fourcc) == (0, 4096, 256, fourcc("R8"))
    assert t.drm_modifier == I915_FORMAT_MOD_Y_TILED and t.handle("drm_modifier") == I915_FORMAT_MOD_Y_TILED
    assert t.handle("dma_fd") == t.fd and t.handle("offset") == 0
    assert t.is_dmabuf is False  # a memfd stand-in, said plainly
    own = t.fd
    t.release()
    assert _fds() == n
    with pytest.raises(OSError):
        os.fstat(own)
    os.fstat(memfd)  # the caller's fd is still open
    with pytest.raises(InvalidTensorError, match="released"):
        _ = t.fd


def test_take_ownership_closes_the_given_fd_at_release():
    fd = nd.memfd_alloc(4096)
    t = DMATensor.from_fd(fd, info=TensorInfo((4096,), np.uint8), take_ownership=True)
    assert t.fd == fd
    t.release()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_views_share_the_fd_until_the_last_is_released(memfd):
    n = _fds()
    t = DMATensor.from_fd(memfd, info=TensorInfo((16, 256), np.uint8))
    r = t.region(8, 4, 16, 8)
    assert r.fd == t.fd and r.offset == 4 * 256 + 8 and r.pitch == 256
    t.release()
    assert _fds() == n + 1 and r.fd >= 0
    r.release()
    assert _fds() == n


def test_allocator_here_is_a_sealed_memfd_reported_as_not_dmabuf():
    ctx = DMAContext()
    kinds = nd.available_kinds()
    assert ctx.device == kinds[0]
    t = ctx.alloc_tensor(TensorInfo((100, 100), np.uint8))
    if ctx.device == "memfd":
        assert not t.is_dmabuf and not ctx.is_dmabuf
        import fcntl
        assert nd.seals(t.fd) & fcntl.F_SEAL_SHRINK and nd.seals(t.fd) & fcntl.F_SEAL_GROW
        with pytest.raises(OSError) as e:
            os.ftruncate(t.fd, 0)
        assert e.value.errno == errno.EPERM
    assert nd.dma_buf_sync(t.fd, True, True) is t.is_dmabuf  # ENOTTY on a memfd: nothing to sync
    t.release()


def test_drm_fourcc_table_round_trips():
    assert DRM_FOURCC[FrameFormat.NV12] == 0x3231564E
    assert DRM_FOURCC[FrameFormat.I420] == fourcc("YU12")
    assert DRM_FOURCC[FrameFormat.BGRX] == fourcc("XR24")  # DRM_FORMAT_XRGB8888 is B,G,R,X in memory
    for fmt, code in DRM_FOURCC.items():
        assert format_of_fourcc(code) is fmt
    with pytest.raises(UnsupportedFormatError, match="no interop FrameFormat"):
        format_of_fourcc(fourcc("YUYV"))


def test_frame_from_fds_one_fd_per_frame_and_one_per_plane():
    fd = nd.memfd_alloc(64 * 48 * 3 // 2)
    f = frame_from_fds(fd, FrameFormat.NV12, 64, 48)
    assert f.memory_type is MemoryType.DMA and [t.offset for t in f] == [0, 64 * 48]
    assert f[0].fd == f[1].fd and f[0].drm_fourcc == DRM_FOURCC[FrameFormat.NV12]
    f.release()
    y, uv = nd.memfd_alloc(64 * 48), nd.memfd_alloc(64 * 24)
    g = frame_from_fds([y, uv], FrameFormat.NV12, 64, 48, pitches=[64, 64])
    assert g[0].fd != g[1].fd and [t.offset for t in g] == [0, 0]
    g.release()
    for x in (fd, y, uv):
        os.close(x)


def test_dma_frame_and_crop_are_zero_copy_views():
    f = DMAContext().alloc_frame(FrameFormat.I420, 854, 480)
    assert [t.pitch for t in f] == [896, 448, 448]
    c = f.crop(64, 32, 128, 64)
    assert c[0].offset == f[0].offset + 32 * 896 + 64 and c[1].offset == f[1].offset + 16 * 448 + 32
    assert c[0].fd == f[0].fd
    g = dma_frame(list(f.tensors), FrameFormat.I420, 854, 480)
    assert g.memory_type is MemoryType.DMA
    c.release()
    f.release()


def test_frame_pool_acquire_release_and_exhaustion():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    a, b = pool.acquire(), pool.acquire()
    assert pool.free_count == 0 and a[0].fd != b[0].fd
    with pytest.raises(TimeoutError, match="no free buffer"):
        pool.acquire(timeout=0.05)
    view = interop.map(a, MemoryType.CPU)
    a.release()
    assert pool.free_count == 0  # still mapped: a buffer is not reused while a mapping of it is alive
    view.release()
    assert pool.free_count == 1
    b.release()
    assert pool.free_count == 2
    n = live_buffers()
    pool.close()
    assert live_buffers() == n - 2


def test_pool_frames_are_what_the_checked_constructors_build():
    """acquire() builds its planes unchecked over one shared hold of the buffer: each plane and the frame carry
    what DMATensor() / dma_frame() give for the same layout (every attribute, the same handles and values)."""
    from interop.tensors.dma import _frame_on

    pool = FramePool(FrameFormat.I420, 70, 46, 2)
    f = pool.acquire()
    buf = f[0].buffer
    checked = _frame_on(buf, pool.format, pool.width, pool.height, pool.offsets, pool.pitches, pool.context)
    # the values, not only the names: an attribute the checked constructor sets reads the same on the fast one
    # (set on it or a class default); the fast frame differs by its planes (compared below) and pool slot
    assert {k for k, v in vars(checked).items() if k not in ("metadata", "_tensors") and getattr(f, k) != v} == set()
    assert (f.metadata, checked.metadata) == ({"pool_slot": 0}, {})
    for fast, slow in zip(f.tensors, checked.tensors):
        assert {k for k, v in vars(slow).items() if k not in ("_finalizer", "_hooks") and getattr(fast, k) != v} == set()
        assert set(vars(fast)) - set(vars(slow)) == {"_lease"} and fast._hooks is None and fast._finalizer is None
        assert slow._hooks  # the checked plane's own use of the buffer, which the fast one's lease stands for
        assert [fast.handle(k) for k in DMATensor.HANDLE_KEYS] == [slow.handle(k) for k in DMATensor.HANDLE_KEYS]
    checked.release()
    f.release()
    assert pool.free_count == 2
    pool.close()


def test_pool_frame_goes_back_once_its_planes_and_every_view_are_gone():
    """The planes share one hold on the buffer: dropping the frame unreleased gives it back (reference counting),
    and a CPU view of a plane (the cached-mapping path, from the second map of the buffer on) keeps it out until
    the view is gone; a write through the view is read through the producer's own mapping."""
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    buf = pool.slots[0].buffer
    for k in range(2):  # the second map of the buffer takes the cached path (the fd takes no sync ioctl)
        f = pool.acquire()
        y = np.asarray(interop.map(f[0], MemoryType.CPU, mode=interop.AccessMode.WRITE))
        if k == 1 and buf.syncable is False:  # a memfd: the view holds the frame's lease, not a use of its own
            assert buf.users == 1 and len(buf.host_views) == 1
        y[3, 5] = 77
        m = f[0].buffer.mapping(False)
        assert ctypes.c_uint8.from_address(m.address + pool.offsets[0] + 3 * pool.pitches[0] + 5).value == 77
        assert y.ctypes.data == f[0].buffer.mapping(True).address + pool.offsets[0]  # the pool's memory, no copy
        del f, m
        assert pool.free_count == 0  # the view holds the frame's buffer
        del y
        assert pool.free_count == 1
    pool.close()


# ---- bad input: each a typed error saying what to do ------------------------------------------------------


def test_closed_fd_is_refused():
    fd = nd.memfd_alloc(4096)
    os.close(fd)
    with pytest.raises(InvalidTensorError, match="is closed.*keep the fd open"):
        DMATensor.from_fd(fd, info=TensorInfo((16,), np.uint8))


def test_regular_file_too_short_for_the_layout_is_refused(tmp_path):
    p = tmp_path / "frame.raw"
    p.write_bytes(b"\0" * 1000)
    with open(p, "r+b") as fh:
        with pytest.raises(InvalidTensorError, match="holds 1000 bytes, too short for the layout"):
            DMATensor.from_fd(fh.fileno(), info=TensorInfo((10, 101), np.uint8))
        with pytest.raises(InvalidTensorError, match="larger than fd .* too short"):
            DMATensor.from_fd(fh.fileno(), info=TensorInfo((10,), np.uint8), size=4096)
        n = _fds()
        t = DMATensor.from_fd(fh.fileno(), info=TensorInfo((10, 100), np.uint8))  # a file that is long enough works
        assert not t.is_dmabuf
        t.release()
        assert _fds() == n


def test_offset_beyond_size_is_refused(memfd):
    with pytest.raises(InvalidTensorError, match="offset 8192 is beyond the end.*check the plane offset"):
        DMATensor.from_fd(memfd, info=TensorInfo((16,), np.uint8), offset=8192)
    with pytest.raises(InvalidTensorError, match="negative"):
        DMATensor.from_fd(memfd, info=TensorInfo((16,), np.uint8), offset=-1)


def test_pitch_smaller_than_the_row_is_refused(memfd):
    with pytest.raises(InvalidTensorError, match="pitch 32 of plane Y is smaller than its row of 64.*real pitch"):
        frame_from_fds(memfd, FrameFormat.NV12, 64, 32, pitches=[32, 64])
    with pytest.raises(InvalidTensorError, match="overlap"):
        DMATensor.from_fd(memfd, info=TensorInfo((16, 64), np.uint8, (32, 1)))


@pytest.mark.parametrize("kind", ["socket", "pipe"])
def test_socket_or_pipe_fd_is_refused(kind):
    if kind == "socket":
        a, b = socket.socketpair()
        fd, keep = a.fileno(), (a, b)
    else:
        r, w = os.pipe()
        fd, keep = r, (r, w)
    with pytest.raises(InvalidTensorError, match=f"is a {kind}, not memory: pass a dma-buf fd"):
        DMATensor.from_fd(fd, info=TensorInfo((16,), np.uint8))
    for k in keep:
        k.close() if hasattr(k, "close") else os.close(k)


def test_non_int_fd_and_bad_modifier_are_refused(memfd):
    with pytest.raises(InvalidTensorError, match="must be an int file descriptor"):
        DMATensor.from_fd("3", info=TensorInfo((16,), np.uint8))  # type: ignore[arg-type]
    with pytest.raises(InvalidTensorError, match="64 unsigned bits"):
        DMATensor.from_fd(memfd, info=TensorInfo((16,), np.uint8), drm_modifier=1 << 64)


def test_dma_tensor_is_not_cpu_reachable_without_mapping(memfd):
    t = DMATensor.from_fd(memfd, info=TensorInfo((16,), np.uint8))
    with pytest.raises(interop.InteropError, match="map"):
        np.asarray(t)
    t.release()


# ---- real dma-buf heaps (tier C) ----------------------------------------------------------------------------


@pytest.mark.hardware("dma_heap")
def test_dma_heap_allocation_is_a_real_dmabuf_with_sync():
    fd = nd.heap_alloc(1 << 20)
    try:
        fi = nd.inspect_fd(fd)
        assert fi.is_dmabuf and fi.size == 1 << 20
        t = DMATensor.from_fd(fd, info=TensorInfo((1024, 1024), np.uint8))
        assert t.is_dmabuf
        assert nd.dma_buf_sync(t.fd, True, True) is True and nd.dma_buf_sync(t.fd, False, True) is True
        with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c)[:] = 3
        with interop.map(t, MemoryType.CPU) as c:
            assert np.all(np.asarray(c) == 3)
        t.release()
        assert DMAContext("dma_heap").alloc_tensor(TensorInfo((64,), np.uint8)).is_dmabuf
    finally:
        os.close(fd)


@pytest.mark.hardware("udmabuf")
def test_udmabuf_allocation_is_a_real_dmabuf():
    fd = nd.udmabuf_alloc(10000)
    try:
        fi = nd.inspect_fd(fd)
        assert fi.is_dmabuf and fi.size == nd.page_align(10000)
        t = DMATensor.from_fd(fd, info=TensorInfo((100, 100), np.uint8))
        with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c)[:] = 6
        assert t.buffer.syncable is True
        t.release()
    finally:
        os.close(fd)


# ---- reliability round two (issue 15): pool lifetime, handles of closed buffers, timeouts, allocator errors ----


def test_closed_pool_never_hands_out_a_closed_or_reused_fd():
    """close() with a frame still held: the held buffer keeps its fd (and mapping) until the frame is released; the
    next os.pipe() cannot take its number. After release every handle raises instead of returning the number."""
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    f = pool.acquire()
    t = f[0]
    fd, ino = t.fd, os.fstat(t.fd).st_ino
    pool.close()
    r, w = os.pipe()
    try:
        assert fd not in (r, w)
        assert t.fd == fd == t.handle("dma_fd") and os.fstat(t.fd).st_ino == ino
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:  # the held frame still works
            np.asarray(c[0]).fill(9)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(interop.InteropError, match="closed"):
        pool.acquire(timeout=0)
    f.release()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed at the release, not before
    for key in ("dma_fd", "offset", "size", "pitch", "drm_modifier", "drm_fourcc"):
        with pytest.raises(InvalidTensorError):
            t.handle(key)
    for name in ("fd", "offset", "size", "pitch", "drm_modifier", "drm_fourcc", "is_dmabuf", "buffer"):
        with pytest.raises(InvalidTensorError):
            getattr(t, name)


def test_handles_of_a_tensor_whose_buffer_was_closed_raise(memfd):
    t = DMATensor.from_fd(memfd, info=TensorInfo((16, 16), np.uint8), offset=256)
    buf = t.native
    buf.close()
    assert not t.released
    assert "closed" in repr(t) and "fd=" not in repr(t) and "fd=" not in repr(buf)  # repr never raises
    for name in ("fd", "offset", "size", "pitch", "drm_modifier", "drm_fourcc", "is_dmabuf", "buffer"):
        with pytest.raises(InvalidTensorError, match="closed"):
            getattr(t, name)
    with pytest.raises(InvalidTensorError, match="closed"):
        t.handle("dma_fd")
    with pytest.raises(InvalidTensorError, match="closed"):
        _ = buf.fd
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)
    t.release()


def test_released_dma_views_give_no_stale_address():
    f = DMAContext("memfd").alloc_frame(FrameFormat.NV12, 64, 48)
    c = interop.map(f, MemoryType.CPU)
    y = c[0]
    assert y.data_ptr
    c.release()
    f.release()
    with pytest.raises(InvalidTensorError):
        _ = y.data_ptr
    with pytest.raises(InvalidTensorError):
        np.asarray(y)
    with pytest.raises(InvalidTensorError):
        _ = f[0].fd


def test_dropped_pool_frees_its_fds_by_reference_counting():
    """The pool and its buffers must not form a cycle: with the cyclic GC off, dropping the pool closes its fds."""
    import gc

    gc.collect()
    n, bufs = _fds(), live_buffers()
    gc.disable()
    try:
        pool = FramePool(FrameFormat.NV12, 64, 48, 3)
        assert _fds() == n + 3
        del pool
        assert _fds() == n and live_buffers() == bufs
        pool = FramePool(FrameFormat.NV12, 64, 48, 3)
        f = pool.acquire()
        del pool  # a frame is out: it goes back to its pool at release, so the pool lives until then
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c[0]).fill(1)
        assert _fds() == n + 3
        f.release()
        del f, c
        assert _fds() == n and live_buffers() == bufs
        # a frame taken from a pool nobody holds goes back to it, and the pool's fds go with the last frame
        g = FramePool(FrameFormat.NV12, 64, 48, 2).acquire()
        assert _fds() == n + 2
        g.release()
        del g
        assert _fds() == n and live_buffers() == bufs
    finally:
        gc.enable()


def test_pool_constructor_failing_part_way_closes_every_fd_it_took(monkeypatch):
    import errno as _errno

    from interop.errors import ResourceError

    n, bufs = _fds(), live_buffers()
    real = nd.memfd_alloc
    calls = []

    def failing(size, name="interop-dma"):
        calls.append(size)
        if len(calls) == 3:
            raise nd.fd_exhausted(OSError(_errno.EMFILE, os.strerror(_errno.EMFILE)), "allocate")
        return real(size, name)

    monkeypatch.setattr(nd, "memfd_alloc", failing)
    with pytest.raises(ResourceError) as ei:
        FramePool(FrameFormat.NV12, 64, 48, 4, context=DMAContext("memfd"))
    assert ei.value.errno == _errno.EMFILE and isinstance(ei.value, OSError)
    assert len(calls) == 3 and _fds() == n and live_buffers() == bufs
    monkeypatch.setattr(nd, "memfd_alloc", real)
    with FramePool(FrameFormat.NV12, 64, 48, 2) as pool:  # the next pool fits
        assert pool.size == 2


def test_pool_under_a_real_fd_limit_fails_cleanly_and_the_next_pool_fits():
    """RLIMIT_NOFILE in a child: a pool larger than the fds left raises ResourceError (errno EMFILE) and returns
    every fd it took, so a smaller pool right after it works."""
    import subprocess
    import sys

    code = """
import os, resource, errno
from interop import FrameFormat
from interop.errors import ResourceError
from interop.tensors.dma import FramePool, live_buffers
n = len(os.listdir('/proc/self/fd'))
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 6, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    FramePool(FrameFormat.NV12, 64, 48, 50)
    print('no error')
except ResourceError as e:
    assert isinstance(e, OSError) and e.errno == errno.EMFILE, e
    assert len(os.listdir('/proc/self/fd')) == n and live_buffers() == 0, 'fds leaked'
    p = FramePool(FrameFormat.NV12, 64, 48, 4)
    f = p.acquire(timeout=0)
    f.release()
    print('ok')
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize("pause", ["before", "after"])
def test_pool_closed_while_acquire_writes_the_marker(pause):
    """close() from another thread while acquire() is between taking a buffer off the free list and writing its
    WRITING marker (or just after the write): acquire() wrote through an unmapped mapping (a segfault) or raised
    InvalidTensorError. The frame now holds the buffer before the pool's lock is let go: acquire gives a usable
    frame, close() leaves its buffer open until it is released, then closes it. In a child: the old code crashed."""
    import subprocess
    import sys

    code = f"""
import threading, time
import numpy as np
import interop
import interop.tensors.dma as d
from interop import FrameFormat, MemoryType
real = d.write_marker
def slow(addr, off, state, seq):
    if state == d.MARKER_WRITING and {pause!r} == "before":
        time.sleep(0.3)
    real(addr, off, state, seq)
    if state == d.MARKER_WRITING and {pause!r} == "after":
        time.sleep(0.3)
d.write_marker = slow
pool = d.FramePool(FrameFormat.NV12, 64, 48, 1)
closer = threading.Thread(target=lambda: (time.sleep(0.1), pool.close()))
closer.start()
f = pool.acquire()
closer.join()
buf = f[0].buffer
assert pool.closed and not buf.closed
y = np.asarray(interop.map(f[0], MemoryType.CPU, mode=interop.AccessMode.WRITE))
y[:] = 7
assert int(y.sum()) == 7 * y.size
del y
f.release()
assert buf.closed
print("ok")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout + r.stderr[-2000:])


@pytest.mark.parametrize("timeout", [float("nan"), -1, -0.5, float("inf"), "1", True, [1]])
def test_acquire_refuses_a_bad_timeout_at_once(timeout):
    import threading

    with FramePool(FrameFormat.NV12, 64, 48, 1) as pool:
        held = pool.acquire()
        got: list[BaseException] = []

        def call():
            try:
                pool.acquire(timeout=timeout)
            except BaseException as e:  # noqa: BLE001 - checked below
                got.append(e)

        th = threading.Thread(target=call, daemon=True)  # NaN spun for ever: a hang must fail, not stall the run
        th.start()
        th.join(5)
        assert not th.is_alive(), f"acquire(timeout={timeout!r}) still running after 5 s"
        assert len(got) == 1 and isinstance(got[0], InvalidTensorError) and "timeout" in str(got[0]), got
        assert isinstance(got[0], ValueError)
        held.release()


def test_acquire_timeout_zero_polls():
    import time

    from interop.tensors.dma import PoolTimeoutError

    with FramePool(FrameFormat.NV12, 64, 48, 1) as pool:
        f = pool.acquire(timeout=0)  # a free buffer: taken at once
        t0 = time.monotonic()
        with pytest.raises(PoolTimeoutError) as ei:
            pool.acquire(timeout=0)
        assert time.monotonic() - t0 < 0.5
        assert isinstance(ei.value, TimeoutError) and isinstance(ei.value, interop.InteropError)
        f.release()
        pool.acquire(timeout=0).release()


def test_allocator_emfile_is_a_resource_error_and_does_not_disable_the_allocator(monkeypatch):
    import errno as _errno

    from interop.errors import ResourceError

    monkeypatch.setattr(nd, "available_kinds", lambda: ["udmabuf", "memfd"])
    monkeypatch.setattr(nd, "_kind_broken", set())
    n = _fds()

    def emfile(size):
        raise OSError(_errno.EMFILE, os.strerror(_errno.EMFILE))

    monkeypatch.setattr(nd, "udmabuf_alloc", emfile)
    with pytest.raises(ResourceError) as ei:
        nd.allocate(4096)
    assert isinstance(ei.value, OSError) and ei.value.errno == _errno.EMFILE and "ulimit" in str(ei.value)
    assert "udmabuf" not in nd._kind_broken  # transient: tried again next time
    assert _fds() == n

    def enodev(size):
        raise OSError(_errno.ENODEV, os.strerror(_errno.ENODEV))

    monkeypatch.setattr(nd, "udmabuf_alloc", enodev)
    fd, kind = nd.allocate(4096)  # a permanent failure falls back to the next allocator and is remembered
    os.close(fd)
    assert kind == "memfd" and "udmabuf" in nd._kind_broken


def test_memfd_emfile_is_a_resource_error_with_errno(monkeypatch):
    import errno as _errno

    from interop.errors import ResourceError

    def emfile(name, flags=0):
        raise OSError(_errno.EMFILE, os.strerror(_errno.EMFILE))

    monkeypatch.setattr(os, "memfd_create", emfile)
    with pytest.raises(ResourceError) as ei:
        DMAContext("memfd").alloc_frame(FrameFormat.NV12, 64, 48)
    assert isinstance(ei.value, OSError) and ei.value.errno == _errno.EMFILE


# ---- issue 15 point 1: a DMABuffer held as .native is a handle like any other -----------------------------------


def test_native_buffer_held_alone_keeps_its_fd_and_memory_until_it_is_dropped():
    """The rule: a DMABuffer's fd lives as long as the object. Held alone after its tensors and source are gone,
    it still reads the bytes; dropped, reference counting closes the fd at once (no cyclic GC needed)."""
    import gc

    gc.collect()
    n, bufs = _fds(), live_buffers()
    gc.disable()
    try:
        src = np.arange(4096, dtype=np.uint8).reshape(64, 64)
        t = interop.map(interop.wrap(src.copy()), MemoryType.DMA, allow_copy=True)
        native = t.native
        fd = native.fd
        del t
        assert not native.closed and native.users == 0
        assert os.pread(native.fd, 4096, 0) == src.tobytes()
        m = native.mapping(False)  # the held buffer still maps
        assert np.array_equal(np.frombuffer(ctypes_bytes(m.address, 4096), np.uint8).reshape(64, 64), src)
        del m
        assert _fds() == n + 1 and live_buffers() == bufs + 1
        del native
        assert _fds() == n and live_buffers() == bufs
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        gc.enable()


def ctypes_bytes(address: int, size: int) -> bytes:
    import ctypes

    return ctypes.string_at(address, size)


def test_release_closes_the_fd_at_once_unless_the_buffer_is_held(memfd):
    t = DMATensor.from_fd(memfd, info=TensorInfo((16, 256), np.uint8))
    fd = t.fd
    t.release()
    with pytest.raises(OSError):
        os.fstat(fd)  # nobody held the buffer: closed at the release
    t = DMATensor.from_fd(memfd, info=TensorInfo((16, 256), np.uint8))
    held, fd = t.native, t.fd
    t.release()
    assert held.fd == fd and os.fstat(fd).st_ino == os.fstat(memfd).st_ino
    with pytest.raises(InvalidTensorError, match="released"):
        _ = t.native  # the released tensor itself refuses, as every tensor does
    held.close()  # explicit close still closes at once
    with pytest.raises(OSError):
        os.fstat(fd)


def test_pool_buffer_held_as_native_still_goes_back_to_its_pool():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    f = pool.acquire()
    held = f[0].native
    f.release()
    assert pool.free_count == 1 and not held.closed  # back in the pool; the pool's fd, still open
    g = pool.acquire(timeout=0)
    assert g[0].native is held
    g.release()
    pool.close()
    assert held.closed  # a pool buffer belongs to its pool: closed with it, held or not
    with pytest.raises(InvalidTensorError, match="closed"):
        _ = held.fd


def test_on_close_runs_once_however_the_fd_closes():
    import gc

    ran: list[str] = []
    gc.disable()
    try:
        t = DMAContext().alloc_tensor(TensorInfo((64,), np.uint8))
        t.native.on_close(lambda: ran.append("dropped"))
        t.release()  # nobody holds the buffer: reference counting closes it, and says so
        assert ran == ["dropped"]
        t = DMAContext().alloc_tensor(TensorInfo((64,), np.uint8))
        b = t.native
        b.on_close(lambda: ran.append("closed"))
        t.release()
        assert ran == ["dropped"]  # held: still open
        b.close()
        del b
        assert ran == ["dropped", "closed"]  # once, not again when the object goes
    finally:
        gc.enable()
