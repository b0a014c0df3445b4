"""CPU -> DMA: zero-copy for mappings of our own DMA buffers; otherwise a counted copy (refused unless allowed)."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, CopyRequiredError, FrameFormat, MemoryType, TensorInfo, copy_meter
from interop.mappers.cpu_to_dma import CPUToDMA
from interop.tensors.dma import DMAContext, FramePool


def test_memory_of_our_buffers_goes_back_zero_copy():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    f = pool.acquire()
    c = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE)
    with copy_meter() as cm:
        d = interop.map(c, MemoryType.DMA, allow_copy=True)  # the edge may copy; this input does not
        d0 = CPUToDMA().map(c[0])  # the mapper itself needs no permission when it does not copy
    assert cm.copies == 0 and cm.bytes == 0
    for src, out in zip(f, d):
        assert out.buffer is src.buffer and out.offset == src.offset and out.info == src.info
    assert d0.fd == f[0].fd and d0.offset == 0
    np.asarray(c[0])[1, 2] = 123  # write-through: the DMA tensor's memory is the mapping
    with interop.map(d[0], MemoryType.CPU) as r:
        assert np.asarray(r)[1, 2] == 123
    region = interop.wrap(np.asarray(c[0])[4:8, 8:16])
    dr = CPUToDMA().map(region)
    assert dr.offset == 4 * 64 + 8 and dr.pitch == 64
    for x in (dr, d0, d, c, f):
        x.release()


def test_plain_numpy_memory_is_copied_counted_and_refused_without_allow_copy():
    a = np.arange(48 * 64, dtype=np.uint8).reshape(48, 64)[:, :50]  # padded rows
    with pytest.raises(CopyRequiredError):
        interop.map(a, MemoryType.DMA)
    with pytest.raises(CopyRequiredError, match="not a mapping of a DMA buffer"):
        CPUToDMA().map(interop.wrap(a))
    with copy_meter() as cm:
        d = interop.map(a, MemoryType.DMA, allow_copy=True)
    assert cm.copies == 1 and cm.bytes == 48 * 50 and cm.records[0].mapper == "cpu_to_dma"
    assert d.info.shape == (48, 50) and d.pitch == 50
    with interop.map(d, MemoryType.CPU) as r:
        assert np.array_equal(np.asarray(r), a)
    d.release()


def test_copy_path_writes_back_at_release_and_counts_it():
    a = np.zeros((16, 16), np.uint16)
    with copy_meter() as cm:
        d = interop.map(a, MemoryType.DMA, mode=AccessMode.READ_WRITE, allow_copy=True)
        with interop.map(d, MemoryType.CPU, mode=AccessMode.WRITE) as w:
            np.asarray(w)[:] = 513
        assert a[0, 0] == 0
        d.release()
    assert a[15, 15] == 513
    assert cm.copies == 2 and cm.bytes == 2 * a.nbytes


def test_dma_context_allocations_round_trip():
    t = DMAContext().alloc_tensor(TensorInfo((3, 5), np.float32))
    with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c)[:] = 1.5
        with copy_meter() as cm:
            back = interop.map(c, MemoryType.DMA, allow_copy=True)
        assert cm.copies == 0 and back.buffer is t.buffer
        back.release()
    t.release()
