"""USM -> OPENCL on the shared context: the buffer lies over the USM allocation; kernels take the USM pointer."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import MemoryType, TensorInfo
from interop.errors import ContextMismatchError, InvalidTensorError
from tests.support.ocl_support import need, opencl_context, sycl_context

need("dpctl", "dpctl")
cl = need("pyopencl", "pyopencl")


@pytest.mark.parametrize("usm_type", ["shared", "host", "device"])
def test_same_allocation_and_kernel_writes(usm_type):
    from interop.native.opencl_usm import mem_host_ptr
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    ocl = opencl_context()
    if not ocl.host_shared and usm_type == "device":
        pytest.skip("a buffer over device USM needs a device that works in host memory (the CPU device)")
    t = allocate(TensorInfo((8, 32), np.float32), usm_type, ctx)
    with interop.copy_meter() as m:
        o = interop.map(t, MemoryType.OPENCL)
    assert m.copies == 0
    assert o.usm_pointer == t.pointer and mem_host_ptr(o.cl_mem) == t.pointer  # the cl_mem is the USM allocation
    k = cl.Kernel(ocl.build("__kernel void iota(__global float* a, float b){ size_t i = get_global_id(0); a[i] = b + i; }"),
                  "iota")
    o.set_kernel_arg(k, 0)  # the USM pointer, through clSetKernelArgMemPointerINTEL
    k.set_arg(1, np.float32(100))
    cl.enqueue_nd_range_kernel(ocl.queue, k, (256,), None)
    ocl.queue.finish()
    got = np.empty(256, np.float32)
    ctx.queue.memcpy(got, t.native, 1024)  # read through SYCL
    np.testing.assert_array_equal(got, 100 + np.arange(256, dtype=np.float32))


def test_region_keeps_whole_allocation_and_usm_offset():
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    ocl = opencl_context()
    t = allocate(TensorInfo((10, 16), np.uint8), "shared", ctx)
    np.asarray(t)[:] = 0
    r = t.region(4, 3, 8, 2)
    o = interop.map(r, MemoryType.OPENCL)
    assert o.offset == 3 * 16 + 4 and o.native.size == t.native.nbytes and o.usm_pointer == r.pointer
    k = ocl.build("__kernel void one(__global uchar* a){ a[get_global_id(0)] = 1; }").one
    o.set_kernel_arg(k, 0)  # the region's own USM address: no offset argument needed
    cl.enqueue_nd_range_kernel(ocl.queue, k, (8,), None)
    ocl.queue.finish()
    v = np.asarray(t)
    assert (v[3, 4:12] == 1).all() and v.sum() == 8


def test_bad_input():
    from interop.mappers.usm_to_opencl import USMToOpenCL
    from interop.tensors.opencl import OpenCLContext
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    ocl = opencl_context()
    t = allocate(TensorInfo((4,), np.uint8), "shared", ctx)
    other = OpenCLContext(cl.Context(ocl.native.devices))
    with pytest.raises(InvalidTensorError):
        USMToOpenCL().map(interop.wrap(np.zeros(2)))
    with pytest.raises(ContextMismatchError):
        USMToOpenCL(output_context=interop.Context.default(MemoryType.CPU)).map(t)
    dev = allocate(TensorInfo((4,), np.uint8), "device", ctx)
    with pytest.raises(ContextMismatchError):  # device USM of one context is meaningless in another
        USMToOpenCL(output_context=other).map(dev, allow_copy=True)
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.OPENCL)


def test_foreign_context_copies_counted_and_exact():
    from interop.errors import CopyRequiredError
    from interop.mappers.usm_to_opencl import USMToOpenCL
    from interop.tensors.opencl import OpenCLContext
    from interop.tensors.usm import allocate
    from tests.support.ocl_support import read_bytes

    ctx = sycl_context()
    ocl = opencl_context()
    other = OpenCLContext(cl.Context(ocl.native.devices))  # not the SYCL context's cl_context: a copy
    t = allocate(TensorInfo((10, 16), np.uint8), "shared", ctx)
    np.asarray(t)[:] = np.arange(160, dtype=np.uint8).reshape(10, 16)
    r = t.region(4, 3, 8, 2)  # 2 rows of 8 in rows of 16: only the 16 region bytes are copied
    with interop.copy_meter() as m:
        with pytest.raises(CopyRequiredError, match="would copy 16 bytes.*allow_copy=True") as ei:
            USMToOpenCL(output_context=other).map(r)  # CopyRequiredError has no subclass: the exact class
        assert ei.value.step is USMToOpenCL and m.copies == 0
        o = USMToOpenCL(output_context=other).map(r, allow_copy=True)
        assert m.copies == 1 and m.bytes == 16 and [c.mapper for c in m.records] == ["usm_to_opencl"]
        w = USMToOpenCL(output_context=other).map(t, allow_copy=True)
        assert m.copies == 2 and m.bytes == 16 + 160
    assert o.context is other and o.info.is_contiguous and o.usm_pointer is None
    np.testing.assert_array_equal(read_bytes(other, o.native, o.offset, 16).reshape(2, 8),
                                  np.asarray(t)[3:5, 4:12])
    np.testing.assert_array_equal(read_bytes(other, w.native, w.offset, 160), np.arange(160, dtype=np.uint8))
    o.release()
    w.release()
    t.release()
