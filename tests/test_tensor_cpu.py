"""CPU tensors: wrap, numpy/DLPack exports (pointer-identical), read-only views, release, regions, frames."""

from __future__ import annotations

import gc
import mmap
import weakref

import numpy as np
import pytest

import interop
from interop import (
    AccessMode,
    FrameFormat,
    InteropError,
    InvalidTensorError,
    MemoryType,
    TensorInfo,
    UnsupportedTypeError,
)
from interop.tensors.cpu import CPUTensor


def ptr(a) -> int:
    return np.asarray(a).__array_interface__["data"][0]


def test_wrap_ndarray_is_cpu_and_native_is_the_array():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = interop.wrap(a)
    assert t.memory_type is MemoryType.CPU and t.native is a
    assert t.info == TensorInfo((4, 6), np.float32)
    assert ptr(t) == a.ctypes.data == t.handle("data")
    assert t.context == interop.Context.default(MemoryType.CPU)


def test_numpy_view_is_zero_copy_and_writes_through():
    a = np.zeros((3, 5), np.uint16)
    t = interop.wrap(a)
    v = np.asarray(t)
    assert ptr(v) == a.ctypes.data
    v[1, 2] = 77
    assert a[1, 2] == 77
    a[0, 0] = 5
    assert v[0, 0] == 5


@pytest.mark.parametrize("max_version", [None, (1, 0), (1, 2)])
def test_dlpack_round_trip_pointer_identical(max_version):
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)[:, 1:3]  # strided view
    t = interop.wrap(a)
    kw = {} if max_version is None else {"max_version": max_version}
    cap = t.__dlpack__(**kw)
    assert "dltensor" in repr(cap)
    b = np.from_dlpack(t)
    assert ptr(b) == ptr(a) and b.strides == a.strides and np.array_equal(a, b)
    assert t.__dlpack_device__() == (1, 0)
    # and back in: a DLPack producer is wrapped without a copy
    t2 = interop.wrap(b)
    assert ptr(t2) == ptr(a)


def test_dlpack_import_of_foreign_producer():
    class Producer:  # any object with the protocol
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a = np.ones((4, 4), np.float64)
    t = interop.wrap(Producer(a))
    assert t.memory_type is MemoryType.CPU and ptr(t) == a.ctypes.data


def test_read_only_views_refuse_legacy_capsules_and_writes():
    a = np.arange(10, dtype=np.uint8)
    a.flags.writeable = False
    t = interop.wrap(a)
    assert not t.writable
    v = np.asarray(t)
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 1
    with pytest.raises(BufferError):
        t.__dlpack__()  # legacy capsule cannot carry read-only
    cap = t.__dlpack__(max_version=(1, 0))
    assert cap is not None
    b = np.from_dlpack(t)
    assert not b.flags.writeable and ptr(b) == a.ctypes.data


def test_dlpack_copy_and_device_honoured():
    a = np.arange(6, dtype=np.float32)
    t = interop.wrap(a)
    c = np.from_dlpack(t, copy=True)
    assert ptr(c) != a.ctypes.data and np.array_equal(c, a)
    nc = np.from_dlpack(t, copy=False)
    assert ptr(nc) == a.ctypes.data
    d = np.from_dlpack(t, device="cpu")
    assert ptr(d) == a.ctypes.data
    with pytest.raises(BufferError):
        t.__dlpack__(stream=1)


def test_buffer_protocol_objects_and_info():
    buf = bytearray(range(64))
    t = interop.wrap(buf, info=TensorInfo((4, 8), np.uint8, (16, 1)))
    v = np.asarray(t)
    assert v[1, 0] == 16 and v.strides == (16, 1)
    v[0, 0] = 99
    assert buf[0] == 99
    with pytest.raises(InvalidTensorError, match="needs"):
        interop.wrap(buf, info=TensorInfo((5, 16), np.uint8))
    with mmap.mmap(-1, 4096) as mm:
        t = interop.wrap(mm, info=TensorInfo((64, 64), np.uint8))
        np.asarray(t)[0, 0] = 7
        assert mm[0] == 7
        del t, v
        gc.collect()


def test_unknown_objects_and_bad_arguments():
    with pytest.raises(UnsupportedTypeError, match="cannot wrap"):
        interop.wrap(object())
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(np.zeros(3), info={"shape": (3,)})
    with pytest.raises(UnsupportedTypeError):
        interop.map(np.zeros(3), "cpu")
    with pytest.raises(UnsupportedTypeError):
        interop.map(np.zeros(3), MemoryType.CPU, mode="r")
    with pytest.raises(InvalidTensorError):
        interop.wrap(np.zeros(3, dtype=object))
    with pytest.raises(InvalidTensorError, match="negative"):
        interop.wrap(np.arange(5)[::-1])


def test_map_to_own_type_returns_it_unchanged():
    t = interop.wrap(np.zeros(4))
    assert interop.map(t, MemoryType.CPU) is t
    assert interop.map(t, interop.Context.default(MemoryType.CPU)) is t
    with pytest.raises(UnsupportedTypeError, match="either"):
        interop.map(t, interop.Context.default(MemoryType.CPU), context=interop.Context.default(MemoryType.CPU))


def test_release_and_views_keep_memory_alive():
    a = np.arange(1000, dtype=np.uint8)
    ref = weakref.ref(a)
    t = interop.wrap(a)
    v = np.asarray(t)
    del a
    t.release()
    t.release()  # idempotent
    with pytest.raises(InvalidTensorError, match="released"):
        _ = t.info
    with pytest.raises(InvalidTensorError):
        np.asarray(t)
    gc.collect()
    assert ref() is not None and v[999] == 999 % 256  # the view still owns the memory
    del v, t
    gc.collect()
    assert ref() is None


def test_with_statement_releases_and_runs_hooks():
    calls = []
    t = CPUTensor(np.zeros(3))
    t.on_release(lambda: calls.append("done"))
    with t as same:
        assert same is t
    assert t.released and calls == ["done"]
    t2 = CPUTensor(np.zeros(3))
    t2.on_release(lambda: calls.append("gc"))
    del t2
    gc.collect()
    assert calls == ["done", "gc"]


def test_handles():
    t = interop.wrap(np.zeros(3))
    assert t.handle() == t.handle("data") == t.data_ptr
    with pytest.raises(InteropError, match="no handle"):
        t.handle("dma_fd")


def test_region_is_a_view_at_an_offset():
    img = np.arange(10 * 12 * 3, dtype=np.uint8).reshape(10, 12, 3)
    t = interop.wrap(img)
    r = t.region(2, 3, 4, 5)
    v = np.asarray(r)
    assert v.shape == (5, 4, 3) and ptr(v) == img[3:, 2:].ctypes.data
    assert np.array_equal(v, img[3:8, 2:6])
    v[0, 0, 0] = 255
    assert img[3, 2, 0] == 255
    assert r.parent is t
    with pytest.raises(InvalidTensorError, match="inside"):
        t.region(10, 0, 4, 4)


def test_nv12_frame_from_buffer_and_crop():
    w, h = 8, 6
    buf = np.arange(h * 3 // 2 * w, dtype=np.uint8).reshape(h * 3 // 2, w)
    f = interop.wrap(buf, format=FrameFormat.NV12)
    assert isinstance(f, interop.Frame) and len(f) == 2 and (f.width, f.height) == (w, h)
    y, uv = f.tensors
    assert y.shape == (6, 8) and uv.shape == (3, 4, 2)
    assert ptr(y) == buf.ctypes.data and ptr(uv) == buf.ctypes.data + w * h
    c = f.crop(2, 2, 4, 2)
    assert (c.width, c.height) == (4, 2)
    assert ptr(c[0]) == buf.ctypes.data + 2 * w + 2
    assert ptr(c[1]) == buf.ctypes.data + w * h + 1 * w + 2
    assert np.array_equal(np.asarray(c[1]), np.asarray(uv)[1:2, 1:3])
    with pytest.raises(InvalidTensorError, match="even"):
        f.crop(1, 0, 2, 2)
    f.release()
    with pytest.raises(InvalidTensorError):
        _ = f.tensors


def test_frame_validation():
    y = interop.wrap(np.zeros((4, 4), np.uint8))
    with pytest.raises(InvalidTensorError, match="planes"):
        interop.Frame([y], FrameFormat.NV12)
    with pytest.raises(UnsupportedTypeError):
        interop.Frame([y], "GRAY8")
    f = interop.Frame([y], FrameFormat.GRAY8, pts=3, metadata={"cam": 1})
    assert f.memory_type is MemoryType.CPU and f.pts == 3 and f.metadata == {"cam": 1}
    with pytest.raises(InvalidTensorError):
        interop.wrap(np.zeros((5, 4), np.uint8), format=FrameFormat.NV12)


def test_write_mode_is_accepted_for_cpu_identity():
    a = np.zeros(3)
    assert interop.map(a, MemoryType.CPU, mode=AccessMode.READ_WRITE).native is a
