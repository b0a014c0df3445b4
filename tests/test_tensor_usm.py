"""USM tensors (dpctl): the SYCL context shared with OpenCL, host/shared/device allocations, SUAI, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import Context, InteropError, InvalidTensorError, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, UnsupportedTypeError
from tests.support.ocl_support import need, opencl_context, sycl_context
from tests.support.requirements import need_module

dpctl = need("dpctl", "dpctl")
dpm = need_module("dpctl.memory")


@pytest.fixture()
def ctx():
    return sycl_context()


def test_default_sycl_context_is_the_opencl_context(ctx):
    from interop.tensors.usm import SYCLContext

    assert isinstance(ctx, SYCLContext)
    ocl = opencl_context()
    assert ctx.cl_context == ocl.cl_context and ctx.shared_with_opencl
    assert ctx.parent is ocl and ctx.queue.is_in_order


@pytest.mark.parametrize("usm_type", ["host", "shared"])
def test_host_reachable_allocations_are_numpy_views(ctx, usm_type):
    from interop.tensors.usm import allocate

    t = allocate(TensorInfo((8, 16), np.float32), usm_type, ctx)
    assert t.usm_type == usm_type and t.handle("usm_ptr") == t.pointer == t.native._pointer
    v = np.asarray(t)
    assert v.ctypes.data == t.pointer
    v[:] = np.arange(128, dtype=np.float32).reshape(8, 16)
    got = np.frombuffer(t.native.copy_to_host(), np.float32).reshape(8, 16)  # read back through SYCL
    np.testing.assert_array_equal(got, v)


def test_device_allocation_is_not_cpu_reachable(ctx):
    from interop.tensors.usm import allocate

    t = allocate(TensorInfo((16,), np.uint8), "device", ctx)
    with pytest.raises(InteropError):
        np.asarray(t)
    with pytest.raises(InteropError):
        _ = t.data_ptr


def test_sycl_usm_array_interface_round_trips_through_dpctl(ctx):
    from interop.tensors.usm import allocate

    t = allocate(TensorInfo((6, 10), np.float32), "shared", ctx)
    r = t.region(2, 1, 5, 3)
    suai = r.__sycl_usm_array_interface__
    assert suai["data"][0] == t.pointer + 1 * 40 + 2 * 4 == r.pointer
    assert suai["shape"] == (3, 5) and suai["strides"] == (10, 1) and suai["typestr"] == "<f4"
    assert suai["syclobj"] is ctx.queue
    m = dpm.as_usm_memory(t)  # dpctl consumes our interface: the same allocation
    assert m._pointer == t.pointer and m.get_usm_type() == "shared"


def test_wrap_dpctl_memory(ctx):
    mem = dpm.MemoryUSMShared(256, queue=ctx.queue)
    t = interop.wrap(mem, info=TensorInfo((8, 8), np.float32))
    assert t.memory_type is MemoryType.USM and t.native is mem and t.context is ctx
    assert t.pointer == mem._pointer and t.usm_type == "shared"
    raw = interop.wrap(mem)
    assert raw.info.shape == (256,)


def test_bad_input(ctx):
    from interop.tensors.usm import USMTensor

    mem = dpm.MemoryUSMShared(64, queue=ctx.queue)
    with pytest.raises(InvalidTensorError):
        interop.wrap(mem, info=TensorInfo((65,), np.uint8))  # wrong info for a raw allocation
    with pytest.raises(InvalidTensorError):
        USMTensor(mem, TensorInfo((8,), np.uint8), pointer=mem._pointer, usm_type="managed", context=ctx)
    with pytest.raises(InvalidTensorError):
        USMTensor(mem, TensorInfo((8,), np.uint8), pointer=0, usm_type="shared", context=ctx)
    with pytest.raises(ContextMismatchError):
        USMTensor(mem, TensorInfo((8,), np.uint8), pointer=mem._pointer, usm_type="shared",
                  context=Context.default(MemoryType.CPU))
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(mem, context=Context.default(MemoryType.OPENCL))
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(mem, format=interop.FrameFormat.NV12)
    t = interop.wrap(mem)
    t.release()
    with pytest.raises(InvalidTensorError):
        _ = t.pointer
    with pytest.raises(InvalidTensorError):
        _ = t.__sycl_usm_array_interface__


def test_doctor_row(ctx):
    from interop.tensors.usm import _probe

    (row,) = _probe()
    assert row.available and row.details["shared with OpenCL"] is True
    assert row.details["cl_context"] == f"{ctx.cl_context:#x}"
