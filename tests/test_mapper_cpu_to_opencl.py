"""CPU -> OPENCL: USE_HOST_PTR over the array on the CPU device (zero-copy); a counted copy where the device has
its own memory (simulated here), with a counted write-back for WRITE mappings."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import CopyRequiredError, InvalidTensorError
from interop.mapper import Cost
from tests.support.ocl_support import need, opencl_context, read_bytes
from tests.support.requirements import need_module

cl = need("pyopencl", "pyopencl")


def test_the_edge_may_copy_and_says_so():
    from interop.mappers.cpu_to_opencl import CPUToOpenCL

    assert not CPUToOpenCL.zero_copy and CPUToOpenCL.may_copy  # its worst case: a device with its own memory
    assert "may copy" in str(CPUToOpenCL()) and "may copy" in repr(CPUToOpenCL())


def test_zero_copy_on_host_memory_device():
    ctx = opencl_context()
    if not ctx.host_shared:
        pytest.skip("zero-copy needs an OpenCL device that works in host memory (the CPU device)")
    a = np.zeros((8, 32), np.float32)
    # routed by what the edge does here: zero-copy on this device, so no allow_copy is needed
    chain = interop.route(a, MemoryType.OPENCL, mode=AccessMode.READ_WRITE)
    assert [m.name for m in chain.mappers] == ["cpu_to_opencl"]
    assert chain.cost(interop.wrap(a), AccessMode.READ_WRITE) is Cost.ZERO_COPY
    with interop.copy_meter() as m:
        t = interop.map(a, MemoryType.OPENCL, mode=AccessMode.READ_WRITE)
    assert m.copies == 0 and m.bytes == 0
    from interop.native.opencl_usm import mem_host_ptr

    assert mem_host_ptr(t.cl_mem) == a.ctypes.data  # the buffer is the array
    k = ctx.build("__kernel void s(__global float* a){ size_t i = get_global_id(0); a[i] = (float)i; }").s
    k(ctx.queue, (a.size,), None, t.native)
    ctx.queue.finish()
    np.testing.assert_array_equal(a.ravel(), np.arange(a.size, dtype=np.float32))  # device write seen by numpy
    a[0, 0] = -1  # host write seen by the device
    assert read_bytes(ctx, t.native, 0, 4).view(np.float32)[0] == -1
    with interop.map(t, MemoryType.CPU) as back:
        assert back.data_ptr == a.ctypes.data


def test_padded_rows_keep_their_pitch():
    ctx = opencl_context()
    if not ctx.host_shared:
        pytest.skip("needs an OpenCL device that works in host memory (the CPU device)")
    big = np.arange(10 * 24, dtype=np.uint8).reshape(10, 24)
    view = big[2:8, 4:20]
    t = interop.map(view, MemoryType.OPENCL, allow_copy=True)
    assert t.info.strides == (24, 1) and t.native.size == t.info.extent
    with interop.map(t, MemoryType.CPU) as c:
        assert c.data_ptr == view.ctypes.data
        np.testing.assert_array_equal(c.numpy(), view)


def test_read_only_array_gives_read_only_buffer():
    ctx = opencl_context()
    a = np.ones(16, np.uint8)
    a.flags.writeable = False
    t = interop.map(a, MemoryType.OPENCL, allow_copy=True)
    assert not t.writable and t.native.flags & cl.mem_flags.READ_ONLY
    with pytest.raises(InvalidTensorError):
        interop.map(a, MemoryType.OPENCL, mode=AccessMode.WRITE, allow_copy=True)
    assert ctx is t.context


def test_counted_copy_where_device_memory_is_separate(monkeypatch):
    ctx = opencl_context()
    from interop.tensors.opencl import OpenCLContext

    monkeypatch.setattr(OpenCLContext, "host_shared", property(lambda self: False))  # a discrete GPU's situation
    big = np.arange(12 * 40, dtype=np.uint8).reshape(12, 40)
    a = big[1:11, 5:35]  # padded rows: only the 10 x 30 elements are copied
    with pytest.raises(CopyRequiredError):
        interop.map(a, MemoryType.OPENCL, mode=AccessMode.READ_WRITE)
    with interop.copy_meter() as m:
        t = interop.map(a, MemoryType.OPENCL, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert m.copies == 1 and m.bytes == 300
        from interop.native.opencl_usm import mem_host_ptr

        assert mem_host_ptr(t.cl_mem) is None and t.info.is_contiguous
        np.testing.assert_array_equal(read_bytes(ctx, t.native, 0, 300).reshape(10, 30), a)
        k = ctx.build("__kernel void z(__global uchar* a){ a[get_global_id(0)] = 9; }").z
        k(ctx.queue, (300,), None, t.native)
        t.release()  # copies back
    assert m.copies == 2 and m.bytes == 600 and [r.mapper for r in m.records] == ["cpu_to_opencl"] * 2
    assert (a == 9).all() and big[0].tolist() == list(range(40))
    ro = np.ones(8, np.uint8)
    ro.flags.writeable = False
    t2 = interop.map(ro, MemoryType.OPENCL, allow_copy=True)
    assert not t2.writable and t2.native.flags & cl.mem_flags.READ_ONLY


@pytest.mark.parametrize("host_shared", [True, False])
def test_column_strided_arrays_are_copied_dense(monkeypatch, host_shared):
    """OpenCL buffers hold contiguous rows: a column-strided array is a counted dense copy on any device (never a
    strided OpenCL tensor no consumer can copy), written back at release for WRITE."""
    ctx = opencl_context()
    from interop.tensors.opencl import OpenCLContext

    if host_shared and not ctx.host_shared:
        pytest.skip("needs an OpenCL device that works in host memory (the CPU device)")
    monkeypatch.setattr(OpenCLContext, "host_shared", property(lambda self: host_shared))
    big = np.arange(8 * 16 * 3, dtype=np.uint8).reshape(8, 16, 3)
    a = big[:, ::2]
    assert interop.route(a, MemoryType.OPENCL, allow_copy=True).cost(interop.wrap(a)) is Cost.COPY
    with pytest.raises(CopyRequiredError):
        interop.map(a, MemoryType.OPENCL)
    with interop.copy_meter() as m:
        t = interop.map(a, MemoryType.OPENCL, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert t.info.is_contiguous and t.info.shape == a.shape and m.copies == 1 and m.bytes == a.nbytes
        np.testing.assert_array_equal(read_bytes(ctx, t.native, 0, a.nbytes).reshape(a.shape), a)
        k = ctx.build("__kernel void seven(__global uchar* a){ a[get_global_id(0)] = 7; }").seven
        k(ctx.queue, (a.nbytes,), None, t.native)
        ctx.queue.finish()
        t.release()  # copies back into the strided array
    assert m.copies == 2 and (a == 7).all() and (big[:, 1::2] != 7).any()
    # the next step gets a buffer it can read: route and map agree on OPENCV_UMAT
    need_module("cv2")
    with interop.copy_meter() as m:
        u = interop.map(a, MemoryType.OPENCV_UMAT, allow_copy=True)
    assert m.copies == 2 and (u.native.get() == 7).all()
