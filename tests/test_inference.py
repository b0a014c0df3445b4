"""interop.Inference: sync / async / callbacks / wait_all errors / output_bytes / zero-copy inputs / bad inputs.

Most tests use a tiny model built in code (conv 3x3 + mean) so they run in milliseconds; one uses the text detector.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
ov = need_module("openvino")

from interop import InvalidTensorError, MemoryType  # noqa: E402
from interop.clip import make_clip  # noqa: E402
from interop.errors import (  # noqa: E402
    BackendUnavailableError,
    ModelFileError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)

W, H = 64, 48


def tiny_model(h: int | None = H, w: int | None = W) -> ov.Model:
    """BGR NCHW f32 -> conv3x3(4) -> ReLU -> (1, 4, h, w) map and a (1, 4) mean: two named outputs."""
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, h or -1, w or -1], np.float32, name="image")
    wts = ops.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.1)
    y = ops.relu(ops.convolution(x, wts, [1, 1], [1, 1], [1, 1], [1, 1]))
    y.output(0).get_tensor().set_names({"map"})
    m = ops.reduce_mean(y, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    m.output(0).get_tensor().set_names({"mean"})
    return ov.Model([y, m], [x], "tiny")


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list:
    import av

    path = make_clip(str(tmp_path_factory.mktemp("clips") / "small.mp4"), W, H, frames=6, preset="ultrafast")
    with av.open(path) as c:
        return list(c.decode(video=0))


@pytest.fixture(scope="module")
def inf() -> interop.Inference:
    return interop.Inference(tiny_model(), "CPU", rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})


def ov_frame(vf):
    return interop.map(interop.wrap(vf), MemoryType.OPENVINO)


def bgr_input(vf) -> np.ndarray:
    return np.ascontiguousarray(vf.to_ndarray(format="bgr24").astype(np.float32).transpose(2, 0, 1)[None])


def test_infer_frame_matches_cpu_conversion(inf: interop.Inference, frames: list) -> None:
    vf = frames[2]
    out = inf.infer(vf)  # an av.VideoFrame is wrapped and mapped by Inference itself
    assert set(out) == {"map", "mean"} and out["map"].shape == (1, 4, H, W)
    ref = inf.infer(cv2_bgr_input(vf))  # raw tensor path: the same model without pre-processing
    assert np.abs(out["map"] - ref["map"]).max() / np.abs(ref["map"]).max() < 1e-2  # conversions differ by <= 1 level
    assert np.abs(out["mean"] - ref["mean"]).max() / np.abs(ref["mean"]).max() < 1e-3
    # swscale's conversion (to_ndarray) rounds and upsamples chroma differently: close on average
    sws = inf.infer(bgr_input(vf))
    assert np.abs(out["map"] - sws["map"]).mean() / np.abs(sws["map"]).mean() < 0.05


def cv2_bgr_input(vf) -> np.ndarray:
    """OpenCV's I420 -> BGR of the visible planes (the conversion OpenVINO's pre-processing implements)."""
    import cv2

    h, w = vf.height, vf.width
    f = interop.wrap(vf)
    packed = np.concatenate([np.asarray(f[i]).reshape(-1) for i in range(3)]).reshape(h * 3 // 2, w)
    bgr = cv2.cvtColor(packed, cv2.COLOR_YUV2BGR_I420).astype(np.float32).transpose(2, 0, 1)[None]
    return np.ascontiguousarray(bgr)


def test_inputs_alias_decoder_planes_and_nothing_is_copied(inf: interop.Inference, frames: list) -> None:
    vf = frames[1]
    with interop.copy_meter() as m:
        f = ov_frame(vf)
        inf.infer(f)
    assert m.copies == 0 and m.bytes == 0
    v = inf._frame_variant(f.format, [t.shape for t in f.tensors], f.width, f.height)
    reqs = [v.queue[r] for r in range(len(v.queue))] + v.sync_requests  # infer() runs on a request of its own
    ptrs = {tuple(r.get_input_tensor(i).data.ctypes.data for i in range(3)) for r in reqs}
    assert tuple(p.buffer_ptr for p in vf.planes) in ptrs  # the request read the decoder's own memory


def test_decoded_planes_reuse_request_inputs_yet_each_frame_is_read(tmp_path) -> None:
    """Inference keeps one ov.Tensor per decoder buffer (address + layout): a decode loop recycles a few buffers,
    so few are made, and every frame's own pixels are what its request reads (checked against the raw path)."""
    import av

    n = 40
    path = make_clip(str(tmp_path / "loop.mp4"), W, H, frames=n, preset="ultrafast")
    inf = interop.Inference(tiny_model(), "CPU", rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})
    got, ref = [], []
    with av.open(path) as c, interop.copy_meter() as m:
        for vf in c.decode(video=0):  # each frame dropped after use: the decoder's pool hands its buffers out again
            got.append(inf.infer(vf)["mean"])
            own = ov_frame(vf)
            assert [t.native for t in own]  # planes with their own ov.Tensors: Inference feeds those as they are
            ref.append(inf.infer(own)["mean"])
    assert len(got) == n and m.copies == 0
    assert 3 <= inf._plane_inputs.made < 3 * n // 2  # tensors made for recycled buffers, not per plane per frame
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)  # the same model on the same bytes
    assert len({float(g[0, 1]) for g in got}) > n // 2  # frames differ: a stale input would show


def test_a_released_mapping_is_refused_not_fed(inf: interop.Inference, frames: list) -> None:
    f = ov_frame(frames[0])
    f[1].release()  # one plane: the frame itself is still open, so the plane's own check must refuse it
    with pytest.raises(InvalidTensorError, match="OPENVINO tensor was released; map or wrap the source again"):
        inf.infer(f)
    f.release()
    with pytest.raises(InvalidTensorError, match="frame was released"):
        inf.infer(f)  # its planes' memory may be back in the decoder's pool: no request may read it


def test_reused_inputs_under_async_requests(tmp_path) -> None:
    import av

    path = make_clip(str(tmp_path / "loop.mp4"), W, H, frames=30, preset="ultrafast")
    inf = interop.Inference(tiny_model(), "CPU", rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})
    got: dict[int, np.ndarray] = {}
    ref = {}
    with av.open(path) as c:
        for i, vf in enumerate(c.decode(video=0)):
            own = ov_frame(vf)
            assert [t.native for t in own]
            ref[i] = inf.infer(own)["mean"]
            inf.infer_async(vf, lambda out, k: got.__setitem__(k, out["mean"]), i)  # the job keeps vf alive
    inf.wait_all()
    assert sorted(got) == sorted(ref)
    for i in ref:
        np.testing.assert_array_equal(got[i], ref[i])


def test_padded_pitch_cropped_inside_model(tmp_path) -> None:
    import av

    path = make_clip(str(tmp_path / "odd.mp4"), 106, 60, frames=2, preset="ultrafast")  # 106 wide: padded planes
    with av.open(path) as c:
        vf = next(c.decode(video=0))
    assert vf.planes[0].line_size > vf.width
    inf = interop.Inference(tiny_model(None, None), "CPU", rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})
    with interop.copy_meter() as m:
        out = inf.infer(ov_frame(vf))["map"]
    assert m.copies == 0
    assert out.shape == (1, 4, 60, 106)  # dynamic model: runs at the visible size, padding cropped
    ref = inf.infer(cv2_bgr_input(vf))["map"]
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-2


def test_resize_mean_scale_rgb(frames: list) -> None:
    inf = interop.Inference(tiny_model(None, None), "CPU", input_size=(32, 24), mean=[10, 20, 30], scale=2.0,
                            rgb=True, config={"INFERENCE_PRECISION_HINT": "f32"})
    out = inf.infer(frames[0])["map"]
    assert out.shape == (1, 4, 24, 32)
    import cv2

    rgb = cv2.resize(frames[0].to_ndarray(format="rgb24"), (32, 24), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    x = ((rgb - [10, 20, 30]) / 2.0).astype(np.float32).transpose(2, 0, 1)[None]
    ref = inf.infer(np.ascontiguousarray(x))["map"]
    assert np.abs(out - ref).mean() / np.abs(ref).mean() < 0.05


def test_async_callbacks_userdata_and_output_bytes(inf: interop.Inference, frames: list) -> None:
    sync = [inf.infer(vf)["mean"] for vf in frames]
    got: dict[int, np.ndarray] = {}
    threads: set[int] = set()
    lock = threading.Lock()

    def cb(outputs: dict, i: int) -> None:
        with lock:
            got[i] = outputs["mean"]
            threads.add(threading.get_ident())

    before = inf.output_bytes
    for i, vf in enumerate(frames):
        assert inf.infer_async(vf, cb, i) is None  # returns at once
    inf.wait_all()
    assert inf.pending == 0
    assert sorted(got) == list(range(len(frames)))
    for i in got:
        np.testing.assert_allclose(got[i], sync[i], rtol=1e-5)
    per_request = 4 * (4 * H * W) + 4 * 4  # map f32 (1,4,H,W) + mean f32 (1,4)
    assert inf.output_bytes - before == per_request * len(frames)
    assert threading.get_ident() not in threads  # callbacks ran on OpenVINO's threads


def test_async_callback_gets_views_of_the_request_outputs_without_copy_outputs(inf: interop.Inference,
                                                                           frames: list) -> None:
    """copy_outputs=False: the callback reads the request's own output tensors (no copy, output_bytes unchanged)."""
    sync = [inf.infer(vf)["map"] for vf in frames]
    got: dict[int, np.ndarray] = {}
    owned: list[bool] = []
    lock = threading.Lock()

    def cb(outputs: dict, i: int) -> None:
        with lock:
            owned.append(outputs["map"].flags.owndata)
            got[i] = outputs["map"].copy()  # the views are valid while the callback runs

    before = inf.output_bytes
    for i, vf in enumerate(frames):
        inf.infer_async(vf, cb, i, copy_outputs=False)
    inf.wait_all()
    assert sorted(got) == list(range(len(frames)))
    for i in got:
        np.testing.assert_allclose(got[i], sync[i], rtol=1e-5)
    assert owned and not any(owned)  # views of OpenVINO's tensors, not arrays of their own
    assert inf.output_bytes == before
    with pytest.raises(interop.InteropError, match="copy_outputs"):
        inf.infer_async(frames[0], cb, 0, copy_outputs=None)  # type: ignore[arg-type]


def test_pool_sized_by_optimal_number_of_requests(inf: interop.Inference, frames: list) -> None:
    v = inf._frame_variant(*_key(ov_frame(frames[0])))
    assert inf.pool_size(frames[0]) == v.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == len(v.queue)


def _key(f):
    return f.format, [t.shape for t in f.tensors], f.width, f.height


def test_wait_all_reraises_first_callback_error(inf: interop.Inference, frames: list) -> None:
    seen = []

    def cb(outputs: dict, i: int) -> None:
        seen.append(i)
        if i in (1, 3):
            raise RuntimeError(f"boom {i}")

    for i, vf in enumerate(frames[:4]):
        inf.infer_async(vf, cb, i)
    with pytest.raises(RuntimeError, match="boom"):
        inf.wait_all()
    assert sorted(seen) == [0, 1, 2, 3]  # one failing callback does not stop the others
    inf.wait_all()  # errors are reported once
    inf.infer_async(frames[0], None)  # no callback is fine
    inf.wait_all()


def test_infer_async_from_threads(inf: interop.Inference, frames: list) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def cb(outputs: dict, i: int) -> None:
        with lock:
            results.append(i)

    def worker(k: int) -> None:
        for j in range(5):
            inf.infer_async(frames[(k + j) % len(frames)], cb, k * 100 + j)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    inf.wait_all(timeout=60)
    assert sorted(results) == sorted(k * 100 + j for k in range(4) for j in range(5))


def test_device_none_picks_cpu_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="interop"):
        inf = interop.Inference(tiny_model())
    assert inf.device == ("NPU" if "NPU" in ov.Core().available_devices else "CPU")
    assert any("device" in r.getMessage() for r in caplog.records)


def test_text_detector_finds_text(frames: list) -> None:
    from interop import textdet
    from interop.clip import default_clip

    try:
        path = textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    import av

    inf = interop.Inference(path, "CPU", input_size=(320, 256), mean=textdet.MEAN, scale=textdet.SCALE, rgb=False)
    with av.open(default_clip()) as c:
        vf = next(c.decode(video=0))
    prob = next(iter(inf.infer(vf).values()))
    assert prob.shape == (1, 1, 256, 320)
    assert len(textdet.boxes_from_map(prob, vf.width, vf.height)) >= 3


# -- bad input: typed errors with a remedy ---------------------------------------------------------------


def test_raw_tensor_wrong_shape(inf: interop.Inference) -> None:
    with pytest.raises(InvalidTensorError, match="wants shape .* convert/resize"):
        inf.infer(np.zeros((1, 3, H + 1, W), np.float32))


def test_raw_tensor_wrong_dtype(inf: interop.Inference) -> None:
    with pytest.raises(InvalidTensorError, match="float32.* or pass a Frame"):
        inf.infer(np.zeros((1, 3, H, W), np.uint8))


def test_wrong_number_of_inputs(inf: interop.Inference) -> None:
    x = np.zeros((1, 3, H, W), np.float32)
    with pytest.raises(InvalidTensorError, match="1 input"):
        inf.infer([x, x])


def test_missing_model_file(tmp_path) -> None:
    with pytest.raises(InvalidTensorError, match="not found: give the path") as ei:
        interop.Inference(str(tmp_path / "nope.onnx"))
    assert type(ei.value) is ModelFileError  # an InvalidTensorError (a ValueError) naming the model file


def test_unreadable_model(tmp_path) -> None:
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"not a model")
    with pytest.raises(InvalidTensorError, match="cannot read") as ei:
        interop.Inference(str(p))
    assert type(ei.value) is ModelFileError


def test_model_of_wrong_type() -> None:
    with pytest.raises(UnsupportedTypeError, match="path or an openvino.Model"):
        interop.Inference(42)


def test_unknown_device() -> None:
    with pytest.raises(BackendUnavailableError, match="devices found"):
        interop.Inference(tiny_model(), "NOSUCHDEVICE")


@pytest.mark.parametrize("name", ["cpu", "Cpu", "auto:cpu"])
def test_device_name_in_any_case(name: str) -> None:
    """`interop run --device cpu`: OpenVINO refuses 'cpu' as an unregistered device (a CompileError); interop's own
    check already read it case-insensitively, so the name it passes on is OpenVINO's spelling."""
    x = np.ones((1, 3, H, W), np.float32)
    with interop.Inference(tiny_model(), name) as inf:
        assert inf.infer(x) is not None


def test_bad_options() -> None:
    with pytest.raises(UnsupportedTypeError, match="input_size must be"):  # no subclass of it exists
        interop.Inference(tiny_model(), "CPU", input_size="big")
    with pytest.raises(InvalidTensorError, match="input_size .* must be positive") as ei:
        interop.Inference(tiny_model(), "CPU", input_size=(0, 8))
    assert type(ei.value) is InvalidTensorError
    with pytest.raises(InvalidTensorError, match="scale must not contain 0") as ei:
        interop.Inference(tiny_model(), "CPU", scale=0)
    assert type(ei.value) is InvalidTensorError
    with pytest.raises(UnsupportedTypeError, match="mean must be"):
        interop.Inference(tiny_model(), "CPU", mean="grey")


def test_unsupported_frame_format(inf: interop.Inference) -> None:
    gray16 = interop.wrap(np.zeros((H, W), np.uint16), format=interop.FrameFormat.GRAY16)
    with pytest.raises(UnsupportedFormatError, match="convert the frame first") as ei:
        inf.infer(gray16)
    assert type(ei.value) is UnsupportedFormatError


def _odd_i420(w: int = 107, h: int = 61) -> interop.Frame:
    rng = np.random.default_rng(1)
    planes = [rng.integers(16, 235, shp, dtype=np.uint8) for shp in ((h, w), ((h + 1) // 2, (w + 1) // 2), ((h + 1) // 2, (w + 1) // 2))]
    return interop.Frame([interop.wrap(a) for a in planes], interop.FrameFormat.I420, w, h)


def test_odd_size_frame_converted_planes_first(inf: interop.Inference) -> None:
    f = _odd_i420()
    with interop.copy_meter() as m:
        out = inf.infer(f)["map"]  # the tiny model is 64x48: each plane is cropped and resized, then converted
    assert m.copies == 0
    assert out.shape == (1, 4, H, W) and np.isfinite(out).all() and out.max() > 0


def test_odd_size_runs_at_its_own_odd_size() -> None:
    # dynamic model, no input_size: the frame runs at its own 107x61 (planes resized one by one, colour converted
    # at the output size, so an odd size needs no even model input)
    inf = interop.Inference(tiny_model(None, None), "CPU")
    with interop.copy_meter() as m:
        out = next(iter(inf.infer(_odd_i420()).values()))
    assert m.copies == 0
    assert out.shape[-2:] == (61, 107) and np.isfinite(out).all()


def test_bad_callback(inf: interop.Inference, frames: list) -> None:
    with pytest.raises(UnsupportedTypeError, match="callable"):
        inf.infer_async(frames[0], callback=5)


# -- re-entrance from completion callbacks: never a deadlock ------------------------------------------------

_REENTRANT_CHILD = r"""
import json, os, sys
sys.path.insert(0, os.environ["TESTS_DIR"])
sys.path.insert(0, os.path.dirname(os.environ["TESTS_DIR"]))
import numpy as np
import interop
from test_inference import tiny_model, H, W
from tests.support.fanout import fan_out_past_the_pool

inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT"})
nreq = inf.pool_size()
# each first-level callback submits more requests than the pool holds
res = fan_out_past_the_pool(lambda: inf, np.zeros((1, 3, H, W), np.float32), nreq, 3 * nreq + 2)
print(json.dumps({"nreq": nreq, **res}))
"""


def test_infer_async_from_callbacks_past_the_pool_completes() -> None:
    """Callbacks that submit more requests than the pool holds: queued, drained as requests complete, no deadlock.

    Run in a child process: before the fix it hung for good (OpenVINO's threads stuck, so even interpreter exit
    hung), which a test in this process could not survive."""
    import json
    import subprocess
    import sys

    try:
        p = subprocess.run([sys.executable, "-c", _REENTRANT_CHILD], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "TESTS_DIR": os.path.dirname(os.path.abspath(__file__))})
    except subprocess.TimeoutExpired:
        pytest.fail("infer_async from completion callbacks deadlocked (child process killed after 60 s)")
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["errors"] == [] and res["done"] == res["want"], res


def test_wait_all_timeout_is_typed(frames: list) -> None:
    from interop.errors import InteropError

    inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    release = threading.Event()
    inf.infer_async(frames[0], lambda outputs, _: release.wait(30))
    try:
        with pytest.raises(TimeoutError, match="still running after 0.05 s") as ei:
            inf.wait_all(timeout=0.05)
        assert isinstance(ei.value, InteropError)
    finally:
        release.set()
    inf.wait_all(timeout=30)
    inf.close()


def test_requests_sets_the_pool_size(frames: list) -> None:
    from interop.errors import InvalidTensorError, UnsupportedTypeError

    inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"}, requests=5)
    try:
        assert inf.pool_size(frames[0]) == 5
        seen: list[int] = []
        for i in range(12):
            inf.infer_async(frames[0], lambda outputs, k: seen.append(k), i)
        inf.wait_all(timeout=30)
        assert sorted(seen) == list(range(12))
    finally:
        inf.close()
    for bad, err in ((0, InvalidTensorError), (2000, InvalidTensorError), (2.0, UnsupportedTypeError),
                     (True, UnsupportedTypeError), ("4", UnsupportedTypeError)):
        with pytest.raises(err, match="requests"):
            interop.Inference(tiny_model(), "CPU", requests=bad)


def test_infer_async_timeout_when_every_request_is_busy(frames: list) -> None:
    """infer_async(timeout=) waits at most that long for a free request, then raises a typed TimeoutError and
    starts nothing; with a request free (or freed in time) it starts the input."""
    from interop.errors import InteropError, InvalidTensorError

    inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    release = threading.Event()
    done: list[str] = []
    try:
        n = inf.pool_size(frames[0])
        for _ in range(n):
            inf.infer_async(frames[0], lambda outputs, _: release.wait(30), timeout=5)
        for limit in (0, 0.1):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError, match="still busy") as ei:
                inf.infer_async(frames[0], lambda outputs, _: done.append("late"), timeout=limit)
            assert isinstance(ei.value, InteropError) and time.monotonic() - t0 < limit + 2
            assert inf.pending == n  # the refused input was not started
        with pytest.raises(InvalidTensorError):
            inf.infer_async(frames[0], timeout=float("nan"))
        threading.Timer(0.2, release.set).start()
        inf.infer_async(frames[0], lambda outputs, _: done.append("started"), timeout=10)  # a request frees in time
    finally:
        release.set()
    inf.wait_all(timeout=30)
    assert done == ["started"]
    inf.close()


def test_waiting_calls_from_own_callback_are_refused(frames: list) -> None:
    from interop.inference import CallbackReentryError

    inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    seen: list[str] = []

    def cb(outputs: dict, what: str) -> None:
        seen.append(what)
        if what == "infer":
            inf.infer(frames[0])
        elif what == "wait_all":
            inf.wait_all(timeout=5)
        else:
            inf.close()

    for what in ("infer", "wait_all", "close"):
        inf.infer_async(frames[0], cb, what)
        with pytest.raises(CallbackReentryError, match=f"{what}.* from a completion callback") as ei:
            inf.wait_all(timeout=30)
        assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, interop.InteropError)
    assert seen == ["infer", "wait_all", "close"]
    assert inf.infer(frames[0])["map"].shape == (1, 4, H, W)  # still open and working
    inf.close()


def test_bad_input_submitted_from_a_callback_is_reported_by_wait_all(inf: interop.Inference, frames: list) -> None:
    def cb(outputs: dict, _: None) -> None:
        inf.infer_async(np.zeros((1, 3, H + 1, W), np.float32))  # raises here, in the callback

    inf.infer_async(frames[0], cb)
    with pytest.raises(InvalidTensorError, match="wants shape"):
        inf.wait_all(timeout=30)
    assert inf.pending == 0


def test_host_planes_already_four_dimensional_are_fed_as_they_are() -> None:
    """A DMA frame mapped to OpenVINO (as the multi-stream run feeds them): each request input is the plane's own
    ov.Tensor, its shape the one OpenVINO reports, taken from the plane's TensorInfo."""
    from interop.dma import FramePool
    from interop.inference._inputs import PlaneInputs, frame_inputs

    with FramePool(interop.FrameFormat.I420, 64, 48, 2) as pool:
        f = pool.acquire()
        m = interop.map(f, interop.MemoryType.OPENVINO)
        planes, shapes = frame_inputs(ov, PlaneInputs(ov), m)
        assert [p is t.native for p, t in zip(planes, m.tensors)] == [True] * 3
        assert shapes == [tuple(int(d) for d in p.get_shape()) for p in planes]
        assert all(len(s) == 4 and s[0] == 1 for s in shapes)
        m.release()
        f.release()
