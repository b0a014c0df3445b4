"""Page-aligned allocation (issue 19 point 3): interop.alloc.empty / empty_frame give CPU tensors and frames over an
anonymous mapping (page-aligned start, whole pages, freed with the last view) that the NPU imports in place.

The NPU half runs on the strict double of the plugin's remote context (tests/ov_remote_double.py) and, in a child
process, on the fake Level Zero driver reading the bytes through the import (tests/ze_fake.py)."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import numpy as np
import pytest

import interop
from interop import FrameFormat, InteropError, MemoryType, TensorInfo
from interop.alloc import PAGE, PageBlock, empty, empty_frame, live_allocations
from tests import ze_fake
from tests.ov_remote_double import RemoteContextDouble, as_void_ptr
from tests.support.requirements import need_module


def _block(t: Any) -> PageBlock:
    """The PageBlock under a tensor (following numpy bases and interop's array exports)."""
    obj = t.native
    for _ in range(16):
        if isinstance(obj, PageBlock):
            return obj
        obj = getattr(obj, "base", None) if isinstance(obj, np.ndarray) else getattr(obj, "owner", None)
    raise AssertionError(f"no PageBlock under {t!r}")


@pytest.fixture
def refcount_only():
    """Frees must happen by reference counting, not by the cyclic GC."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# ---- alignment and sizes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "dtype"), [((1,), np.uint8), ((100, 100), np.uint8), ((4096,), np.uint8),
                                              ((3, 480, 854), np.float32), ((0,), np.uint8)])
def test_tensor_is_page_aligned_whole_pages_and_zeroed(shape, dtype) -> None:
    t = empty(shape, dtype)
    b = _block(t)
    assert t.memory_type is MemoryType.CPU and t.shape == shape and t.dtype == np.dtype(dtype)
    assert b.address % PAGE == 0 and t.native.__array_interface__["data"][0] == b.address
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert b.size % PAGE == 0 and b.size == max(-(-nbytes // PAGE) * PAGE, PAGE)
    assert not np.asarray(t).any()


def test_shape_defaults_to_uint8_and_an_int_is_a_1d_shape() -> None:
    t = empty(10)
    assert t.shape == (10,) and t.dtype == np.uint8


def test_tensor_info_with_strides_is_kept() -> None:
    info = TensorInfo((48, 64), np.uint8, (128, 1))  # padded rows
    t = empty(info)
    assert t.info == info and t.data_ptr % PAGE == 0 and _block(t).size == PAGE * 2


def test_larger_alignment() -> None:
    t = empty((100,), align=1 << 16)
    assert t.data_ptr % (1 << 16) == 0
    assert empty((100,), align=64).data_ptr % PAGE == 0  # never less than a page


@pytest.mark.parametrize(("fmt", "w", "h"), [(FrameFormat.NV12, 854, 480), (FrameFormat.I420, 63, 31),
                                             (FrameFormat.RGB, 33, 7), (FrameFormat.GRAY8, 1, 1)])
def test_frame_planes_lie_in_one_page_aligned_allocation(fmt, w, h) -> None:
    f = empty_frame(fmt, w, h)
    b = _block(f[0])
    assert f.format is fmt and (f.width, f.height) == (w, h) and f.memory_type is MemoryType.CPU
    assert f[0].data_ptr == b.address and b.address % PAGE == 0 and b.size % PAGE == 0
    for p in f.tensors:
        assert _block(p) is b
        assert p.info.strides[0] % (64 // (2 if p is not f[0] and fmt is FrameFormat.I420 else 1)) == 0
        assert b.address <= p.data_ptr and p.data_ptr + p.info.extent <= b.address + b.size
    nv = empty_frame(FrameFormat.NV12, 854, 480)
    assert [p.info.strides[0] for p in nv] == [896, 896] and nv[1].data_ptr - nv[0].data_ptr == 896 * 480


def test_pitch_align_is_honoured() -> None:
    f = empty_frame(FrameFormat.GRAY8, 100, 4, pitch_align=256)
    assert f[0].info.strides[0] == 256


# ---- lifetime ---------------------------------------------------------------------------------------------------


def test_view_outlives_the_tensor_and_the_memory_goes_with_the_last_view(refcount_only) -> None:
    n = live_allocations()
    t = empty((64, 64))
    assert live_allocations() == n + 1
    v = np.asarray(t)
    v[:] = 5
    t.release()
    del t
    assert live_allocations() == n + 1 and int(v.sum()) == 5 * 64 * 64  # the view still reads the memory
    w = v[10:20]
    del v
    assert live_allocations() == n + 1 and (w == 5).all()
    del w
    assert live_allocations() == n


def test_frame_memory_goes_with_its_last_plane_or_view(refcount_only) -> None:
    n = live_allocations()
    f = empty_frame(FrameFormat.NV12, 64, 48)
    uv = np.asarray(f[1])
    del f
    assert live_allocations() == n + 1
    uv[...] = 1
    del uv
    assert live_allocations() == n
    f = empty_frame(FrameFormat.I420, 64, 48)
    del f
    assert live_allocations() == n


def test_many_allocations_leave_nothing_behind(refcount_only) -> None:
    n = live_allocations()
    for _ in range(200):
        np.asarray(empty((480, 640)))[0, 0] = 1
        empty_frame(FrameFormat.NV12, 320, 240)
    assert live_allocations() == n


# ---- write-through ----------------------------------------------------------------------------------------------


def test_writes_go_through_every_view() -> None:
    f = empty_frame(FrameFormat.NV12, 64, 48)
    y, uv = np.asarray(f[0]), np.asarray(f[1])
    assert y.flags.writeable and uv.flags.writeable
    y[...] = 7
    uv[...] = 9
    b = _block(f[0])
    raw = np.frombuffer((ctypes.c_uint8 * b.size).from_address(b.address), np.uint8)
    assert (raw[: 64 * 48] == 7).all() and (raw[64 * 48: 64 * 48 * 3 // 2] == 9).all()
    assert (np.asarray(f[0]) == 7).all() and (f[1].native == 9).all()
    t = empty((4, 4), np.int32)
    t.native[1, 2] = -3
    assert np.asarray(t)[1, 2] == -3 and np.from_dlpack(t)[1, 2] == -3


# ---- bad arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "err"), [
    (lambda: empty((-1, 4)), interop.InvalidTensorError),
    (lambda: empty((2.5,)), interop.InvalidTensorError),
    (lambda: empty("abc"), interop.InvalidTensorError),
    (lambda: empty((4,), "not a dtype"), interop.UnsupportedTypeError),
    (lambda: empty(TensorInfo((4,), np.uint8), np.uint8), interop.InvalidTensorError),
    (lambda: empty((4,), align="huge"), interop.InvalidTensorError),
    (lambda: empty((4,), align=3), interop.InvalidTensorError),
    (lambda: empty((4,), align=0), interop.InvalidTensorError),
    (lambda: empty((4,), align=True), interop.UnsupportedTypeError),
    (lambda: empty((4,), align=None), interop.UnsupportedTypeError),
    (lambda: empty((1 << 62, 1 << 20)), InteropError),
    (lambda: empty_frame("NV12", 64, 48), interop.UnsupportedTypeError),
    (lambda: empty_frame(FrameFormat.NV12, 0, 48), interop.InvalidTensorError),
    (lambda: empty_frame(FrameFormat.NV12, 64, 1 << 40), interop.InvalidTensorError),
    (lambda: empty_frame(FrameFormat.NV12, 64.0, 48), interop.InvalidTensorError),
    (lambda: empty_frame(FrameFormat.NV12, 64, 48, pitch_align=0), interop.InvalidTensorError),
])
def test_bad_arguments_are_typed_errors(call, err) -> None:
    n = live_allocations()
    with pytest.raises(err):
        call()
    assert live_allocations() == n


# ---- NPU import without a copy (the plugin's remote-context double) -----------------------------------------------

def _npu() -> tuple[Any, RemoteContextDouble]:
    need_module("openvino")
    from interop.tensors.npu import NPUContext

    rc = RemoteContextDouble()
    return NPUContext(rc), rc


def test_tensor_imports_into_the_npu_in_place() -> None:
    ctx, rc = _npu()
    t = empty((100, 100))
    np.asarray(t)[...] = 3
    with interop.copy_meter() as m:
        n = interop.map(t, ctx)
    assert m.copies == 0
    (_, shape, props), = rc.calls
    assert props["MEM_TYPE"] == "CPU_VA" and as_void_ptr(props["MEM_HANDLE"]) == t.data_ptr
    assert shape == [_block(t).size]
    assert n.mem_type == "CPU_VA" and n.native.data.ctypes.data == t.data_ptr and (n.native.data == 3).all()


def test_frame_imports_with_one_import_and_planes_at_their_own_addresses() -> None:
    ctx, rc = _npu()
    f = empty_frame(FrameFormat.NV12, 854, 480)
    with interop.copy_meter() as m:
        n = interop.map(f, ctx)
    assert m.copies == 0 and len(rc.calls) == 1 and n[0].host_import is n[1].host_import
    assert [p.native.data.ctypes.data for p in n] == [p.data_ptr for p in f]


def test_allocations_held_together_all_import() -> None:
    """Anonymous mappings are often placed next to each other; the plugin refuses an import whose next page is
    part of a live import. Each allocation keeps a page past its end, so imports of many live tensors never touch."""
    ctx, rc = _npu()
    ts = [empty((PAGE,)) for _ in range(8)] + [empty_frame(FrameFormat.I420, 64, 48)[0] for _ in range(4)]
    ns = [interop.map(t, ctx) for t in ts]
    assert len(rc.calls) == len(ts) and all(n.mem_type == "CPU_VA" for n in ns)


def case_fake_device_reads_an_empty_frame_through_the_import() -> None:
    need_module("openvino")
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    rc = RemoteContextDouble(ze_context=lz.native)
    f = empty_frame(FrameFormat.NV12, 320, 240)
    for i, p in enumerate(f):
        a = np.asarray(p)
        a[...] = (np.arange(a.size) % 251 + i).astype(np.uint8).reshape(a.shape)
    with interop.copy_meter() as m:
        n = interop.map(f, NPUContext(rc))
    assert m.copies == 0
    lib = ctypes.CDLL(str(ze_fake.FAKE_DRIVER))
    lib.fake_ze_device_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.fake_ze_device_read.restype = ctypes.c_uint32
    for p in f:
        assert ze.alloc_properties(lz.native, p.data_ptr).id != 0  # the plane lies in the import
        span = p.info.extent
        out = ctypes.create_string_buffer(span)
        assert lib.fake_ze_device_read(lz.ze_context, p.data_ptr, span, out) == 0
        assert out.raw == ctypes.string_at(p.data_ptr, span)
    del n
    gc.collect()
    assert rc.imports == []


globals().update(ze_fake.tests_for(globals()))
