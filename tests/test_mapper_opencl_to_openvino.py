"""OPENCL -> OPENVINO (CPU device): the mapped buffer shared with OpenVINO, zero-copy; padded rows at full pitch."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import CopyRequiredError, InvalidTensorError, WrongMemoryError
from interop.mapper import Cost
from tests.support.ocl_support import need, opencl_context, read_bytes

cl = need("pyopencl", "pyopencl")
need("openvino", "OpenVINO")


def _ctx():
    ctx = opencl_context()
    if not ctx.host_shared:
        pytest.skip("OpenVINO CPU shares host memory: needs an OpenCL device that works in host memory")
    return ctx


def test_shared_with_openvino_and_inference_reads_it():
    import openvino as ov
    import openvino.opset13 as ops

    ctx = _ctx()
    host = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)
    t = interop.wrap(buf, info=TensorInfo.of(host))
    with interop.copy_meter() as m:
        o = interop.map(t, MemoryType.OPENVINO)
    assert m.copies == 0
    assert o.native.data.ctypes.data == host.ctypes.data  # OpenVINO reads the buffer's storage
    assert not o.writable and not np.asarray(o).flags.writeable  # READ: the user's view stays read-only
    p = ops.parameter([2, 3, 4], ov.Type.f32)
    model = ov.Model([ops.multiply(p, ops.constant(np.float32(2)))], [p])
    req = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    out = req.infer({0: o.native})
    np.testing.assert_array_equal(next(iter(out.values())), host * 2)
    o.release()


def test_write_through_openvino_tensor_reaches_opencl():
    ctx = _ctx()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64)
    t = interop.wrap(buf, info=TensorInfo((16,), np.float32))
    o = interop.map(t, MemoryType.OPENVINO, mode=AccessMode.READ_WRITE)
    o.native.data[:] = 4.0
    o.release()  # unmaps
    assert (read_bytes(ctx, buf, 0, 64).view(np.float32) == 4.0).all()


def test_padded_rows_are_shared_at_full_pitch():
    ctx = _ctx()
    host = np.arange(10 * 32, dtype=np.uint8).reshape(10, 32)
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)
    plane = interop.wrap(buf, info=TensorInfo((10, 32), np.uint8)).region(0, 0, 30, 10)  # 30 wide, pitch 32
    o = interop.map(plane, MemoryType.OPENVINO)
    assert o.info.shape == (1, 10, 32, 1) and o.native.data.ctypes.data == host.ctypes.data
    short = interop.wrap(buf, info=TensorInfo((10, 32), np.uint8)).region(2, 0, 30, 10)  # last row's padding missing
    from interop.mappers.opencl_to_openvino import OpenCLToOpenVINO

    with pytest.raises(WrongMemoryError, match="padding"):  # refused by its cost: routing goes another way
        OpenCLToOpenVINO().cost(short)
    with pytest.raises(WrongMemoryError):
        OpenCLToOpenVINO().map(short)
    chain = interop.route(short, MemoryType.OPENVINO, allow_copy=True)
    assert [m.name for m in chain.mappers] != ["opencl_to_openvino"] and chain.cost(short) is Cost.COPY
    with pytest.raises(CopyRequiredError):
        interop.map(short, MemoryType.OPENVINO)
    with interop.copy_meter() as m:
        o2 = interop.map(short, MemoryType.OPENVINO, allow_copy=True)
    assert m.copies >= 1
    np.testing.assert_array_equal(np.asarray(o2).reshape(10, 30), host[:, 2:32])


def test_gpu_remote_path_fails_typed_without_a_gpu():
    """The Intel GPU branch (OCL_BUFFER remote tensor) raises a typed error where it cannot run (interop.map then
    tries another route)."""
    from interop.errors import BackendUnavailableError
    from interop.mappers.opencl_to_openvino import OpenCLToOpenVINO
    from interop.tensors.openvino import OpenVINOContext

    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64)
    t = interop.wrap(buf, info=TensorInfo((16,), np.float32))
    gpu = OpenCLToOpenVINO(output_context=OpenVINOContext("GPU"))
    with pytest.raises(BackendUnavailableError):
        gpu.map(t)
    with pytest.raises(InvalidTensorError):  # a remote tensor starts at the cl_mem's origin
        gpu.map(t._view(4, TensorInfo((15,), np.float32)))


@pytest.mark.hardware("level_zero")
def test_intel_gpu_remote_tensor_over_cl_mem():
    """Tier C: an OpenVINO GPU context on the shared cl_context and an OCL_BUFFER remote tensor."""
    import openvino as ov

    ctx = opencl_context()
    if "GPU" not in ov.Core().available_devices or "Intel" not in ctx.device.vendor:
        pytest.skip("needs an Intel GPU as the shared OpenCL device and as an OpenVINO device (tier C)")
    from interop.tensors.openvino import OpenVINOContext

    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64)
    o = interop.map(interop.wrap(buf, info=TensorInfo((16,), np.float32)), OpenVINOContext("GPU"))
    assert o.is_remote
