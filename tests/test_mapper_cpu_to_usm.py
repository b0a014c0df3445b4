"""CPU -> USM: a counted copy into a shared allocation; memory that already is USM maps back without a copy."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, CopyRequiredError
from tests.support.ocl_support import need, sycl_context

need("dpctl", "dpctl")


def test_copy_counted_and_write_back():
    ctx = sycl_context()
    big = np.arange(8 * 20, dtype=np.uint8).reshape(8, 20)
    a = big[1:7, 2:18]
    with pytest.raises(CopyRequiredError):
        interop.map(a, MemoryType.USM)
    with interop.copy_meter() as m:
        u = interop.map(a, MemoryType.USM, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert m.copies == 1 and m.bytes == a.size
        assert u.usm_type == "shared" and u.context is ctx and u.info.is_contiguous
        np.testing.assert_array_equal(np.asarray(u), a)
        u.native.memset(3)
        u.release()
    assert m.copies == 2 and m.bytes == 2 * a.size
    assert (a == 3).all() and big[0].tolist() == list(range(20))


def test_usm_view_maps_back_without_copy():
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    t = allocate(TensorInfo((6, 8), np.float32), "shared", ctx)
    with interop.copy_meter() as m:
        host = interop.map(t, MemoryType.CPU)
        back = interop.map(host, MemoryType.USM, allow_copy=True)
        region = interop.map(host.region(1, 2, 3, 2), MemoryType.USM, allow_copy=True)
    assert m.copies == 0
    assert back.pointer == t.pointer and back.native is t.native
    assert region.pointer == t.pointer + 2 * 32 + 4 and region.offset == 2 * 32 + 4


def test_output_context_must_be_sycl():
    from interop.mappers.cpu_to_usm import CPUToUSM

    sycl_context()
    with pytest.raises(ContextMismatchError):
        CPUToUSM(output_context=interop.Context.default(MemoryType.CPU)).map(np.zeros(3), allow_copy=True)
