"""OpenCV tensors: cv2.Mat is OPENCV (numpy stays CPU), UMat layout discovery, ROI offsets, the UMat context."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import Context, InvalidTensorError, MemoryType, TensorInfo
from interop.errors import UnsupportedTypeError
from tests.support.ocl_support import need, umat_context

cv2 = need("cv2", "OpenCV")


def test_mat_is_opencv_and_ndarray_stays_cpu():
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert interop.wrap(a).memory_type is MemoryType.CPU
    t = interop.wrap(cv2.Mat(a))
    assert t.memory_type is MemoryType.OPENCV
    assert t.data_ptr == a.ctypes.data  # cv2.Mat over the same memory
    v = np.asarray(t)
    v[0, 0] = 99
    assert a[0, 0] == 99


def test_mat_region_and_format():
    a = np.zeros((6, 8, 3), np.uint8)
    t = interop.wrap(cv2.Mat(a))
    r = t.region(2, 1, 3, 2)
    assert r.memory_type is MemoryType.OPENCV and r.data_ptr == a[1:, 2:].ctypes.data
    f = interop.wrap(cv2.Mat(a), format=interop.FrameFormat.BGR)
    assert f.memory_type is MemoryType.OPENCV and f[0].data_ptr == a.ctypes.data


@pytest.mark.parametrize("shape,dtype,cvtype", [((7, 9), np.uint8, "CV_8UC1"), ((5, 3, 3), np.float32, "CV_32FC3"),
                                                ((4, 6, 4), np.uint16, "CV_16UC4"), ((1, 1), np.int16, "CV_16SC1")])
def test_umat_layout_is_found_without_copying(shape, dtype, cvtype):
    umat_context()
    u = cv2.UMat(shape[0], shape[1], getattr(cv2, cvtype), 0)
    t = interop.wrap(u)
    assert t.info.shape == shape and t.info.dtype == np.dtype(dtype)
    assert t.info == TensorInfo(shape, dtype)  # a fresh UMat is continuous
    assert u.get().shape == shape


def test_umat_roi_offset_and_step():
    umat_context()
    u = cv2.UMat(40, 50, cv2.CV_8UC3, (1, 2, 3))
    roi = cv2.UMat(u, (5, 15), (10, 30))
    t = interop.wrap(roi)
    assert t.offset == roi.offset == 5 * 150 + 10 * 3
    assert t.info.shape == (10, 20, 3) and t.info.strides == (150, 3, 1)
    assert t.cl_mem == int(u.handle(cv2.ACCESS_READ))  # a ROI shares its parent's cl_mem
    sub = interop.wrap(u).region(10, 5, 20, 10)
    assert sub.offset == t.offset and sub.cl_mem == t.cl_mem and sub.info == t.info


def test_umat_context_is_opencvs():
    ucx = umat_context()
    assert ucx.cl_context == int(cv2.UMat.context()) and ucx.cl_queue == int(cv2.UMat.queue())
    t = interop.wrap(cv2.UMat(2, 2, cv2.CV_8UC1, 0))
    assert t.context is ucx and t.handle("offset") == 0


def test_umat_frame_packed_only():
    umat_context()
    u = cv2.UMat(6, 8, cv2.CV_8UC3, 0)
    f = interop.wrap(u, format=interop.FrameFormat.BGR)
    assert f.memory_type is MemoryType.OPENCV_UMAT and (f.width, f.height) == (8, 6)
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(u, format=interop.FrameFormat.NV12)


def test_bad_input():
    umat_context()
    with pytest.raises(InvalidTensorError):
        interop.wrap(cv2.UMat())  # empty: no layout to find
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(cv2.UMat(2, 2, cv2.CV_8UC1, 0), context=Context.default(MemoryType.CPU))
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(cv2.Mat(np.zeros(3)), context=Context.default(MemoryType.OPENCV_UMAT))
    from interop.tensors.opencv import new_umat

    with pytest.raises(InvalidTensorError):
        new_umat(TensorInfo((4,), np.uint8))
    with pytest.raises(InvalidTensorError):
        new_umat(TensorInfo((4, 4), np.int64))
    t = interop.wrap(cv2.UMat(2, 2, cv2.CV_8UC1, 0))
    t.release()
    with pytest.raises(InvalidTensorError):
        _ = t.cl_mem


def test_doctor_rows():
    umat_context()
    from interop.tensors.opencv import _probe

    rows = _probe()
    assert [r.name for r in rows] == ["OpenCV Mat", "OpenCV UMat (OpenCL)"]
    assert rows[1].available and rows[1].details["cl_context"] == f"{int(cv2.UMat.context()):#x}"


@pytest.mark.parametrize("rows,cols", [((0, 1), (2, 9)), ((5, 6), (0, 30)), ((50, 99), (2, 9)), ((0, 100), (29, 30)),
                                       ((99, 100), (0, 1))])
def test_umat_roi_layouts_match_numpy(rows, cols):
    """Row counts of ROIs are found by probing (the cl_mem size only bounds them)."""
    umat_context()
    base = np.arange(100 * 30 * 3, dtype=np.uint8).reshape(100, 30, 3)
    u = cv2.UMat(base)
    roi = cv2.UMat(u, rows, cols)
    t = interop.wrap(roi)
    want = base[rows[0]:rows[1], cols[0]:cols[1]]
    assert t.info.shape == want.shape and t.offset == rows[0] * 90 + cols[0] * 3
    assert t.info.strides[0] == 90 or want.shape[0] == 1  # one row: no second row to measure the step by
    with interop.map(t, MemoryType.CPU) as h:
        np.testing.assert_array_equal(h.numpy(), want)


def _rss() -> int:
    import gc
    import os

    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("make", [lambda: cv2.UMat(np.zeros((1080, 1920), np.uint8)),
                                  lambda: cv2.UMat(np.zeros((300, 1744), np.float32)),
                                  lambda: cv2.UMat(cv2.UMat(np.zeros((1100, 1900), np.uint16)), (5, 1025), (2, 1009))])
def test_finding_the_layout_does_not_leak_the_umat(make):
    """opencv-python 5.0 leaks a UMat's buffer each time a ROI constructor on it raises; layout discovery never
    makes one raise, so 24 fresh ~2 MiB UMats wrapped and dropped leave RSS flat."""
    umat_context()
    for _ in range(4):
        interop.wrap(make()).release()
    before = _rss()
    for _ in range(24):
        t = interop.wrap(make())
        t.release()
        del t
    assert _rss() - before < 16 << 20
