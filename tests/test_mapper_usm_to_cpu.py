"""USM -> CPU: host/shared are numpy views of the USM pointer; device memory is a counted copy through the queue."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import CopyRequiredError, InvalidTensorError
from tests.support.ocl_support import need, sycl_context

need("dpctl", "dpctl")


@pytest.mark.parametrize("usm_type", ["shared", "host"])
def test_zero_copy_views(usm_type):
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    t = allocate(TensorInfo((16, 16), np.int32), usm_type, ctx)
    t.native.memset(0)
    with interop.copy_meter() as m:
        with interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE) as h:
            assert h.data_ptr == t.pointer
            h.numpy()[2] = 7
    assert m.copies == 0
    got = np.frombuffer(t.native.copy_to_host(), np.int32).reshape(16, 16)  # SYCL's own read
    assert (got[2] == 7).all() and got.sum() == 7 * 16
    t.native.memset(1)  # SYCL's own write
    with interop.map(t, MemoryType.CPU) as h:
        assert (h.numpy() == 0x01010101).all() and not h.numpy().flags.writeable


def test_device_memory_is_a_counted_copy():
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    t = allocate(TensorInfo((10, 12), np.float32), "device", ctx)
    src = np.arange(120, dtype=np.float32).reshape(10, 12)
    ctx.queue.memcpy(t.native, src, src.nbytes)
    from interop.mapper import Cost
    from interop.mappers.usm_to_cpu import USMToCPU

    assert USMToCPU().cost(t) is Cost.COPY  # the edge's own cost for device memory
    with pytest.raises(CopyRequiredError) as e:
        USMToCPU().map(t)
    assert MemoryType.CPU in e.value.reachable  # map-time refusals say what is reachable too
    with interop.copy_meter() as m:
        with USMToCPU().map(t, allow_copy=True) as h:
            np.testing.assert_array_equal(h.numpy(), src)
            assert h.data_ptr != t.pointer
        assert m.copies == 1 and m.bytes == src.nbytes
        r = t.region(2, 3, 5, 4)  # padded rows: only 4 x 5 elements move
        with USMToCPU().map(r, AccessMode.READ_WRITE, allow_copy=True) as h:
            np.testing.assert_array_equal(h.numpy(), src[3:7, 2:7])
            h.numpy()[:] = -1
    assert m.copies == 3 and m.bytes == src.nbytes + 2 * 4 * 5 * 4
    back = np.empty_like(src)
    ctx.queue.memcpy(back, t.native, src.nbytes)
    expect = src.copy()
    expect[3:7, 2:7] = -1
    np.testing.assert_array_equal(back, expect)


def test_bad_input():
    from interop.mappers.usm_to_cpu import USMToCPU
    from interop.tensors.usm import allocate

    ctx = sycl_context()
    with pytest.raises(InvalidTensorError):
        USMToCPU().map(interop.wrap(np.zeros(2)))
    t = allocate(TensorInfo((4,), np.uint8), "shared", ctx)
    t.release()
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)
