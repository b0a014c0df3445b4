"""OPENCL -> CPU: map/unmap; the mapped pointer is the buffer's storage on the CPU device; READ is read-only;
WRITE mappings are seen by OpenCL after release."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import InvalidTensorError
from tests.support.ocl_support import fill_bytes, need, opencl_context, read_bytes

cl = need("pyopencl", "pyopencl")


def _host_device():
    ctx = opencl_context()
    if not ctx.host_shared:
        pytest.skip("pointer identity needs an OpenCL device that works in host memory (the CPU device)")
    return ctx


def test_map_is_the_buffer_storage():
    ctx = _host_device()
    host = np.zeros((16, 32), np.float32)
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)
    t = interop.wrap(buf, info=TensorInfo.of(host))
    with interop.copy_meter() as m:
        with interop.map(t, MemoryType.CPU) as c:
            assert c.data_ptr == host.ctypes.data  # zero-copy: the map returns the storage itself
    assert m.copies == 0


def test_plain_buffer_map_is_stable_and_read_only_for_read():
    ctx = _host_device()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 4096)
    fill_bytes(ctx, buf, 0, 4096, 5)
    t = interop.wrap(buf, info=TensorInfo((64, 64), np.uint8))
    with interop.map(t, MemoryType.CPU) as a:
        p1 = a.data_ptr
        v = a.numpy()
        assert (v == 5).all() and not v.flags.writeable
        with pytest.raises(ValueError):
            v[0, 0] = 1
    with interop.map(t, MemoryType.CPU) as b:
        assert b.data_ptr == p1


def test_write_visible_after_release():
    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 1024)
    fill_bytes(ctx, buf, 0, 1024, 0)
    t = interop.wrap(buf, info=TensorInfo((32, 32), np.uint8))
    h = interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE)
    h.numpy()[3] = 42
    h.release()  # unmap
    got = read_bytes(ctx, buf, 0, 1024).reshape(32, 32)
    assert (got[3] == 42).all() and got.sum() == 42 * 32
    k = ctx.build("__kernel void inc(__global uchar* a){ a[get_global_id(0)] += 1; }").inc
    k(ctx.queue, (1024,), None, buf)
    with interop.map(t, MemoryType.CPU) as again:  # kernel writes seen by the next map
        assert again.numpy()[3, 0] == 43 and again.numpy()[0, 0] == 1


def test_region_maps_only_its_rows():
    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 10 * 16)
    host = np.arange(160, dtype=np.uint8).reshape(10, 16)
    cl.enqueue_copy(ctx.queue, buf, host)
    t = interop.wrap(buf, info=TensorInfo((10, 16), np.uint8)).region(3, 2, 5, 4)
    with interop.map(t, MemoryType.CPU) as c:
        np.testing.assert_array_equal(c.numpy(), host[2:6, 3:8])


def test_bad_input():
    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 16)
    from interop.mappers.opencl_to_cpu import OpenCLToCPU
    from interop.tensors.opencl import OpenCLTensor

    ro = OpenCLTensor(buf, TensorInfo((16,), np.uint8), writable=False)
    with pytest.raises(InvalidTensorError):
        interop.map(ro, MemoryType.CPU, mode=AccessMode.WRITE)
    with pytest.raises(InvalidTensorError):
        OpenCLToCPU().map(interop.wrap(np.zeros(3)))
    t = interop.wrap(buf)
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)


# ---- views outlive release(): the OpenCL map is undone only when the last view is gone ---------------------


def _ocl_tensor(n: int, value: int):
    """A (n, n) uint8 OpenCL tensor filled with ``value``, its context and buffer; the mapping count before."""
    from interop.tensors.opencl import mapped_count

    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, n * n)
    fill_bytes(ctx, buf, 0, n * n, value)
    gc.collect()
    return interop.wrap(buf, info=TensorInfo((n, n), np.uint8)), ctx, buf, mapped_count()


def test_opencl_view_outlives_release_and_unmaps_last():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(32, 7)
    c = interop.map(t, MemoryType.CPU)
    v = c.numpy()
    a = np.asarray(c)
    assert mapped_count() == before + 1
    c.release()
    with pytest.raises(InvalidTensorError):
        c.numpy()
    assert mapped_count() == before + 1  # still mapped: views exist
    assert (v == 7).all() and (a == 7).all()
    del v
    assert mapped_count() == before + 1
    del a
    assert mapped_count() == before  # the last view gone: unmapped


def test_opencl_release_without_views_unmaps_and_writes_back():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(16, 0)
    with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        c.numpy()[2] = 9
        assert mapped_count() == before + 1
    assert mapped_count() == before
    got = read_bytes(ctx, buf, 0, 256).reshape(16, 16)
    assert (got[2] == 9).all() and got.sum() == 9 * 16


def test_opencl_write_view_kept_past_release_writes_back_when_gone():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(16, 0)
    c = interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE)
    v = c.numpy()
    c.release()
    v[1] = 3
    del v
    assert mapped_count() == before
    assert (read_bytes(ctx, buf, 0, 256).reshape(16, 16)[1] == 3).all()
