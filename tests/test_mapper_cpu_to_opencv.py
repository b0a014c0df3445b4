"""CPU -> OPENCV: a cv2.Mat over the same memory."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import InvalidTensorError
from tests.support.ocl_support import need

cv2 = need("cv2", "OpenCV")


def test_zero_copy_both_ways_visible():
    a = np.zeros((20, 30, 3), np.uint8)
    with interop.copy_meter() as m:
        t = interop.map(a, MemoryType.OPENCV, mode=AccessMode.READ_WRITE)
    assert m.copies == 0
    assert isinstance(t.native, cv2.Mat) and t.data_ptr == a.ctypes.data
    cv2.rectangle(t.native, (2, 3), (10, 8), (255, 0, 0), -1)  # OpenCV writes ...
    assert (a[3:9, 2:11, 0] == 255).all()  # ... numpy sees it
    a[0, 0] = 7
    assert (t.native[0, 0] == 7).all()


def test_padded_view_and_read_only():
    big = np.zeros((10, 40), np.uint8)
    v = big[2:8, 5:25]
    t = interop.map(v, MemoryType.OPENCV)
    assert t.data_ptr == v.ctypes.data and t.info.strides == (40, 1)
    ro = np.ones(4, np.uint8)
    ro.flags.writeable = False
    t2 = interop.map(ro, MemoryType.OPENCV)
    assert not t2.native.flags.writeable
    with pytest.raises(InvalidTensorError):
        interop.map(ro, MemoryType.OPENCV, mode=AccessMode.WRITE)
