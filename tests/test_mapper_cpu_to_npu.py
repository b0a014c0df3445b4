"""CPU -> NPU: page-aligned host memory imported with CPU_VA (strict double of the plugin's remote context; in a child
process, the fake Level Zero driver reading the bytes through the import); unaligned and foreign memory refused with
WrongMemoryError naming the rule, the copying route taken only with allow_copy=True."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from tests import ze_fake
from tests.ov_remote_double import RemoteContextDouble, as_void_ptr
from tests.support.requirements import need_module

ov = need_module("openvino")


def _aligned(nbytes: int) -> np.ndarray:
    """Page-aligned host memory (an anonymous mapping), as a page-aligned allocator would give."""
    m = mmap.mmap(-1, -(-nbytes // 4096) * 4096)
    return np.frombuffer(m, np.uint8, nbytes)


def _npu(**kw):  # type: ignore[no-untyped-def]
    from interop.tensors.npu import NPUContext

    rc = RemoteContextDouble(**kw)
    return NPUContext(rc), rc


def test_route_is_zero_copy() -> None:
    chain = interop.route(MemoryType.CPU, MemoryType.NPU)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["cpu_to_npu"]


def test_aligned_tensor_is_imported_in_place() -> None:
    ctx, rc = _npu()
    a = _aligned(3 * 4096 + 100).reshape(-1, 4)
    a[:] = 7
    with interop.copy_meter() as m:
        n = interop.map(interop.wrap(a), ctx)
    assert m.copies == 0
    (typ, shape, props), = rc.calls
    assert props["MEM_TYPE"] == "CPU_VA" and as_void_ptr(props["MEM_HANDLE"]) == a.ctypes.data and shape == [4 * 4096]
    assert n.mem_type == "CPU_VA" and n.native.data.ctypes.data == a.ctypes.data and n.info.shape == a.shape
    assert (n.native.data == 7).all()


def test_nv12_frame_in_one_buffer_is_one_import() -> None:
    ctx, rc = _npu()
    w, h = 64, 32
    buf = _aligned(w * h * 3 // 2)
    y, uv = buf[: w * h].reshape(h, w), buf[w * h:].reshape(h // 2, w // 2, 2)
    f = interop.Frame([interop.wrap(y), interop.wrap(uv)], FrameFormat.NV12, w, h)
    n = interop.map(f, ctx)
    assert len(rc.calls) == 1 and n[0].host_import is n[1].host_import
    assert [t.native.data.ctypes.data for t in n] == [y.ctypes.data, uv.ctypes.data]


def test_unaligned_memory_is_wrong_memory_naming_the_rule() -> None:
    from interop.mappers.cpu_to_npu import CPUToNPU

    ctx, rc = _npu()
    a = _aligned(8192)[64:]
    with pytest.raises(interop.WrongMemoryError, match="page boundary"):
        CPUToNPU(output_context=ctx).map(interop.wrap(a))
    assert rc.calls == []


def test_unaligned_memory_copies_only_with_allow_copy() -> None:
    from interop.context import set_default_context

    ctx, rc = _npu()
    a = _aligned(8192)[64:]
    set_default_context(MemoryType.NPU, ctx)
    try:
        with interop.copy_meter() as m:
            n = interop.map(interop.wrap(a), MemoryType.NPU, allow_copy=True)
        assert m.copies == 1 and n.mem_type != "CPU_VA"
    finally:
        set_default_context(MemoryType.NPU, None)


def test_a_cpu_view_of_dma_memory_is_foreign() -> None:
    from interop.mappers.cpu_to_npu import CPUToNPU
    from interop.tensors.dma import DMAContext

    ctx, rc = _npu()
    d = DMAContext().alloc_tensor(interop.TensorInfo((64, 64), np.uint8))
    with interop.map(d, MemoryType.CPU) as c:
        with pytest.raises(interop.WrongMemoryError, match="DMA"):
            CPUToNPU(output_context=ctx).map(c)
    assert rc.calls == []


def case_device_reads_a_page_aligned_tensor_through_the_import() -> None:
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    rc = RemoteContextDouble(ze_context=lz.native)
    a = _aligned(10000)
    a[:] = np.arange(10000) % 251
    n = interop.map(interop.wrap(a), NPUContext(rc))
    assert ze.alloc_properties(lz.native, a.ctypes.data).id != 0
    lib = ctypes.CDLL(str(ze_fake.FAKE_DRIVER))
    lib.fake_ze_device_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.fake_ze_device_read.restype = ctypes.c_uint32
    out = ctypes.create_string_buffer(10000)
    assert lib.fake_ze_device_read(lz.ze_context, a.ctypes.data, 10000, out) == 0
    assert out.raw == a.tobytes()
    del n
    import gc

    gc.collect()
    assert rc.imports == []


globals().update(ze_fake.tests_for(globals()))
