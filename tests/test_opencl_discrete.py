"""OpenCL on a device with its own memory (tier B: a GPU, e.g. NVIDIA's OpenCL): the paths that copy or map
through the driver, which the CPU device never takes."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, CopyRequiredError
from tests.support import requirements
from tests.support.ocl_support import need

pytestmark = pytest.mark.gpu
cl = need("pyopencl", "pyopencl")


@pytest.fixture(scope="module")
def ctx():
    from interop.tensors.opencl import OpenCLContext

    try:
        devs = [d for p in cl.get_platforms() for d in p.get_devices() if not d.type & cl.device_type.CPU]
    except cl.Error as e:
        requirements.unavailable("opencl", f"no OpenCL platform ({e})")  # tier A broken: a failure
    if not devs:
        pytest.skip("needs an OpenCL GPU (tier B): only CPU OpenCL devices here")
    c = OpenCLContext(cl.Context([devs[0]]))
    assert not c.host_shared
    return c


def test_cpu_to_opencl_is_a_counted_copy_with_write_back(ctx):
    from interop.mappers.cpu_to_opencl import CPUToOpenCL

    big = np.arange(20 * 64, dtype=np.float32).reshape(20, 64)
    a = big[2:18, 4:60]  # padded rows: 16 x 56 elements move
    with pytest.raises(CopyRequiredError):
        CPUToOpenCL(output_context=ctx).map(a, AccessMode.READ_WRITE)
    with interop.copy_meter() as m:
        t = CPUToOpenCL(output_context=ctx).map(a, AccessMode.READ_WRITE, allow_copy=True)
        assert m.copies == 1 and m.bytes == a.nbytes and t.context is ctx
        k = cl.Kernel(ctx.build("__kernel void neg(__global float* a){ size_t i = get_global_id(0); a[i] = -a[i]; }"),
                      "neg")
        k(ctx.queue, (a.size,), None, t.native)
        ctx.queue.finish()
        t.release()  # copies back into the padded rows
    assert m.copies == 2 and m.bytes == 2 * a.nbytes
    expect = np.arange(20 * 64, dtype=np.float32).reshape(20, 64)
    expect[2:18, 4:60] *= -1
    np.testing.assert_array_equal(big, expect)


def test_opencl_to_cpu_maps_through_the_driver(ctx):
    host = np.arange(4096, dtype=np.uint8)
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    t = interop.wrap(buf, info=TensorInfo((64, 64), np.uint8), context=ctx)
    with interop.copy_meter() as m:
        with interop.map(t.region(8, 4, 32, 16), MemoryType.CPU, mode=AccessMode.READ_WRITE) as h:
            np.testing.assert_array_equal(h.numpy(), host.reshape(64, 64)[4:20, 8:40])
            h.numpy()[:] = 1
    assert m.copies == 0  # map/unmap: OpenCL's way of reaching device memory, not an interop copy
    back = np.empty(4096, np.uint8)
    cl.enqueue_copy(ctx.queue, back, buf)
    expect = host.reshape(64, 64).copy()
    expect[4:20, 8:40] = 1
    np.testing.assert_array_equal(back.reshape(64, 64), expect)


def test_openvino_cpu_cannot_read_gpu_memory(ctx):
    need("openvino", "OpenVINO")
    t = interop.wrap(cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64), info=TensorInfo((16,), np.float32), context=ctx)
    with pytest.raises(ContextMismatchError):
        interop.map(t, MemoryType.OPENVINO)
