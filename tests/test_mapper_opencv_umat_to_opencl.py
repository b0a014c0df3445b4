"""OPENCV_UMAT -> OPENCL: the UMat's own cl_mem (zero-copy), ROI offset honoured, writes seen both ways."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import ContextMismatchError, InvalidTensorError
from tests.support.ocl_support import fill_bytes, need, opencl_context, read_bytes, umat_context

cv2 = need("cv2", "OpenCV")
cl = need("pyopencl", "pyopencl")


def test_same_cl_mem_and_writes_both_ways():
    umat_context()
    ctx = opencl_context()
    u = cv2.UMat(30, 40, cv2.CV_8UC1, 3)
    with interop.copy_meter() as m:
        o = interop.map(u, MemoryType.OPENCL, mode=AccessMode.READ_WRITE)
    assert m.copies == 0
    assert o.cl_mem == int(u.handle(cv2.ACCESS_READ)) and o.offset == 0 and o.context is ctx
    fill_bytes(ctx, o.native, 0, 30 * 40, 77)  # write through OpenCL ...
    assert (u.get() == 77).all()  # ... read through OpenCV
    cv2.add(u, 1, dst=u)  # write through OpenCV ...
    assert (read_bytes(ctx, o.native, 0, 30 * 40) == 78).all()  # ... read through OpenCL


def test_roi_offset_is_honoured():
    umat_context()
    opencl_context()
    u = cv2.UMat(20, 32, cv2.CV_8UC3, (0, 0, 0))
    roi = cv2.UMat(u, (4, 10), (8, 20))
    o = interop.map(roi, MemoryType.OPENCL, mode=AccessMode.WRITE)
    assert o.cl_mem == int(u.handle(cv2.ACCESS_READ)) and o.offset == roi.offset == 4 * 96 + 8 * 3
    assert o.info.shape == (6, 12, 3) and o.info.strides == (96, 3, 1)
    with interop.map(o, MemoryType.CPU, mode=AccessMode.WRITE) as h:
        h.numpy()[:] = 200
    whole = u.get()
    assert (whole[4:10, 8:20] == 200).all() and whole.sum() == 200 * 6 * 12 * 3


def test_frame_of_umats():
    umat_context()
    u = cv2.UMat(6, 8, cv2.CV_8UC3, (1, 2, 3))
    f = interop.map(interop.wrap(u, format=interop.FrameFormat.BGR), MemoryType.OPENCL)
    assert f.memory_type is MemoryType.OPENCL and f.format is interop.FrameFormat.BGR
    assert f[0].cl_mem == int(u.handle(cv2.ACCESS_READ))


def test_foreign_output_context_is_refused():
    umat_context()
    ctx = opencl_context()
    from interop.mappers.opencv_umat_to_opencl import OpenCVUMatToOpenCL
    from interop.tensors.opencl import OpenCLContext

    other = OpenCLContext(cl.Context(ctx.native.devices))
    t = interop.wrap(cv2.UMat(2, 2, cv2.CV_8UC1, 0))
    with pytest.raises(ContextMismatchError):
        OpenCVUMatToOpenCL(output_context=other).map(t)
    with pytest.raises(InvalidTensorError):
        OpenCVUMatToOpenCL().map(interop.wrap(np.zeros(4)))  # not a UMat
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.OPENCL)
