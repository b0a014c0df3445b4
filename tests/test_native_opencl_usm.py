"""ctypes bindings for the Intel USM extension and CL_MEM_HOST_PTR."""

from __future__ import annotations

import numpy as np
import pytest

from interop.native.opencl_usm import OpenCLCallError, mem_host_ptr, usm_functions
from tests.support import requirements
from tests.support.ocl_support import need, opencl_context, read_bytes

cl = need("pyopencl", "pyopencl")


@pytest.fixture()
def ctx():
    c = opencl_context()
    if "cl_intel_unified_shared_memory" not in c.device.extensions:
        # the USM backend (tier A) runs on Intel's CPU runtime, which has the extension
        requirements.unavailable("usm", f"the OpenCL device {c.device.name!r} lacks cl_intel_unified_shared_memory")
    return c


def test_alloc_info_free(ctx):
    usm = usm_functions(ctx.device.platform.int_ptr)
    assert usm_functions(ctx.device.platform.int_ptr) is usm
    for kind, alloc in (("shared", lambda n: usm.shared_alloc(ctx.cl_context, ctx.device.int_ptr, n)),
                        ("device", lambda n: usm.device_alloc(ctx.cl_context, ctx.device.int_ptr, n)),
                        ("host", lambda n: usm.host_alloc(ctx.cl_context, n))):
        p = alloc(4096)
        try:
            assert usm.alloc_type(ctx.cl_context, p) == kind
            assert usm.alloc_type(ctx.cl_context, p + 100) == kind  # interior pointers are known too
            assert usm.alloc_base(ctx.cl_context, p + 100) == p and usm.alloc_size(ctx.cl_context, p) == 4096
        finally:
            usm.free(ctx.cl_context, p)


def test_kernel_takes_a_usm_pointer_and_memcpy(ctx):
    usm = usm_functions(ctx.device.platform.int_ptr)
    n = 256
    p = usm.shared_alloc(ctx.cl_context, ctx.device.int_ptr, n * 4)
    try:
        k = ctx.build("__kernel void iota(__global float* a){ size_t i = get_global_id(0); a[i] = (float)i; }").iota
        usm.set_kernel_arg(k.int_ptr, 0, p)
        cl.enqueue_nd_range_kernel(ctx.queue, k, (n,), None)
        ctx.queue.finish()
        host = np.zeros(n, np.float32)
        usm.memcpy(ctx.queue.int_ptr, host.ctypes.data, p, n * 4)
        np.testing.assert_array_equal(host, np.arange(n, dtype=np.float32))
    finally:
        usm.free(ctx.cl_context, p)


def test_errors_are_typed(ctx):
    usm = usm_functions(ctx.device.platform.int_ptr)
    with pytest.raises(OpenCLCallError):
        usm.shared_alloc(ctx.cl_context, ctx.device.int_ptr, 1 << 62)  # far beyond any device


def test_mem_host_ptr(ctx):
    a = np.zeros(64, np.uint8)
    b = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=a)
    assert mem_host_ptr(b.int_ptr) == a.ctypes.data
    plain = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64)
    assert mem_host_ptr(plain.int_ptr) is None
    assert read_bytes(ctx, b, 0, 4).tolist() == [0, 0, 0, 0]
