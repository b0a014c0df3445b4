"""OPENCL -> USM: zero-copy when the cl_mem lies over a USM allocation; otherwise a counted copy."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, CopyRequiredError
from tests.support.ocl_support import fill_bytes, need, opencl_context, read_bytes, sycl_context

need("dpctl", "dpctl")
cl = need("pyopencl", "pyopencl")


def test_buffer_over_usm_maps_back_without_copy():
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    t = allocate(TensorInfo((8, 8), np.uint8), "shared", ctx)
    o = interop.map(t.region(2, 1, 4, 3), MemoryType.OPENCL)
    with interop.copy_meter() as m:
        u = interop.map(o, MemoryType.USM, allow_copy=True)
    assert m.copies == 0
    assert u.pointer == t.pointer + 8 + 2 and u.usm_type == "shared" and u.base_pointer == t.pointer
    np.asarray(t)[:] = 0
    fill_bytes(opencl_context(), o.native, 0, 64, 5)  # write through OpenCL ...
    assert (np.asarray(u) == 5).all()  # ... read through the USM tensor


def test_plain_buffer_is_a_counted_copy_with_write_back():
    ctx = sycl_context()
    ocl = opencl_context()
    buf = cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, 12 * 16)
    fill_bytes(ocl, buf, 0, 12 * 16, 1)
    src = interop.wrap(buf, info=TensorInfo((12, 16), np.uint8)).region(3, 2, 10, 5)
    with pytest.raises(CopyRequiredError):
        interop.map(src, MemoryType.USM)
    with interop.copy_meter() as m:
        u = interop.map(src, MemoryType.USM, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert m.copies == 1 and m.bytes == 50 and u.context is ctx and u.info.shape == (5, 10)
        assert (np.asarray(u) == 1).all()
        u.native.memset(9)
        u.release()
    assert m.copies == 2 and m.bytes == 100
    whole = read_bytes(ocl, buf, 0, 12 * 16).reshape(12, 16)
    assert (whole[2:7, 3:13] == 9).all() and whole.sum() == 9 * 50 + (192 - 50)


def test_output_context_must_be_sycl():
    from interop.mappers.opencl_to_usm import OpenCLToUSM

    sycl_context()
    ocl = opencl_context()
    t = interop.wrap(cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, 16))
    with pytest.raises(ContextMismatchError):
        OpenCLToUSM(output_context=ocl).map(t, allow_copy=True)
