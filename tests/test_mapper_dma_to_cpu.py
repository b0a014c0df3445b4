"""DMA -> CPU: mmap zero-copy (pointer == mapping address + offset), write-through, READ is read-only, sync."""

from __future__ import annotations

import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, InvalidTensorError, MemoryType, TensorInfo
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, DMATensor, FramePool


def test_frame_planes_are_views_of_the_mapping_and_writes_go_through():
    pool = FramePool(FrameFormat.NV12, 854, 480, 1)
    f = pool.acquire()
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        m = f[0].buffer.mapping(True)
        for t, src in zip(c, f):
            arr = np.asarray(t)
            assert arr.ctypes.data == m.address + src.offset == t.data_ptr
            assert arr.strides[0] == src.pitch == 896 and arr.flags.writeable
        np.asarray(c[0])[10, 20] = 201
        np.asarray(c[1])[5, 6, 1] = 202
    # through the fd itself (another path to the same pages), and through a new READ mapping
    assert os.pread(f[0].fd, 1, 10 * 896 + 20) == bytes([201])
    assert os.pread(f[1].fd, 1, f[1].offset + 5 * 896 + 6 * 2 + 1) == bytes([202])
    with interop.map(f, MemoryType.CPU) as r:
        assert np.asarray(r[0])[10, 20] == 201 and np.asarray(r[1])[5, 6, 1] == 202
    os.pwrite(f[0].fd, bytes([77]), 0)  # and the other way: a write to the file is seen by a mapping
    with interop.map(f, MemoryType.CPU) as r:
        assert np.asarray(r[0])[0, 0] == 77
    f.release()


def test_read_mapping_is_read_only_and_write_mapping_is_not():
    t = DMAContext().alloc_tensor(TensorInfo((8, 8), np.uint8))
    r = interop.map(t, MemoryType.CPU)
    a = np.asarray(r)
    assert not a.flags.writeable and not r.writable
    with pytest.raises(ValueError):
        a[0, 0] = 1
    assert not r.parent.buffer.mapping(False).writable  # PROT_READ, not just a flag
    w = interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE)
    np.asarray(w)[:] = 4
    assert a[7, 7] == 4  # different mappings, same pages
    r.release()
    w.release()
    t.release()


def test_views_outlive_the_mapping_tensor_and_the_fd():
    t = DMAContext().alloc_tensor(TensorInfo((4, 4), np.uint8))
    c = interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE)
    view = c.numpy()
    view[:] = 9
    c.release()
    t.release()  # fd closed; the mapping lives while the view does
    assert int(view.sum()) == 9 * 16


def test_sync_on_a_memfd_is_enotty_nothing_to_sync():
    t = DMAContext().alloc_tensor(TensorInfo((4, 4), np.uint8))
    if t.is_dmabuf:
        pytest.skip("the allocator here makes real dma-bufs; see the dma_heap hardware test")
    with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE):
        pass
    assert t.buffer.syncable is False  # tried once, answered ENOTTY, not tried again
    t.release()


def test_sync_brackets_the_access(monkeypatch):
    calls = []
    monkeypatch.setattr(nd, "dma_buf_sync", lambda fd, start, write, read=True: calls.append((start, write)) or True)
    t = DMAContext().alloc_tensor(TensorInfo((4, 4), np.uint8))
    c = interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE)
    assert calls == [(True, True)]
    c.release()
    assert calls == [(True, True), (False, True)]
    with interop.map(t, MemoryType.CPU):
        assert calls[-1] == (True, False)
    assert calls[-1] == (False, False)
    t.release()


def test_tiled_modifier_is_refused():
    fd = nd.memfd_alloc(4096)
    t = DMATensor.from_fd(fd, info=TensorInfo((64, 64), np.uint8), drm_modifier=(1 << 56) | 2)
    with pytest.raises(InvalidTensorError, match="tiled layout.*DRM_FORMAT_MOD_LINEAR"):
        interop.map(t, MemoryType.CPU)
    t.release()
    os.close(fd)


def test_read_only_fd_cannot_be_mapped_for_write():
    fd = nd.memfd_alloc(4096)
    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    t = DMATensor.from_fd(ro, info=TensorInfo((4096,), np.uint8))
    assert not t.writable
    with pytest.raises(InvalidTensorError, match="read-only.*AccessMode.READ"):
        interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE)
    with interop.map(t, MemoryType.CPU) as c:
        assert np.asarray(c).size == 4096
    t.release()
    os.close(ro)
    os.close(fd)
