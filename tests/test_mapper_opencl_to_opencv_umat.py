"""OPENCL -> OPENCV_UMAT: one counted device copy into a new UMat; write-back for READ_WRITE is counted too."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, CopyRequiredError, InvalidTensorError
from tests.support.ocl_support import need, opencl_context, read_bytes, umat_context

cv2 = need("cv2", "OpenCV")
cl = need("pyopencl", "pyopencl")


def _buffer(ctx, host):
    return cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)


def test_counted_copy_with_right_bytes():
    umat_context()
    ctx = opencl_context()
    host = np.random.default_rng(1).integers(0, 255, (12, 20, 3), dtype=np.uint8)
    t = interop.wrap(_buffer(ctx, host), info=TensorInfo.of(host))
    with pytest.raises(CopyRequiredError):
        interop.map(t, MemoryType.OPENCV_UMAT)
    with interop.copy_meter() as m:
        u = interop.map(t, MemoryType.OPENCV_UMAT, allow_copy=True)
    assert m.copies == 1 and m.bytes == host.nbytes and m.records[0].mapper == "opencl_to_opencv_umat"
    assert u.memory_type is MemoryType.OPENCV_UMAT and u.cl_mem != t.cl_mem
    np.testing.assert_array_equal(u.native.get(), host)
    assert (cv2.add(u.native, 1).get() == host + 1).all()  # OpenCV can work on it


def test_region_source_and_write_back():
    umat_context()
    ctx = opencl_context()
    host = np.zeros((16, 24), np.float32)
    buf = _buffer(ctx, host)
    src = interop.wrap(buf, info=TensorInfo.of(host)).region(4, 3, 10, 5)
    with interop.copy_meter() as m:
        u = interop.map(src, MemoryType.OPENCV_UMAT, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert u.info.shape == (5, 10) and m.bytes == 5 * 10 * 4
        cv2.add(u.native, 2.5, dst=u.native)
        u.release()  # copies the UMat back into the region
    assert m.copies == 2 and m.bytes == 2 * 5 * 10 * 4
    whole = read_bytes(ctx, buf, 0, host.nbytes).view(np.float32).reshape(16, 24)
    assert (whole[3:8, 4:14] == 2.5).all() and whole.sum() == 2.5 * 50


def test_bad_input_counts_nothing():
    umat_context()
    ctx = opencl_context()
    from interop.tensors.opencl import OpenCLContext

    other = OpenCLContext(cl.Context(ctx.native.devices))
    foreign = interop.wrap(cl.Buffer(other.native, cl.mem_flags.READ_WRITE, 64), info=TensorInfo((8, 8), np.uint8))
    with interop.copy_meter() as m:
        with pytest.raises(ContextMismatchError):
            interop.map(foreign, MemoryType.OPENCV_UMAT, allow_copy=True)
        flat = interop.wrap(cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64))  # 1-D: no UMat shape
        with pytest.raises(InvalidTensorError):
            interop.map(flat, MemoryType.OPENCV_UMAT, allow_copy=True)
    assert m.copies == 0
