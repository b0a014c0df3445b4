"""OPENCV_UMAT -> CPU: the router's chain OPENCV_UMAT -> OPENCL -> CPU (no mapper runs another one): the UMat's
cl_mem mapped on OpenCV's queue, zero-copy on the CPU device."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import InvalidTensorError
from tests.support.ocl_support import need, opencl_context, umat_context

cv2 = need("cv2", "OpenCV")


def test_the_route_is_a_chain_of_two_zero_copy_steps():
    assert [m.name for m in interop.route(MemoryType.OPENCV_UMAT, MemoryType.CPU).mappers] == \
        ["opencv_umat_to_opencl", "opencl_to_cpu"]
    assert interop.route(MemoryType.OPENCV_UMAT, MemoryType.CPU).zero_copy


def test_map_is_the_umat_storage_and_writes_reach_opencv():
    umat_context()
    ctx = opencl_context()
    u = cv2.UMat(64, 48, cv2.CV_8UC4, (1, 2, 3, 4))
    with interop.copy_meter() as m:
        with interop.map(u, MemoryType.CPU, mode=AccessMode.READ_WRITE) as h:
            v = h.numpy()
            assert v.shape == (64, 48, 4) and (v == (1, 2, 3, 4)).all()
            p = h.data_ptr
            v[10, 20] = (9, 9, 9, 9)
    assert m.copies == 0
    assert tuple(u.get()[10, 20]) == (9, 9, 9, 9)  # seen by OpenCV after release
    if ctx.host_shared:
        with interop.map(u, MemoryType.CPU) as again:
            assert again.data_ptr == p  # the storage itself, not a staging copy
            assert not again.numpy().flags.writeable


def test_roi_maps_the_region():
    umat_context()
    base = np.arange(30 * 40, dtype=np.uint16).reshape(30, 40)
    u = cv2.UMat(base)
    roi = cv2.UMat(u, (5, 25), (7, 17))
    with interop.map(roi, MemoryType.CPU) as h:
        np.testing.assert_array_equal(h.numpy(), base[5:25, 7:17])
        assert h.numpy().strides == (80, 2)


def test_opencv_work_is_ordered_before_the_map():
    umat_context()
    u = cv2.UMat(256, 256, cv2.CV_32FC1, 1.0)
    for _ in range(5):
        cv2.multiply(u, 2.0, dst=u)  # queued on OpenCV's in-order queue
    with interop.map(u, MemoryType.CPU) as h:
        assert (h.numpy() == 32.0).all()


def test_bad_input():
    umat_context()
    t = interop.wrap(cv2.UMat(2, 2, cv2.CV_8UC1, 0))
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)
