"""GPU pre-processing for a model on the host (``interop run --nvdec``, ``Inference.gpu_preprocess``).

On every machine: the kernel's arithmetic (``reference``, what the GPU tests hold the kernel to) gives the detections
of the naive CPU path; an Inference routes CUDA frames through the kernel (a stand-in CuPy whose kernel runs
``reference`` on the launch's own arguments, over host memory that plays the GPU's) into the network without a
copy; bad inputs and options are refused with advice. Marked gpu: the real kernel on NVDEC frames.
"""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from interop import FrameFormat, MemoryType
from interop.errors import (
    BackendUnavailableError,
    InvalidTensorError,
    StateError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from interop.inference import _cuda_preprocess as cp
from interop.inference._cuda_preprocess import GPUInput, Target, constants, reference
from interop.inference._preprocess import color_matrix
from interop.tensors.cuda import frame_from_tensor
from tests.support.cuda_fakes import FakeDevice, fake_driver_installed
from tests.support.requirements import need_module

MAD_MAX = 0.02
IOU_MIN = 0.8


# ---- the arithmetic --------------------------------------------------------------------------------------------


def test_constants_are_the_colour_matrix_then_mean_and_inverse_scale() -> None:
    t = Target(8, 8, mean=(1.0, 2.0, 3.0), scale=(2.0, 4.0, 8.0), rgb=False)
    k = constants(FrameFormat.NV12, None, None, t)
    w, b = color_matrix("yuv", None, None, False)
    assert k.dtype == np.float32 and k.shape == (18,)
    np.testing.assert_allclose(k[:9], w.reshape(9))
    np.testing.assert_allclose(k[9:12], b)
    np.testing.assert_allclose(k[12:15], [1, 2, 3])
    np.testing.assert_allclose(k[15:18], [0.5, 0.25, 0.125])
    k10 = constants(FrameFormat.P010, None, None, t)  # 10 bits in the high bits of 16: stored values / 256
    np.testing.assert_allclose(k10[:9], k[:9] / 256, rtol=1e-6)
    one = constants(FrameFormat.NV12, None, None, Target(8, 8, mean=(5.0,), scale=(2.0,)))
    np.testing.assert_allclose(one[12:], [5, 5, 5, 0.5, 0.5, 0.5])


@pytest.mark.parametrize("mean, scale", [((1.0, 2.0), None), (None, (1.0, 0.0, 1.0)), ((1.0,) * 4, None)])
def test_constants_refuse_means_and_scales_the_kernel_cannot_apply(mean: Any, scale: Any) -> None:
    with pytest.raises(InvalidTensorError, match="mean/scale|scale"):
        constants(FrameFormat.NV12, None, None, Target(8, 8, mean=mean, scale=scale))


def _nv12_of(vf: Any) -> tuple[np.ndarray, np.ndarray]:
    """A decoded yuv420p frame's planes as NV12 (Y at the decoder's pitch; U and V interleaved: a test-side copy)."""
    y = np.frombuffer(vf.planes[0], np.uint8).reshape(-1, vf.planes[0].line_size)
    u, v = (np.frombuffer(p, np.uint8).reshape(-1, p.line_size) for p in vf.planes[1:3])
    return y, np.stack([u, v], -1)


def _detector(size: tuple[int, int]) -> Any:
    from interop import textdet

    try:
        path = textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")
    return interop.Inference(path, "CPU", input_size=size, mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB,
                             config={"INFERENCE_PRECISION_HINT": "f32"})


def _assert_same_detections(out: np.ndarray, ref: np.ndarray, w: int, h: int) -> None:
    from interop import textdet

    mad = float(np.abs(out - ref).mean())
    assert mad <= MAD_MAX, mad
    got, want = textdet.boxes_from_map(out, w, h), textdet.boxes_from_map(ref, w, h)
    assert len(got) == len(want) >= 3, ([b.bbox for b in got], [b.bbox for b in want])
    for b in want:
        assert max(textdet.iou(b, g) for g in got) >= IOU_MIN, b.bbox


@pytest.mark.parametrize("clip", ["bundled", "odd854"])
def test_the_kernels_arithmetic_gives_the_naive_paths_detections(clip: str, tmp_path: Any) -> None:
    need_module("av")
    need_module("cv2")
    need_module("openvino")
    import av

    from interop import textdet
    from interop.clip import default_clip, make_clip
    from tests.test_accuracy import naive_input

    path = default_clip() if clip == "bundled" else make_clip(str(tmp_path / "odd.mp4"), 854, 480, frames=3,
                                                              preset="ultrafast")
    with av.open(path) as c:
        vf = next(c.decode(video=0))
    w, h = vf.width, vf.height
    size = textdet.input_size_for(w, h)
    y, uv = _nv12_of(vf)
    if clip == "odd854":
        assert y.shape[1] > w  # padded rows: the reference reads the visible part at the decoder's pitch
    t = Target(size[1], size[0], mean=(textdet.MEAN,), scale=(textdet.SCALE,), rgb=textdet.RGB)
    x = np.ascontiguousarray(reference(y, uv, w, h, constants(FrameFormat.NV12, None, None, t), t), np.float32)
    inf = _detector(size)
    try:
        got = next(iter(inf.infer(x).values()))
        ref = next(iter(inf.infer(naive_input(vf, size)).values()))
    finally:
        inf.close()
    _assert_same_detections(got, ref, w, h)


# ---- the route through Inference, with a stand-in for CuPy --------------------------------------------------------


def _host(addr: int, nbytes: int, dtype: Any) -> np.ndarray:
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), np.uint8).view(dtype)


class _Kernel:
    """CuPy's RawKernel as the launch sees it: the source's pixel type, then ``reference`` run on the arguments."""

    launches: list[tuple[Any, ...]] = []

    fail: BaseException | None = None  # raised by the launch, as CuPy's own errors are

    def __init__(self, source: str, name: str):
        assert name == "to_tensor"
        self.dtype = np.uint16 if "const unsigned short*" in source else np.uint8

    def compile(self) -> None:
        pass

    def __call__(self, grid: tuple[int, int], block: tuple[int, int], args: tuple[Any, ...], stream: Any = None):
        if _Kernel.fail is not None:
            raise _Kernel.fail
        y_addr, y_pitch, uv_addr, uv_pitch, w, h, out_addr, ow, oh, nhwc, k = args
        assert grid[0] * block[0] >= ow and grid[1] * block[1] >= oh
        it = np.dtype(self.dtype).itemsize
        ch = (int(h) + 1) // 2
        y = _host(int(y_addr), int(y_pitch) * int(h) * it, self.dtype).reshape(int(h), int(y_pitch))
        uv = _host(int(uv_addr), int(uv_pitch) * ch * it, self.dtype).reshape(ch, int(uv_pitch) // 2, 2)
        t = Target(int(oh), int(ow), bool(nhwc))
        out = _host(int(out_addr), 4 * 3 * int(ow) * int(oh), np.float32).reshape(t.shape)
        out[...] = reference(y, uv, int(w), int(h), np.asarray(k), t)
        _Kernel.launches.append((int(y_addr), int(uv_addr), int(out_addr), stream))


class _Event:
    def __init__(self, block: bool = False, disable_timing: bool = False):
        assert block  # a blocking-sync event: the thread that waits sleeps
        self.done = False
        self.waits = 0

    def record(self, stream: Any) -> None:
        pass

    def synchronize(self) -> None:
        self.waits += 1
        self.done = True


class _Device:
    def __init__(self, device: int):
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _fake_cupy() -> types.ModuleType:
    m = types.ModuleType("cupy")
    m.RawKernel = _Kernel  # type: ignore[attr-defined]
    m.asarray = np.asarray  # type: ignore[attr-defined]
    m.cuda = types.SimpleNamespace(Device=_Device, Event=_Event,  # type: ignore[attr-defined]
                                   ExternalStream=lambda handle, device: ("stream", handle, device))
    return m


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """CuPy and the CUDA driver stood in for by host memory; the process's host buffers emptied (they would point
    into this test's fake driver)."""
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(cp, "_buffers", {})
    monkeypatch.setattr(cp, "_holders", {})
    _Kernel.launches = []
    _Kernel.fail = None
    with fake_driver_installed(monkeypatch) as d:
        yield d


def _cuda_nv12(w: int, h: int, pitch: int, seed: int = 0) -> tuple[Any, np.ndarray]:
    """A CUDA Frame (NV12 at ``pitch``) over host memory, and that memory."""
    rng = np.random.default_rng(seed)
    buf = rng.integers(16, 236, (h + (h + 1) // 2, pitch), dtype=np.uint8)
    return frame_from_tensor(interop.wrap(FakeDevice(buf)), FrameFormat.NV12, w, h), buf


def _tiny_model(nhwc: bool = False, dtype: str = "f32") -> Any:
    ov = need_module("openvino")
    import openvino.opset13 as ops

    et = ov.Type.f32 if dtype == "f32" else ov.Type.u8
    shape = [1, -1, -1, 3] if nhwc else [1, 3, -1, -1]
    p = ops.parameter(ov.PartialShape(shape), et, name="image")
    x = p if dtype == "f32" else ops.convert(p, ov.Type.f32)
    return ov.Model([ops.multiply(x, np.float32(2.0))], [p], "tiny")


def test_a_cuda_frame_goes_through_the_kernel_into_the_network_without_a_copy(fake_gpu: Any) -> None:
    f, buf = _cuda_nv12(70, 45, 96)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(32, 24), mean=(10.0, 20.0, 30.0), scale=4.0,
                            rgb=False)
    try:
        with interop.copy_meter() as m:
            gi = inf.gpu_preprocess(f)
            assert isinstance(gi, GPUInput) and gi.array.shape == (1, 3, 24, 32) and gi.array.dtype == np.float32
            y_addr, uv_addr, out_addr, stream = _Kernel.launches[-1]
            assert y_addr == buf.ctypes.data and uv_addr == buf.ctypes.data + 45 * 96  # the planes, read in place
            assert out_addr == gi.array.ctypes.data and stream == ("stream", 1, 0)  # the producer's stream
            v, nats, keep = inf._gpu_inputs(gi)
            assert nats[0].data.ctypes.data == gi.array.ctypes.data  # the request reads the kernel's output itself
            got = next(iter(inf.infer(f).values()))
        assert m.copies == 0 and m.bytes == 0, m.records
        t = Target(24, 32, mean=(10.0, 20.0, 30.0), scale=(4.0,), rgb=False)
        want = reference(buf[:45], buf[45:].reshape(23, 48, 2), 70, 45, constants(FrameFormat.NV12, None, None, t), t)
        np.testing.assert_allclose(got, 2 * want, rtol=1e-5, atol=1e-4)
    finally:
        inf.close()


@contextmanager
def _one_input() -> Iterator[tuple[Any, GPUInput, Any]]:
    """An Inference of the tiny model, a GPUInput it made from a 32x16 CUDA frame, and the frame."""
    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    try:
        yield inf, inf.gpu_preprocess(f), f
    finally:
        inf.close()


def test_gpu_inputs_wait_for_the_kernel_before_a_request_reads_them_and_only_then_free_the_frame(fake_gpu: Any) -> None:
    with _one_input() as (inf, gi, f):
        done = gi._done
        assert done is not None and done.waits == 0 and gi._frame is f  # the kernel may still read the frame
        inf.infer_async(gi)
        inf.wait_all()
        assert done.waits == 1 and gi._done is None and gi._frame is None


def test_an_nhwc_model_gets_an_nhwc_input(fake_gpu: Any) -> None:
    f, buf = _cuda_nv12(40, 20, 64)
    inf = interop.Inference(_tiny_model(nhwc=True), "CPU", input_size=(20, 10))
    try:
        gi = inf.gpu_preprocess(f)
        assert gi.array.shape == (1, 10, 20, 3)
        out = next(iter(inf.infer(gi).values()))
        t = Target(10, 20, nhwc=True)
        np.testing.assert_allclose(out, 2 * reference(buf[:20], buf[20:].reshape(10, 32, 2), 40, 20,
                                                      constants(FrameFormat.NV12, None, None, t), t), rtol=1e-5)
    finally:
        inf.close()


def test_p010_frames_are_read_as_16_bit_samples_at_their_pitch(fake_gpu: Any) -> None:
    rng = np.random.default_rng(1)
    buf = (rng.integers(64, 940, (24, 64), dtype=np.uint16) << 6).astype(np.uint16)  # 10 bits in the high bits
    f = frame_from_tensor(interop.wrap(FakeDevice(buf)), FrameFormat.P010, 40, 16)
    assert f.format is FrameFormat.P010 and f.tensors[0].info.strides[0] == 128  # bytes; the kernel gets 64 samples
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(20, 8))
    try:
        out = next(iter(inf.infer(f).values()))
    finally:
        inf.close()
    t = Target(8, 20)
    want = reference(buf[:16], buf[16:].reshape(8, 32, 2), 40, 16, constants(FrameFormat.P010, None, None, t), t)
    np.testing.assert_allclose(out, 2 * want, rtol=1e-5, atol=1e-4)
    assert ((want > 0) & (want < 255)).mean() > 0.5  # 16-bit samples scaled to 8-bit levels (bytes would clip)


def test_host_buffers_are_reused_once_their_last_view_is_gone(fake_gpu: Any) -> None:
    b = cp.host_buffers(0, 4096)
    b.reserve(3)
    assert b.allocated == 3 and fake_gpu.count("host_alloc") == 3
    a = b.take()
    ptr = a.ctypes.data
    del a
    again = b.take()
    assert again.ctypes.data == ptr and b.allocated == 3
    held = [b.take() for _ in range(3)]  # more than reserved: one more is allocated
    assert b.allocated == 4 and len({h.ctypes.data for h in held + [again]}) == 4


def test_buffers_of_sizes_no_longer_used_are_freed(fake_gpu: Any) -> None:
    first = cp.host_buffers(0, 1000)
    first.reserve(2)
    out = first.take()
    for n in range(1, cp.SIZES_KEPT):
        cp.host_buffers(0, 1000 + n)
    assert not first.retired and fake_gpu.count("host_free") == 0
    cp.host_buffers(0, 5000)  # one size more than are kept: the oldest goes
    assert first.retired and fake_gpu.count("host_free") == 1  # its free buffer now
    del out
    assert fake_gpu.count("host_free") == 2 and first.allocated == 0  # the one out, as it comes back
    assert cp.host_buffers(0, 1000) is not first and len(cp._buffers) == cp.SIZES_KEPT


def test_a_gpu_input_feeds_only_the_inference_that_made_it(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    a = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8), mean=100.0)
    b = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    try:
        gi = a.gpu_preprocess(f)
        with pytest.raises(InvalidTensorError, match="another Inference"):
            b.infer(gi)
        assert gi._done is None  # waited for all the same: its buffer and frame are free to go
        a.infer(gi)
    finally:
        a.close()
        b.close()


def test_cupy_errors_become_one_typed_error_with_advice(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    _Kernel.fail = RuntimeError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")  # a CuPy for another CUDA than the driver's
    try:
        with pytest.raises(BackendUnavailableError, match="cupy-cudaXX") as e:
            inf.infer(f)
        assert "UNSUPPORTED_PTX" in str(e.value) and "--nvdec" in str(e.value)
    finally:
        inf.close()


def test_refusals_say_what_to_do(fake_gpu: Any) -> None:
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    try:
        with pytest.raises(UnsupportedTypeError, match="CUDA frame"):
            inf.gpu_preprocess(np.zeros((8, 8), np.uint8))
        i420 = frame_from_tensor(interop.wrap(FakeDevice(np.zeros((24, 16), np.uint8))), FrameFormat.I420, 16, 16)
        with pytest.raises(UnsupportedFormatError, match="NV12, P010"):
            inf.gpu_preprocess(i420)
    finally:
        inf.close()
    f, _ = _cuda_nv12(32, 16, 32)
    u8 = interop.Inference(_tiny_model(dtype="u8"), "CPU", input_size=(16, 8))
    try:
        with pytest.raises(UnsupportedFormatError, match="f32"):
            u8.gpu_preprocess(f)
    finally:
        u8.close()
    with pytest.raises(StateError):
        inf.gpu_preprocess(f)
    gray = interop.Inference(_model_of([1, 1, -1, -1]), "CPU", input_size=(16, 8))
    try:
        with pytest.raises(UnsupportedFormatError, match="3 colour channels.*leave --nvdec out"):
            gray.gpu_preprocess(f)
        assert not _Kernel.launches  # refused before the kernel ran
    finally:
        gray.close()


def test_without_cupy_the_error_names_the_package(monkeypatch: pytest.MonkeyPatch, fake_gpu: Any) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    try:
        with pytest.raises(BackendUnavailableError, match="pip install cupy"):
            inf.gpu_preprocess(f)
    finally:
        inf.close()


# ---- the run's thread that prepares frames ahead -------------------------------------------------------------


def test_ahead_hands_over_pairs_in_order_then_ends() -> None:
    from interop.pipeline import _Ahead

    a = _Ahead(iter(range(20)), lambda x: x * 10)
    a.start()

    assert list(a) == [(i, i * 10) for i in range(20)]
    a.close()


def test_ahead_raises_the_workers_error_in_the_loop() -> None:
    from interop.pipeline import _Ahead

    def frames() -> Any:
        yield 1
        raise UnsupportedFormatError("yuv444 cannot")

    a = _Ahead(frames(), lambda x: x)
    a.start()

    assert next(a) == (1, 1)
    with pytest.raises(UnsupportedFormatError, match="yuv444"):
        next(a)
    with pytest.raises(StopIteration):
        next(a)
    a.close()


def test_ahead_stops_at_its_limit_and_first_waits_for_the_first_pair() -> None:
    from interop.pipeline import _Ahead

    made: list[int] = []
    a = _Ahead(iter(range(100)), lambda x: made.append(x) or x, limit=5)
    a.start()
    a.first()
    assert made[:1] == [0]
    assert [x for x, _ in a] == [0, 1, 2, 3, 4]
    a._thread.join(5)
    assert made == [0, 1, 2, 3, 4] and not a._thread.is_alive()  # nothing prepared past the run's frames
    a.close()
    empty = _Ahead(iter(()), lambda x: x)
    empty.start()
    empty.first()  # no frame at all: the loop's first next() ends it
    assert list(empty) == []
    empty.close()


def test_ahead_close_waits_for_the_gpu_on_what_it_drops() -> None:
    from interop.pipeline import _Ahead

    class Input:
        waited = 0

        def wait(self) -> None:
            Input.waited += 1

    a = _Ahead(iter(range(3)), lambda x: Input())
    a.start()

    a.first()
    a._thread.join(5)
    a.close()
    assert Input.waited == 3  # the first, kept for the loop's first next(), and the two still queued


def test_nvdec_decoding_refused_before_any_frame_is_not_called_damage() -> None:
    av = need_module("av")
    from types import SimpleNamespace

    from interop.pipeline import _Decoded

    def refused() -> Any:
        raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")

    packets = [SimpleNamespace(pts=i, decode=refused) for i in range(3)]
    container = SimpleNamespace(demux=lambda s: iter(packets))
    stream = SimpleNamespace(codec_context=SimpleNamespace(name="h264"))
    with pytest.raises(UnsupportedFormatError, match="NVDEC cannot decode this h264 stream.*leave --nvdec out"):
        list(_Decoded(container, stream, nvdec=True))
    d = _Decoded(container, stream)  # decoding on the CPU: damaged packets, counted and skipped
    assert list(d) == [] and d.errors == 3


def test_ahead_close_stops_a_worker_that_waits_on_a_full_queue() -> None:
    from interop.pipeline import _Ahead

    made: queue.Queue[int] = queue.Queue()

    def frames() -> Any:
        i = 0
        while True:
            made.put(i)
            yield i
            i += 1

    a = _Ahead(frames(), lambda x: x)
    a.start()

    next(a)
    while made.qsize() < _Ahead.DEPTH + 1:  # the queue is full: the worker waits to put
        threading.Event().wait(0.01)
    a.close()
    assert not a._thread.is_alive() and a._q.empty()


# ---- the command line ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["a.mp4", "b.mp4"], "one input"),
    (["a.mp4", "--decode", "processes"], "one input"),
])
def test_nvdec_with_several_inputs_is_a_usage_error(argv: list[str], says: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from interop import cli

    code = cli.main(["run", "--nvdec", *argv])
    err = capsys.readouterr().err
    assert code == 1 and "RunArgumentError" in err and "--nvdec" in err and says in err, err


def test_nvdec_with_a_gstreamer_input_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from interop import cli

    code = cli.main(["run", "--nvdec", "gst:videotestsrc ! appsink"])
    err = capsys.readouterr().err
    assert code == 1 and "RunArgumentError" in err and "gst:" in err, err


def test_nvdec_without_a_gpu_says_to_leave_it_out(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("av")
    from interop import cli
    from interop.native import cuda_driver as cd

    def no_driver() -> Any:
        raise BackendUnavailableError("the CUDA backend needs an NVIDIA driver (libcuda.so.1 was not found)",
                                      backend="cuda")

    monkeypatch.setattr(cd, "driver", no_driver)
    monkeypatch.setattr("interop.cuda.driver", no_driver, raising=False)
    code = cli.main(["run", "--nvdec", "--frames", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code != 0 and "NVIDIA" in err and "leave it out" in err, err


# ---- on the GPU ------------------------------------------------------------------------------------------------


def _nvdec_or_skip() -> None:
    need_module("av")
    need_module("cupy", "cuda")
    need_module("openvino")


@pytest.mark.gpu
def test_the_kernel_computes_the_reference_on_nvdec_frames() -> None:
    _nvdec_or_skip()
    from interop.clip import default_clip
    from interop.cuda import open_nvdec
    from interop.inference._cuda_preprocess import GPUPreprocess

    g = GPUPreprocess()
    for t in (Target(544, 960, mean=(127.5,), scale=(127.5,), rgb=False), Target(101, 203, nhwc=True)):
        with open_nvdec(default_clip()) as c:
            for i, vf in enumerate(c.decode(video=0)):
                f = interop.map(vf, MemoryType.CUDA)
                g.check(f)
                with interop.copy_meter() as m:
                    gi = g.run(f, t)
                    gi.wait()
                assert m.copies == 0
                host = interop.map(vf, MemoryType.CPU, allow_copy=True)  # the test's own look at the planes
                ref = reference(np.asarray(host.tensors[0]), np.asarray(host.tensors[1]), f.width, f.height,
                                constants(f.format, f.colorspace, f.color_range, t), t)
                assert gi.array.shape == t.shape
                scale = 1.0 if t.scale is None else t.scale[0]  # f32 on the GPU: a hundredth of a pixel level
                np.testing.assert_allclose(gi.array, ref, rtol=0, atol=0.01 / scale)
                if i == 2:
                    break


@pytest.mark.gpu
def test_nvdec_run_gives_the_cpu_runs_detections_with_no_copy() -> None:
    _nvdec_or_skip()
    from interop import textdet
    from interop.clip import default_clip
    from interop.pipeline import run

    path = default_clip()
    gpu = run(path, None, "CPU", 30, "f32", nvdec=True)
    cpu = run(path, None, "CPU", 30, "f32")
    assert gpu.copies == 0 and gpu.frames == cpu.frames == 30
    for i in range(30):
        want, got = cpu.boxes.get(i, []), gpu.boxes.get(i, [])
        assert len(got) == len(want) >= 3, i
        for b in want:
            assert max(textdet.iou(b, g) for g in got) >= IOU_MIN, (i, b.bbox)


@pytest.mark.gpu
def test_nvdec_frames_give_the_naive_paths_output_maps() -> None:
    _nvdec_or_skip()
    import av

    from interop import textdet
    from interop.clip import default_clip
    from interop.cuda import open_nvdec
    from tests.test_accuracy import naive_input

    path = default_clip()
    with av.open(path) as c:
        soft = [vf for _, vf in zip(range(8), c.decode(video=0))]
    w, h = soft[0].width, soft[0].height
    size = textdet.input_size_for(w, h)
    inf = _detector(size)
    try:
        with open_nvdec(path) as c:
            for i, vf in zip(range(8), c.decode(video=0)):
                with interop.copy_meter() as m:
                    got = next(iter(inf.infer(vf).values()))
                assert m.copies == 0
                ref = next(iter(inf.infer(naive_input(soft[i], size)).values()))
                _assert_same_detections(got, ref, w, h)
    finally:
        inf.close()


def test_a_driver_that_sees_no_gpu_is_an_unavailable_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from interop.native import cuda_driver as cd

    class Lib:  # libcuda.so.1 present, no device visible (a container started without its GPUs)
        def __getattr__(self, name: str) -> Any:
            def call(*a: Any) -> int:
                return 100 if name == "cuInit" else 0

            setattr(self, name, call)
            return call

    monkeypatch.setattr(cd.ctypes, "CDLL", lambda name: Lib())
    with pytest.raises(BackendUnavailableError, match="no usable GPU.*CUresult 100"):
        cd.Driver()


# ---- a second review's findings --------------------------------------------------------------------------------


def test_ahead_closes_when_its_thread_never_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from interop.pipeline import _Ahead

    a = _Ahead(iter(range(3)), lambda x: x)
    a.close()  # never started: nothing to wait for
    b = _Ahead(iter(range(3)), lambda x: x)
    monkeypatch.setattr(_Ahead, "NEVER_STARTED_S", 0.1)
    b._launched = time.monotonic()  # start() was called and interrupted before the thread ran
    t0 = time.monotonic()
    b.close()
    assert time.monotonic() - t0 < 5


def test_ahead_close_goes_on_past_a_failed_kernel_and_waits_for_every_input(caplog: pytest.LogCaptureFixture) -> None:
    from interop.pipeline import _Ahead

    class Input:
        waited = 0

        def wait(self) -> None:
            Input.waited += 1
            raise BackendUnavailableError("the GPU pre-processing kernel failed", backend="cuda")

    a = _Ahead(iter(range(3)), lambda x: Input())
    a.start()
    a.first()
    a._thread.join(5)
    a.close()
    assert Input.waited == 3 and "kernel failed" in caplog.text


def test_a_run_that_fails_while_it_sets_up_closes_its_input(monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("av")
    need_module("openvino")
    from interop import pipeline
    from interop.clip import default_clip

    closed: list[int] = []
    real_close = pipeline._Input.close

    def close(self: Any) -> None:
        closed.append(1)
        real_close(self)

    def no_worker(*a: Any, **k: Any) -> Any:
        raise RuntimeError("no result thread")

    monkeypatch.setattr(pipeline._Input, "close", close)
    monkeypatch.setattr(pipeline, "_ResultWorker", no_worker)
    _detector((64, 64)).close()  # skips without the model
    with pytest.raises(RuntimeError, match="no result thread"):
        pipeline.run(default_clip(), frames=2)
    assert closed


def test_an_unwaited_gpu_input_waits_for_its_kernel_when_dropped(fake_gpu: Any) -> None:
    with _one_input() as (inf, gi, f):
        done = gi._done
        del gi  # a run stopped early: the buffer and the frame go back only once the kernel ended
        assert done.waits == 1


def test_a_kernel_that_fails_after_its_launch_is_a_typed_error(fake_gpu: Any) -> None:
    def lost() -> None:
        raise RuntimeError("cudaErrorIllegalAddress")

    with _one_input() as (inf, gi, f):
        gi._done.synchronize = lost
        with pytest.raises(BackendUnavailableError, match="IllegalAddress.*without --nvdec"):
            inf.infer(gi)
        gi._done = None


def test_host_buffer_sizes_are_kept_by_last_use_and_a_retired_pool_reserves_nothing(fake_gpu: Any) -> None:
    pools = [cp.host_buffers(0, 100 * (n + 1)) for n in range(cp.SIZES_KEPT)]
    assert cp.host_buffers(0, 100) is pools[0]  # used again: now the most recent
    cp.host_buffers(0, 9999)
    assert not pools[0].retired and pools[1].retired
    pools[1].reserve(5)
    assert pools[1].allocated == 0 and fake_gpu.count("host_alloc") == 0


def test_a_damaged_first_packet_is_damage_and_a_stream_nvdec_refuses_is_not() -> None:
    av = need_module("av")
    from types import SimpleNamespace

    from interop.pipeline import _Decoded

    def refused() -> Any:
        raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")

    stream = SimpleNamespace(codec_context=SimpleNamespace(name="h264"))
    damaged_first = [SimpleNamespace(pts=0, decode=refused)] + [SimpleNamespace(pts=i, decode=lambda: ["frame"])
                                                               for i in range(1, 4)]
    d = _Decoded(SimpleNamespace(demux=lambda s: iter(damaged_first)), stream, nvdec=True)
    assert list(d) == ["frame"] * 3 and d.errors == 1
    endless = (SimpleNamespace(pts=i, decode=refused) for i in range(10_000))
    with pytest.raises(UnsupportedFormatError, match="every packet"):
        list(_Decoded(SimpleNamespace(demux=lambda s: endless), stream, nvdec=True))
    assert next(endless).pts == _Decoded.NVDEC_REFUSED  # gave up after that many, not at the end of the file


def test_nvdec_runs_on_the_cpu_unless_told_and_never_on_the_npu() -> None:
    from interop.pipeline import RunArgumentError, _nvdec_device

    assert _nvdec_device(None) == "CPU" and _nvdec_device("GPU.0") == "GPU.0"
    for fine in ("AUTO", "AUTO:-NPU", "AUTO:GPU,-NPU", "HETERO:GPU,CPU"):  # lists that leave the NPU out
        assert _nvdec_device(fine) == fine
    for npu in ("NPU", "npu.0", "AUTO:NPU,CPU", "HETERO:NPU,CPU", "MULTI:CPU,NPU.1"):
        with pytest.raises(RunArgumentError, match="host memory.*--device CPU"):
            _nvdec_device(npu)


def test_a_pyav_without_cuda_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("av")
    from av.codec import hwaccel

    from interop.clip import default_clip
    from interop.pipeline import _open_nvdec

    monkeypatch.setattr(hwaccel, "hwdevices_available", lambda: ["vaapi"])
    with pytest.raises(BackendUnavailableError, match="no CUDA.*leave --nvdec out"):
        _open_nvdec(default_clip())


# ---- a third review's findings ---------------------------------------------------------------------------------


def _model_of(shape: list[int]) -> Any:
    ov = need_module("openvino")
    import openvino.opset13 as ops

    p = ops.parameter(ov.PartialShape(shape), ov.Type.f32, name="image")
    return ov.Model([ops.multiply(p, np.float32(2.0))], [p], "shaped")


def test_reading_a_gpu_inputs_array_waits_for_its_kernel(fake_gpu: Any) -> None:
    with _one_input() as (inf, gi, f):
        done = gi._done
        assert done.waits == 0
        inf.infer(np.ascontiguousarray(gi.array))  # handed on as a plain array: written first
        assert done.waits == 1 and gi._frame is None


def test_a_model_of_a_fixed_batch_above_one_is_refused_before_the_kernel(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_model_of([2, 3, 8, 16]), "CPU")
    try:
        with pytest.raises(UnsupportedFormatError, match="batch 1.*batches of 2.*leave --nvdec out"):
            inf.gpu_preprocess(f)
        assert not _Kernel.launches
    finally:
        inf.close()


def test_a_model_input_that_is_no_image_is_a_typed_refusal_on_both_paths(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    host = interop.wrap(np.zeros((24, 32), np.uint8), format=FrameFormat.NV12)
    ov = need_module("openvino")
    any_rank = _model_of([1, 3, 8, 16])
    any_rank.get_parameters()[0].set_layout(ov.Layout("NCHW"))
    any_rank.reshape({0: ov.PartialShape.dynamic()})  # a declared layout over a dynamic rank
    for model in (_model_of([3, -1, -1]), any_rank):
        inf = interop.Inference(model, "CPU", input_size=(16, 8))
        try:
            for frame in (f, host):
                with pytest.raises(UnsupportedFormatError, match="rank 4"):
                    inf.infer(frame)
        finally:
            inf.close()


def test_the_json_says_whether_the_run_decoded_on_nvdec() -> None:
    from interop.pipeline import RunResult

    assert RunResult("v", "m", "CPU", 8, 8, None).to_json()["nvdec"] is False
    assert RunResult("v", "m", "CPU", 8, 8, None, nvdec=True).to_json()["nvdec"] is True


# ---- --save with --nvdec ---------------------------------------------------------------------------------------


def test_a_saved_nvdec_frame_keeps_every_pixel_and_its_own_colour_matrix(fake_gpu: Any) -> None:
    cv2 = need_module("cv2")
    from interop import ColorSpace
    from interop.frame import Frame
    from interop.pipeline import cuda_bgr

    f, buf = _cuda_nv12(64, 32, 64, seed=3)
    got = cuda_bgr(f)
    want = cv2.cvtColor(np.ascontiguousarray(buf[:48]), cv2.COLOR_YUV2BGR_NV12)  # BT.601 limited, as OpenCV does
    assert got.shape == (32, 64, 3) and np.abs(got.astype(int) - want).max() <= 2
    odd, _ = _cuda_nv12(63, 31, 64, seed=3)
    assert cuda_bgr(odd).shape == (31, 63, 3)  # the odd edge kept
    hd = Frame(list(f.tensors), FrameFormat.NV12, 64, 32, colorspace=ColorSpace.BT709)
    y, u, v = (float(buf[0, 0]), float(buf[32, 0]), float(buf[32, 1]))
    kr, kb = 0.2126, 0.0722  # BT.709, limited range
    r = 255 / 219 * (y - 16) + 2 * (1 - kr) * 255 / 224 * (v - 128)
    b = 255 / 219 * (y - 16) + 2 * (1 - kb) * 255 / 224 * (u - 128)
    assert abs(int(cuda_bgr(hd)[0, 0, 2]) - np.clip(r, 0, 255)) <= 1 and abs(int(cuda_bgr(hd)[0, 0, 0]) - np.clip(b, 0, 255)) <= 1


def test_pinned_buffers_are_freed_when_the_last_inference_using_their_size_closes(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    a = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    b = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    a.infer(f)
    b.infer(f)
    (size,) = cp._holders
    pool = cp._buffers[size]
    assert cp._holders[size] == 2 and pool.allocated > 0
    a.close()
    assert not pool.retired and fake_gpu.count("host_free") == 0  # b still uses that size
    b.close()
    assert pool.retired and size not in cp._buffers and size not in cp._holders
    assert pool.allocated == 0 and fake_gpu.count("host_free") == fake_gpu.count("host_alloc")


def test_a_size_is_held_before_its_first_buffer_and_never_after_close(fake_gpu: Any) -> None:
    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    inf.gpu_preprocess(f).wait()  # pre-processed, never submitted: its size is held all the same
    assert list(cp._holders.values()) == [1]
    inf.close()
    assert not cp._holders
    inf._gpu_targets.clear()  # a thread past its open check when close ran, reaching a new frame size
    with pytest.raises(StateError):
        inf._hold_gpu_buffers((0, 12345))
    assert not cp._holders
    cp.let_go(0, 999)  # a size nobody holds: nothing happens
    assert not cp._holders


def test_a_close_that_times_out_still_lets_go_of_its_sizes(fake_gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from interop.errors import InteropTimeoutError

    f, _ = _cuda_nv12(32, 16, 32)
    inf = interop.Inference(_tiny_model(), "CPU", input_size=(16, 8))
    inf.infer(f)

    def stuck(*a: Any, **k: Any) -> None:
        raise InteropTimeoutError("requests still running after 60 s")

    monkeypatch.setattr(inf, "_wait_all", stuck)
    inf.close()
    assert not cp._holders
