"""Elements: AppSinkSource (frames from any pipeline string, the ALLOCATION answer with GstVideoMeta, bus errors,
EOS, stalls), AppSrcSink, Chain (caller's thread and worker queue), PyAV decoder and Inference elements; the
GStreamer decode -> Inference path gives 0 copies and the PyAV path's detections; lifetimes over many buffers."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import interop
from interop import FrameFormat, InteropError, MemoryType
from interop.elements import (
    AppSinkSource,
    AppSrcSink,
    Chain,
    InferenceTransform,
    PipelineError,
    PipelineTimeoutError,
    PyAVDecoderSource,
    Transform,
    frames,
)
from interop.elements.appsink import LATENCY_EVERY
from interop.native import gst as ng
from interop.tensors.gst import gst
from tests.support.requirements import need_module

Gst = gst()
ROOT = Path(__file__).resolve().parent.parent
CLIP = ROOT / "interop" / "data" / "text.mp4"


@pytest.fixture(scope="module")
def clip854(tmp_path_factory: pytest.TempPathFactory) -> str:
    from interop.clip import make_clip

    return make_clip(str(tmp_path_factory.mktemp("clips") / "odd854.mp4"), 854, 480, frames=6, preset="ultrafast")


def test_frames_from_a_pipeline_string():
    got = list(frames("videotestsrc num-buffers=5 ! video/x-raw,format=NV12,width=64,height=48,framerate=30/1 "
                      "! appsink"))
    assert len(got) == 5
    f = got[1]
    assert (f.memory_type, f.format, f.width, f.height) == (MemoryType.GST, FrameFormat.NV12, 64, 48)
    assert f.pts == 33333333 and f.time_base == interop.tensors.gst.NANOSECONDS


def test_the_appsink_keeps_no_sample_a_frame_came_from():
    """GStreamer's sinks keep the last sample by default: one more buffer held (a GstFramePool's, out of the pool)
    until the next sample, and the last until the sink went. The source's appsink keeps none."""
    src = AppSinkSource("videotestsrc num-buffers=3 ! video/x-raw,format=GRAY8,width=8,height=8 ! appsink")
    try:
        f = src.read()
        assert f is not None
        assert src.sink.get_property("last-sample") is None
        f.release()
    finally:
        src.close()


def test_a_string_without_appsink_gets_one():
    assert len(list(frames("videotestsrc num-buffers=2 ! video/x-raw,format=GRAY8,width=8,height=8"))) == 2


def test_decoder_hands_over_padded_frames_with_video_meta(clip854: str):
    # without interop's ALLOCATION answer a 1.22 appsink gets no GstVideoMeta: the tight default layout
    p = Gst.parse_launch(f"filesrc location={clip854} ! qtdemux ! h264parse ! avdec_h264 ! appsink name=s sync=false")
    p.set_state(Gst.State.PLAYING)
    s = p.get_by_name("s").emit("try-pull-sample", 5 * Gst.SECOND)
    assert ng.video_meta(ng.pointer_of(s.get_buffer(), "Gst.Buffer")) is None
    p.set_state(Gst.State.NULL)
    f = next(frames(f"filesrc location={clip854} ! qtdemux ! h264parse ! avdec_h264 ! appsink"))
    meta = ng.video_meta(ng.pointer_of(f.buffer, "Gst.Buffer"))
    assert meta is not None and meta.width == 854
    assert f[0].info.strides[0] == meta.strides[0] != 854


def test_a_latency_message_makes_the_live_pipeline_take_the_new_latency():
    """An element whose delay grows while the pipeline plays posts LATENCY; the bin does not act on it by itself
    (gst-launch calls recalculate_latency): AppSinkSource does, so a live sink waits long enough for its frames."""
    Gst = gst()
    src = AppSinkSource("videotestsrc is-live=true ! video/x-raw,format=I420,width=64,height=48,framerate=100/1 ! "
                        "queue name=q ! appsink name=sink", sync=True, timeout=5)
    try:
        for _ in range(3):
            assert src.read() is not None
        before = src.sink.get_latency()  # GstBaseSink's configured latency
        q = src.pipeline.get_by_name("q")
        q.set_property("max-size-time", 2 * Gst.SECOND)
        q.set_property("min-threshold-time", 200 * Gst.MSECOND)  # the queue now holds frames back: more latency
        src.pipeline.post_message(Gst.Message.new_latency(q))
        for _ in range(2 * LATENCY_EVERY):
            assert src.read() is not None
        assert src.sink.get_latency() >= before + 200 * Gst.MSECOND
    finally:
        src.close()


def test_an_error_while_a_live_source_goes_on_is_raised_after_the_held_frames():
    """An ERROR posted while frames keep coming (a live source, another branch failing) is raised within the frames
    the appsink held when it was found, not left for a pull that waits (which a live source may never give)."""
    Gst = gst()
    from gi.repository import GLib

    src = AppSinkSource("videotestsrc is-live=true ! video/x-raw,format=I420,width=64,height=48,framerate=30/1 ! "
                        "tee name=t ! queue ! appsink  t. ! queue ! fakesink name=f", timeout=5)
    n = 0
    with pytest.raises(PipelineError, match="boom") as e:
        for _ in src:
            n += 1
            if n == 2:
                f = src.pipeline.get_by_name("f")
                err = GLib.Error.new_literal(Gst.StreamError.quark(), "boom", int(Gst.StreamError.FAILED))
                f.post_message(Gst.Message.new_error(f, err, "posted by the test"))
            assert n < 200, "the error was never raised"
    assert n <= 2 + 2 * LATENCY_EVERY + src.max_buffers, n
    assert isinstance(e.value, InteropError)


def test_bus_error_is_typed():
    with pytest.raises(PipelineError, match="No such file") as e:
        list(frames("filesrc location=/nonexistent/clip.mp4 ! qtdemux ! appsink"))
    assert isinstance(e.value, InteropError) and isinstance(e.value, RuntimeError)


def test_bad_pipeline_string_is_typed():
    with pytest.raises(PipelineError, match="nosuchelement"):
        list(frames("nosuchelement ! appsink"))
    with pytest.raises(InteropError):
        list(frames(""))
    with pytest.raises(InteropError, match="timeout"):
        list(frames("videotestsrc ! appsink", timeout=-1))


def test_stalled_pipeline_times_out():
    with pytest.raises(PipelineTimeoutError, match="stalled") as e:
        list(frames("videotestsrc ! valve drop=true ! appsink", timeout=0.3))
    assert isinstance(e.value, TimeoutError)


def test_eos_ends_iteration_and_stops_the_pipeline():
    src = AppSinkSource("videotestsrc num-buffers=3 ! video/x-raw,format=GRAY8,width=8,height=8 ! appsink")
    assert len(list(src)) == 3 and src.read() is None
    assert src.pipeline.get_state(0)[1] == Gst.State.NULL


class _Invert(Transform):
    accepts = (MemoryType.CPU,)

    def process(self, frame: interop.Frame) -> interop.Frame:
        frame.metadata["mean"] = float(np.asarray(frame[0]).mean())
        return frame


@pytest.mark.parametrize("queue_size", [0, 2])
def test_chain_maps_between_elements_and_runs_in_either_thread(queue_size: int):
    src = AppSinkSource("videotestsrc num-buffers=8 pattern=white ! video/x-raw,format=GRAY8,width=16,height=8 "
                        "! appsink")
    with interop.copy_meter() as meter:
        out = list(Chain(src, _Invert(), queue_size=queue_size))
    assert meter.copies == 0
    assert len(out) == 8 and all(f.memory_type is MemoryType.CPU and f.metadata["mean"] == 235 for f in out)


def test_chain_raises_the_sources_error_in_the_callers_thread():
    with pytest.raises(PipelineError):
        list(Chain(AppSinkSource("filesrc location=/nonexistent ! appsink"), queue_size=2))
    with pytest.raises(InteropError):
        Chain(_Invert())  # type: ignore[arg-type]


def test_appsrc_sink_pushes_cpu_frames_zero_copy(tmp_path):
    out = tmp_path / "f.raw"
    sink = AppSrcSink(f"appsrc ! filesink location={out}")
    planes = [np.full((8, 16), i, np.uint8) for i in range(3)]
    with interop.copy_meter() as meter:
        for a in planes:
            sink.write(interop.Frame([interop.wrap(a)], FrameFormat.GRAY8))
        sink.close()
    assert meter.copies == 0
    assert out.read_bytes() == b"".join(a.tobytes() for a in planes)


def test_pyav_decoder_source():
    need_module("av")
    src = PyAVDecoderSource(str(CLIP))
    f = src.read()
    assert f is not None and f.memory_type is MemoryType.FFMPEG and (f.width, f.height) == (640, 480)
    src.close()
    assert src.read() is None
    with pytest.raises(InteropError, match="not found"):
        PyAVDecoderSource("/nonexistent.mp4")


def test_gstreamer_decode_into_inference_is_zero_copy_with_pyavs_detections():
    need_module("av")
    need_module("openvino")
    from interop import textdet

    try:
        model = textdet.model_path()
    except interop.BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")
    inf = interop.Inference(model, "CPU", input_size=textdet.input_size_for(640, 480), mean=textdet.MEAN,
                            scale=textdet.SCALE, rgb=textdet.RGB, config={"INFERENCE_PRECISION_HINT": "f32"})

    def boxes(outputs, f):
        return textdet.boxes_from_map(next(iter(outputs.values())), f.width, f.height)

    n = 12
    with interop.copy_meter() as meter:
        g = [f.metadata["result"] for _, f in zip(range(n), Chain(
            AppSinkSource(f"filesrc location={CLIP} ! qtdemux ! h264parse ! avdec_h264 ! appsink"),
            InferenceTransform(inf, boxes)))]
    assert meter.copies == 0 and meter.bytes == 0, meter.records
    a = [f.metadata["result"] for _, f in zip(range(n), Chain(PyAVDecoderSource(str(CLIP)),
                                                              InferenceTransform(inf, boxes)))]
    assert len(g) == len(a) == n
    for i, (bg, ba) in enumerate(zip(g, a)):
        assert len(bg) == len(ba) >= 3, i
        for b in ba:
            assert max(textdet.iou(b, z) for z in bg) >= 0.8, (i, b.bbox)


def _leak_run(n: int) -> None:
    src = AppSinkSource(f"videotestsrc num-buffers={n} ! video/x-raw,format=I420,width=32,height=16 ! appsink")
    gc.collect()
    start, fds = ng.live_mappings(), len(os.listdir("/proc/self/fd"))
    got = 0
    for f in src:
        with interop.map(f, MemoryType.CPU) as c:
            assert np.asarray(c[2]).shape == (8, 16)
        got += 1
    assert got == n
    gc.collect()
    assert ng.live_mappings() == start
    assert len(os.listdir("/proc/self/fd")) <= fds + 2


def test_no_leak_over_many_buffers(soak: bool):
    _leak_run(10_000 if soak else 2_000)


def test_gstreamer_leaks_tracer_reports_nothing_alive():
    script = textwrap.dedent("""
        import numpy as np, interop
        from interop import MemoryType
        from interop.elements import frames
        for f in frames("videotestsrc num-buffers=300 ! video/x-raw,format=NV12,width=32,height=16 ! appsink"):
            with interop.map(f, MemoryType.CPU) as c:
                np.asarray(c[0]).sum()
            del f
        del c
        import gc; gc.collect()
        from interop.tensors.gst import gst
        gst().deinit()
    """)
    env = {**os.environ, "GST_TRACERS": "leaks", "GST_DEBUG": "GST_TRACER:7", "GST_DEBUG_NO_COLOR": "1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "object-alive, type-name=(string)%s" in proc.stderr  # the tracer ran (its record format)
    alive = re.findall(r"object-alive, type-name=\(string\)(\w+)", proc.stderr)
    assert alive == [], alive[:10]
