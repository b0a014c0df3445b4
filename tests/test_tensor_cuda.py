"""CUDA tensors: recognisers, DLPack / CUDA-array-interface exports, the stream handshake, regions.

CPU-side tests use producers whose "device" memory is host memory (tests/cuda_fakes.py) and a driver that records
calls; tests marked gpu use torch / CuPy on a real device.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType, TensorInfo
from interop.errors import InvalidTensorError, UnsupportedTypeError
from interop.native import cuda_driver as cd
from interop.native import dlpack as cn
from interop.tensors.cpu import CPUTensor
from interop.tensors.cuda import CUDAContext, CUDATensor, frame_from_tensor, rows_of, stream_handle
from tests.support.cuda_fakes import FakeDevice, FakeDriver
from tests.support.requirements import need_module


@pytest.fixture
def driver():
    d = FakeDriver()
    old = cd._driver
    cd.set_driver(d)
    yield d
    cd.set_driver(old)


def consume(cap):
    """Act as a DLPack consumer: take the tensor, rename the capsule, later call the deleter."""
    for name, used, cls in ((cn.VERSIONED, cn.USED_VERSIONED, cn.DLManagedTensorVersioned),
                            (cn.LEGACY, cn.USED_LEGACY, cn.DLManagedTensor)):
        if cn._api.PyCapsule_IsValid(cap, name):
            addr = cn._api.PyCapsule_GetPointer(cap, name)
            ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
            ctypes.pythonapi.PyCapsule_SetName(cap, used)
            m = ctypes.cast(addr, ctypes.POINTER(cls)).contents
            return m, addr
    raise AssertionError("not a DLPack capsule")


# ---- wrap() and the recogniser -------------------------------------------------------------------------------


def test_wrap_cuda_array_interface_is_zero_copy():
    a = np.arange(48, dtype=np.uint16).reshape(6, 8)
    t = interop.wrap(FakeDevice(a, stream=0x55))
    assert isinstance(t, CUDATensor) and t.memory_type is MemoryType.CUDA
    assert t.ptr == a.ctypes.data and t.handle("cuda_ptr") == a.ctypes.data
    assert t.shape == (6, 8) and t.dtype == np.uint16 and t.strides == (16, 2)
    assert t.stream == 0x55 and t.writable
    assert t.context == CUDAContext.get(0) == interop.Context.default(MemoryType.CUDA)


def test_wrap_readonly_and_nothing_pending():
    t = interop.wrap(FakeDevice(np.zeros((2, 2), np.uint8), stream=None, readonly=True))
    assert not t.writable and t.stream is None
    assert t.__cuda_array_interface__["data"][1] is True


def test_wrap_dlpack_only_producer_reads_its_capsule():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, :3]

    class PlaneLike:  # like av.VideoPlane: DLPack only, stream must be None
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, *, stream=None):
            if stream is not None:
                raise NotImplementedError("stream must be None")
            return cn.make_capsule(a.ctypes.data, a.shape, a.strides, a.dtype, (2, 0), a, versioned=False)

    before = cn.live_capsules()
    p = PlaneLike()
    t = interop.wrap(p)
    assert isinstance(t, CUDATensor) and t.native is p
    assert t.ptr == a.ctypes.data and t.shape == (3, 3) and t.strides == (16, 4) and t.stream == 1
    assert cn.live_capsules() == before  # the probe capsule was freed by its destructor


def test_cpu_dlpack_object_of_a_cuda_capable_class_goes_to_cpu():
    class Both:  # torch.Tensor-like class: this object is on the CPU
        __cuda_array_interface__ = property(lambda self: (_ for _ in ()).throw(AttributeError()))

        def __init__(self):
            self.a = np.arange(5.0)

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

    t = interop.wrap(Both())
    assert isinstance(t, CPUTensor) and np.array_equal(np.asarray(t), np.arange(5.0))


def test_unknown_device_is_refused():
    class OpenCLish:
        def __dlpack_device__(self):
            return (4, 0)

        def __dlpack__(self, **kw):
            raise AssertionError

    with pytest.raises(UnsupportedTypeError, match="DLPack device"):
        interop.wrap(OpenCLish())


def test_wrap_with_info_and_format_splits_nv12():
    pitch, w, h = 64, 48, 32
    buf = np.zeros((h * 3 // 2, pitch), np.uint8)
    dev = FakeDevice(buf[:, :w])
    f = interop.wrap(dev, format=FrameFormat.NV12)
    assert f.format is FrameFormat.NV12 and (f.width, f.height) == (w, h) and f.memory_type is MemoryType.CUDA
    y, uv = f[0], f[1]
    assert y.shape == (h, w) and y.strides == (pitch, 1) and y.ptr == buf.ctypes.data
    assert uv.shape == (h // 2, w // 2, 2) and uv.strides == (pitch, 2, 1) and uv.ptr == buf.ctypes.data + h * pitch
    c = f.crop(8, 4, 16, 8)
    assert c[0].ptr == buf.ctypes.data + 4 * pitch + 8 and c[1].ptr == buf.ctypes.data + h * pitch + 2 * pitch + 8


def test_recogniser_imports_no_framework():
    code = ("import sys, numpy as np, interop\n"
            "from tests.support.cuda_fakes import FakeDevice\n"
            "t = interop.wrap(FakeDevice(np.zeros(4, np.uint8)))\n"
            "assert type(t).__name__ == 'CUDATensor'\n"
            "bad = [m for m in ('torch', 'cupy', 'av', 'cv2') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))


# ---- exports ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_export_describes_the_view(versioned):
    a = np.arange(100, dtype=np.uint8).reshape(10, 10)
    t = interop.wrap(FakeDevice(a, stream=None)).region(2, 3, 4, 5)
    cap = t.__dlpack__(max_version=(1, 1) if versioned else None)
    ptr, shape, strides, dtype, device, ro = cn.read_capsule(cap)
    assert ptr == a.ctypes.data + 3 * 10 + 2 and shape == (5, 4) and strides == (10, 1)
    assert dtype == np.uint8 and device == (2, 0) and not ro
    assert cn._api.PyCapsule_IsValid(cap, cn.VERSIONED if versioned else cn.LEGACY)


def test_versioned_capsule_of_a_readonly_tensor_is_flagged():
    t = interop.wrap(FakeDevice(np.zeros((2, 3), np.int32), stream=None, readonly=True))
    assert cn.read_capsule(t.__dlpack__(max_version=(1, 0)))[5] is True
    assert t.__dlpack_device__() == (2, 0)


def test_capsule_lifetime_keeps_the_tensor_and_frees_on_deleter():
    before = cn.live_capsules()
    t = interop.wrap(FakeDevice(np.zeros(8, np.uint8), stream=None))
    cap = t.__dlpack__()
    m, addr = consume(cap)
    del cap
    assert cn.live_capsules() == before + 1  # consumed: the consumer owns it now
    m.deleter(addr)
    assert cn.live_capsules() == before
    caps = [t.__dlpack__(max_version=(1, 0)) for _ in range(50)]
    assert cn.live_capsules() == before + 50
    del caps  # never consumed: the capsule destructor frees them
    assert cn.live_capsules() == before


def test_cuda_array_interface_has_stream_key():
    a = np.zeros((4, 6), np.float32)
    t = interop.wrap(FakeDevice(a, stream=0x77))
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"] == (a.ctypes.data, False) and cai["strides"] == (24, 4)
    assert cai["shape"] == (4, 6) and cai["typestr"] == "<f4" and cai["stream"] == 0x77


def test_export_errors():
    t = interop.wrap(FakeDevice(np.zeros(4, np.uint8), stream=None))
    with pytest.raises(BufferError, match="map"):
        t.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream="s")
    with pytest.raises(interop.InteropError, match="not reachable from the CPU"):
        np.asarray(t)
    t.release()
    with pytest.raises(InvalidTensorError, match="released"):
        t.__dlpack__()
    with pytest.raises(InvalidTensorError):
        CUDATensor(None, TensorInfo((1,)), ptr=-1)


# ---- stream handshake -----------------------------------------------------------------------------------------


def test_stream_handshake_orders_consumer_after_producer(driver):
    t = interop.wrap(FakeDevice(np.zeros(4, np.uint8), stream=0x100))
    t.__dlpack__(stream=0x200)
    assert driver.calls == [("order", 0, 0x100, 0x200)]
    t.__dlpack__(stream=0x100)  # same stream: nothing to do
    t.__dlpack__(stream=-1)  # consumer asked for no ordering
    assert len(driver.calls) == 1
    t.__dlpack__()  # None: the legacy default stream
    assert driver.calls[-1] == ("order", 0, 0x100, 1)


def test_legacy_producer_and_torch_default_consumer_need_no_call(driver):
    # FFmpeg queues on the legacy stream (handle 0 = 1); torch's default stream passes 1.
    t = interop.wrap(FakeDevice(np.zeros(4, np.uint8), stream=1))
    t.__dlpack__(stream=1)
    t.__dlpack__(stream=None)
    nothing = interop.wrap(FakeDevice(np.zeros(4, np.uint8), stream=None))
    nothing.__dlpack__(stream=0x999)
    assert driver.calls == []


def test_stream_handles():
    class TorchStream:
        cuda_stream = 0

    class CupyStream:
        ptr = 0x1234

    assert stream_handle(0) == 1 and stream_handle(None) is None and stream_handle(TorchStream()) == 1
    assert stream_handle(CupyStream()) == 0x1234
    with pytest.raises(UnsupportedTypeError):
        stream_handle("default")
    assert CUDAContext(0, CupyStream()) == CUDAContext.get(0, 0x1234) != CUDAContext.get(0)
    with pytest.raises(UnsupportedTypeError):
        CUDAContext(-1)


def test_rows_of_layouts():
    assert rows_of(TensorInfo((4, 6), np.uint8, (8, 1))) == (4, 6, 8)
    assert rows_of(TensorInfo((4, 3, 2), np.uint8, (16, 2, 1))) == (4, 6, 16)
    assert rows_of(TensorInfo((5,), np.uint16)) == (1, 10, 10)
    assert rows_of(TensorInfo((5,), np.uint16, (6,))) == (5, 2, 6)
    with pytest.raises(InvalidTensorError, match="contiguous"):
        rows_of(TensorInfo((4, 3), np.uint8, (1, 4)))


def test_frame_from_tensor_errors():
    t = interop.wrap(FakeDevice(np.zeros((7, 8), np.uint8), stream=None))
    with pytest.raises(InvalidTensorError, match="H\\*3/2"):
        frame_from_tensor(t, FrameFormat.NV12)


def test_torch_views_refuses_non_cuda():
    from interop.cuda import torch_views

    with pytest.raises(UnsupportedTypeError, match="MemoryType.CUDA"):
        torch_views(interop.wrap(np.zeros(3)))


def test_doctor_row_names_cuda():
    from interop.tensors.cuda import _probe

    rows = _probe()
    assert rows[0].name == "CUDA" and rows[0].tier == "B"
    assert rows[0].available or rows[0].reason


# ---- on the GPU ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_torch_round_trip_is_pointer_identical_and_shares_writes():
    torch = need_module("torch", "cuda")
    x = torch.arange(64 * 80, dtype=torch.uint8, device="cuda").reshape(64, 80)[:, :50]
    t = interop.wrap(x)
    assert isinstance(t, CUDATensor) and t.native is x and t.ptr == x.data_ptr() and t.strides == (80, 1)
    y = torch.from_dlpack(t)  # torch passes its stream: the handshake is ours
    assert y.data_ptr() == x.data_ptr() and y.stride() == x.stride()
    y[3, 4] = 7
    torch.cuda.synchronize()
    assert int(x[3, 4]) == 7
    r = torch.from_dlpack(t.region(10, 5, 20, 30))
    assert r.data_ptr() == x.data_ptr() + 5 * 80 + 10 and r.shape == (30, 20)


@pytest.mark.gpu
def test_torch_views_of_a_frame_are_pointer_identical():
    torch = need_module("torch", "cuda")
    from interop.cuda import torch_views

    buf = torch.zeros(96, 128, dtype=torch.uint8, device="cuda")[:, :100]
    f = interop.wrap(buf, format=FrameFormat.NV12)
    y, uv = torch_views(f)
    assert y.data_ptr() == buf.data_ptr() and uv.data_ptr() == buf.data_ptr() + 64 * 128
    assert y.shape == (64, 100) and uv.shape == (32, 50, 2) and uv.stride() == (128, 2, 1)
    with torch.cuda.stream(torch.cuda.Stream()):
        (z,) = torch_views(f[0])
    assert z.data_ptr() == buf.data_ptr()


@pytest.mark.gpu
def test_readonly_decoded_style_tensor_still_reaches_torch():
    torch = need_module("torch", "cuda")
    x = torch.zeros(16, dtype=torch.float32, device="cuda")
    t = CUDATensor(x, TensorInfo((16,), np.float32), ptr=x.data_ptr(), stream=1, writable=False)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()


@pytest.mark.gpu
def test_cupy_takes_both_interfaces():
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(30, dtype=cupy.float32).reshape(5, 6)
    t = interop.wrap(x)
    assert t.ptr == x.data.ptr
    a = cupy.asarray(t)  # __cuda_array_interface__
    b = cupy.from_dlpack(t)
    assert a.data.ptr == b.data.ptr == x.data.ptr
    b[0, 0] = 42
    assert float(x[0, 0]) == 42


@pytest.mark.gpu
def test_handshake_orders_a_side_stream_consumer():
    torch = need_module("torch", "cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):
        a = torch.randn(2048, 2048, device="cuda")
        for _ in range(20):  # keep the producer busy so an unordered read would see a stale buffer
            a = a @ a / a.norm()
        out = torch.full((1 << 24,), 3.0, device="cuda")
    t = CUDATensor(out, TensorInfo((1 << 24,), np.float32), ptr=out.data_ptr(), stream=producer)
    with torch.cuda.stream(consumer):
        v = torch.from_dlpack(t).sum()
    consumer.synchronize()
    assert float(v) == 3.0 * (1 << 24)


# ---- plane bounds (frame_from_tensor, _view) ----------------------------------------------------------------


def test_last_plane_past_the_buffer_is_refused():
    t = CUDATensor(None, TensorInfo((8, 100), np.uint8), ptr=0x10000)
    # NV12 100x6 needs 6 + 3 = 9 rows: the UV plane would end a row past the 8-row buffer
    with pytest.raises(InvalidTensorError, match="needs"):
        frame_from_tensor(t, FrameFormat.NV12, width=100, height=6)


def test_exact_and_pitched_buffers_still_split():
    t = CUDATensor(None, TensorInfo((9, 100), np.uint8), ptr=0x10000)
    f = frame_from_tensor(t, FrameFormat.NV12, width=100, height=6)
    assert [p.ptr - 0x10000 for p in f] == [0, 600] and f[1].shape == (3, 50, 2)
    # a pitched (H*3/2, W) view: the last row ends short of a full pitch, which is fine
    p = CUDATensor(None, TensorInfo((9, 100), np.uint8, (128, 1)), ptr=0x20000)
    g = frame_from_tensor(p, FrameFormat.NV12)
    assert [q.ptr - 0x20000 for q in g] == [0, 6 * 128] and g[1].strides == (128, 2, 1)


def test_view_bounds_are_checked():
    t = CUDATensor(None, TensorInfo((8, 100), np.uint8), ptr=0x10000)
    assert t._view(100, TensorInfo((7, 100), np.uint8)).ptr == 0x10000 + 100
    with pytest.raises(InvalidTensorError):
        t._view(101, TensorInfo((7, 100), np.uint8))
    with pytest.raises(InvalidTensorError):
        t._view(-1, TensorInfo((1, 10), np.uint8))
    t.release()
    with pytest.raises(InvalidTensorError, match="released"):
        t._view(0, TensorInfo((1, 10), np.uint8))
