"""OPENCV -> CPU: a plain numpy view of the Mat's memory; READ is read-only."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import InvalidTensorError
from tests.support.ocl_support import need

cv2 = need("cv2", "OpenCV")


def test_zero_copy_and_modes():
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    mat = cv2.Mat(a)
    with interop.copy_meter() as m:
        rw = interop.map(mat, MemoryType.CPU, mode=AccessMode.READ_WRITE)
        r = interop.map(mat, MemoryType.CPU)
    assert m.copies == 0
    assert rw.memory_type is MemoryType.CPU and type(rw.native) is np.ndarray
    assert rw.data_ptr == r.data_ptr == a.ctypes.data
    rw.native[1, 1] = -5
    assert mat[1, 1] == -5
    assert not r.native.flags.writeable
    with pytest.raises(ValueError):
        r.native[0, 0] = 1


def test_bad_input():
    t = interop.wrap(cv2.Mat(np.zeros(4)))
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)
