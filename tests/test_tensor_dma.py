"""DMA tensors and frames: fd ownership, handles, allocation, pools, bad input."""

from __future__ import annotations

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
