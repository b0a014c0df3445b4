"""Inference on the NPU fed decoded FFmpeg frames (issue 19 point 2): each frame is mapped to the NPU through CPU_VA
imports of the decoder buffers' pages (tests/ov_remote_double.py checks what the plugin checks), the request gets
the NPU tensors at the planes' own addresses, nothing is copied, each frame (and its import) is held until its
request completes, and at most HOST_FRAMES_IN_FLIGHT such frames are in flight.

No NPU here: the model is compiled for the CPU and the Inference routes its inputs to MemoryType.NPU with the
double's context as the default NPU context, so the CPU plugin reads the same ov.Tensors the NPU plugin would get.
The hardware test at the end runs on a real NPU and skips naming it elsewhere."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import interop
from interop import MemoryType, WrongMemoryError
from tests.ffmpeg_clips import make_clip
from tests.ov_remote_double import RemoteContextDouble
from tests.support.requirements import need_module

ov = need_module("openvino")
av = need_module("av")


def _frames(w: int = 320, h: int = 240, n: int = 12) -> list:
    path = Path(tempfile.mkdtemp()) / f"c_{w}x{h}.mp4"
    make_clip(path, w, h, n)
    with av.open(str(path)) as c:
        return list(c.decode(video=0))


def _model() -> ov.Model:
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, -1, -1], np.float32, name="image")
    y = ops.reduce_mean(x, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    y.output(0).get_tensor().set_names({"mean"})
    return ov.Model([y], [x], "mean")


@pytest.fixture
def npu_ctx():  # type: ignore[no-untyped-def]
    from interop.context import set_default_context
    from interop.tensors.npu import NPUContext

    rc = RemoteContextDouble()
    ctx = NPUContext(rc)
    set_default_context(MemoryType.NPU, ctx)
    yield ctx, rc
    set_default_context(MemoryType.NPU, None)


def _npu_inference() -> interop.Inference:
    inf = interop.Inference(_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    inf._memory_type = MemoryType.NPU  # inputs take the NPU route (no NPU to compile for here)
    return inf


def test_requests_get_the_imported_planes_and_nothing_is_copied(npu_ctx) -> None:  # type: ignore[no-untyped-def]
    ctx, rc = npu_ctx
    frames = _frames()
    ref = interop.Inference(_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    want = [ref.infer(vf)["mean"] for vf in frames]
    inf = _npu_inference()
    seen: list[tuple[str, bool]] = []
    orig = inf._frame_inputs

    def spy(m):  # type: ignore[no-untyped-def]
        planes, shapes = orig(m)
        for t, nat in zip(m.tensors, planes):  # the request input is the NPU tensor itself, at the plane's address
            seen.append((t.mem_type, nat is t.native and t.host_import is not None
                         and t.host_import.start <= nat.data.ctypes.data < t.host_import.end))
        return planes, shapes

    inf._frame_inputs = spy  # type: ignore[method-assign]
    got: dict[int, np.ndarray] = {}
    with interop.copy_meter() as m:
        for i, vf in enumerate(frames):
            inf.infer_async(vf, lambda o, i: got.__setitem__(i, o["mean"]), i)
        inf.wait_all(timeout=60)
        sync = inf.infer(frames[0])["mean"]
    assert m.copies == 0 and m.bytes == 0
    assert seen and all(kind == "CPU_VA" and inside for kind, inside in seen)
    assert rc.calls and all(c[2]["MEM_TYPE"] == "CPU_VA" for c in rc.calls)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[i], w, rtol=1e-5)
    np.testing.assert_allclose(sync, want[0], rtol=1e-5)
    inf.close()


def test_each_frame_is_held_until_its_request_completes_and_few_are_in_flight(npu_ctx) -> None:  # type: ignore[no-untyped-def]
    ctx, rc = npu_ctx
    frames = _frames(n=10)
    inf = _npu_inference()
    release = threading.Event()
    most = [0]
    lock = threading.Lock()

    def cb(outputs, i):  # type: ignore[no-untyped-def]
        with lock:
            most[0] = max(most[0], inf._host_frames)
            live = len(ctx.host_imports.live())
        assert live >= 1  # this request's import is still live while its callback runs
        release.wait(0.01)

    for i, vf in enumerate(frames):
        inf.infer_async(vf, cb, i)
        assert inf._host_frames <= inf.HOST_FRAMES_IN_FLIGHT
    inf.wait_all(timeout=60)
    assert 1 <= most[0] <= inf.HOST_FRAMES_IN_FLIGHT and inf._host_frames == 0
    inf.close()


def test_overlapping_pages_wait_for_a_request_and_retry_never_copy(npu_ctx, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A frame whose pages overlap an import still held by a request in flight is mapped again once a request has
    completed (FFmpeg's heap buffers can share pages); with nothing in flight the refusal is raised, not copied."""
    frames = _frames(n=4)
    inf = _npu_inference()
    real_map = inf._map
    refusals = [0]

    def flaky(x):  # type: ignore[no-untyped-def]
        if inf._host_frames and refusals[0] < 2:
            refusals[0] += 1
            raise WrongMemoryError("the pages overlap the pages already imported (test)")
        return real_map(x)

    monkeypatch.setattr(inf, "_map", flaky)
    got: list[int] = []
    with interop.copy_meter() as m:
        for i, vf in enumerate(frames):
            inf.infer_async(vf, lambda o, i: got.append(i), i)
        inf.wait_all(timeout=60)
    assert refusals[0] >= 1 and sorted(got) == list(range(len(frames))) and m.copies == 0

    monkeypatch.setattr(inf, "_map", lambda x: (_ for _ in ()).throw(WrongMemoryError("overlap (test)")))
    with pytest.raises(WrongMemoryError):  # nothing in flight to wait for: the refusal itself
        inf.infer(frames[0])
    inf.close()


@pytest.mark.hardware("npu")
def test_npu_inference_on_decoded_frames_matches_cpu() -> None:
    core = ov.Core()
    if not any(d.split(".")[0] == "NPU" for d in core.available_devices):
        pytest.skip(f"needs an Intel NPU (OpenVINO devices here: {core.available_devices})")
    frames = _frames(n=8)
    cpu = interop.Inference(_model(), "CPU", input_size=(320, 240))
    npu = interop.Inference(_model(), "NPU", input_size=(320, 240))
    with interop.copy_meter() as m:
        got = [npu.infer(vf)["mean"] for vf in frames]
    assert m.copies == 0
    for vf, g in zip(frames, got):
        np.testing.assert_allclose(g, cpu.infer(vf)["mean"], rtol=2e-2, atol=1.0)
