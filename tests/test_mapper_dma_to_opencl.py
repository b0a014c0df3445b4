"""DMA -> OPENCL (CPU device): a USE_HOST_PTR buffer over the whole mapping; planes are offsets in it. Zero-copy."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType, copy_meter
from interop.tensors.dma import FramePool
from tests.support.requirements import need_module

cl = need_module("pyopencl")


def _ctx():
    from interop.tensors.opencl import OpenCLContext

    try:
        ctx = interop.Context.default(MemoryType.OPENCL)
    except interop.BackendUnavailableError as e:
        pytest.skip(f"no OpenCL device: {e}")
    assert isinstance(ctx, OpenCLContext)
    if not ctx.host_shared:
        pytest.skip("needs an OpenCL device that works in host memory (the CPU device)")
    return ctx


def test_kernel_writes_land_in_the_dma_buffer_and_pointers_match():
    ctx = _ctx()
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    f = pool.acquire()
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[1])[:] = 5
    # The edge may copy on other devices; routed by what it does here (the CPU device), it needs no allow_copy
    assert [m.name for m in interop.route(f, MemoryType.OPENCL, mode=AccessMode.READ_WRITE).mappers] == ["dma_to_opencl"]
    with copy_meter() as cm:
        o = interop.map(f, MemoryType.OPENCL, mode=AccessMode.READ_WRITE)
    assert cm.copies == 0
    assert o[0].cl_mem == o[1].cl_mem and o[1].offset == f[1].offset  # one buffer, planes by offset
    m = f[0].buffer.mapping(True)
    host = o[0].buffer.get_host_array((m.length,), np.uint8)
    assert host.ctypes.data == m.address  # the cl_mem's host pointer is our mmap
    prg = cl.Program(ctx.native, "__kernel void inc(__global uchar* p, uint off){ p[off + get_global_id(0)] += 1; }").build()
    prg.inc(ctx.queue, (64,), None, o[1].buffer, np.uint32(o[1].offset))
    ctx.queue.finish()
    o.release()
    with interop.map(f, MemoryType.CPU) as c:
        uv = np.asarray(c[1]).reshape(-1)
        assert np.all(uv[:64] == 6) and np.all(uv[64:] == 5)
    f.release()
    del o, host, c, uv  # the cl_mem over the mapping and the host views read the buffer while they exist
    gc.collect()
    assert pool.free_count == 1


def test_counted_copy_on_a_device_without_host_memory_or_dmabuf_import(monkeypatch):
    from interop.errors import CopyRequiredError
    from interop.mappers.dma_to_opencl import DMAToOpenCL
    from interop.tensors.opencl import OpenCLContext

    ctx = _ctx()
    monkeypatch.setattr(OpenCLContext, "host_shared", property(lambda self: False))  # a discrete GPU's situation
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    f = pool.acquire()
    size = f[0].buffer.size
    assert f[1].buffer is f[0].buffer  # both planes in one dma-buf: one buffer, so one copy per frame
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[:] = np.arange(48 * 64, dtype=np.uint8).reshape(48, 64)
        np.asarray(c[1])[:] = 200
    with copy_meter() as cm:
        with pytest.raises(CopyRequiredError, match=f"would copy {size} bytes.*allow_copy=True") as ei:
            DMAToOpenCL().map(f, AccessMode.READ)  # CopyRequiredError has no subclass: the exact class
        assert ei.value.step is DMAToOpenCL
        assert cm.copies == 0
        o = interop.map(f, MemoryType.OPENCL, allow_copy=True)
        assert cm.copies == 1 and cm.bytes == size and [r.mapper for r in cm.records] == ["dma_to_opencl"]
    assert o[0].cl_mem == o[1].cl_mem and o[1].offset == f[1].offset
    got = np.empty(size, np.uint8)
    cl.enqueue_copy(ctx.queue, got, o[0].buffer)
    ctx.queue.finish()
    y, uv = (np.ndarray(t.info.shape, t.info.dtype, buffer=got, offset=t.offset, strides=t.info.strides) for t in o)
    np.testing.assert_array_equal(y, np.arange(48 * 64, dtype=np.uint8).reshape(48, 64))
    assert (uv == 200).all()
    o.release()
    f.release()
    del o, c, ei
    gc.collect()
    assert pool.free_count == 1
