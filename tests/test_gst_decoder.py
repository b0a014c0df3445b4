"""interopdec: the GStreamer decoder element whose buffers are FFmpeg's frames.

What is checked: at 854x480 the buffers interopdec pushes wrap the decoded AVFrame's planes (the memory pointers a
pad probe sees are the appsink sample's mapped planes and lie inside PyAV's plane buffers; the GstVideoMeta stride is
FFmpeg's line size); pixels and pts equal PyAV decoding the same file; 0 copies through map() and frames(); EOS
drains every frame; corrupt input and unsupported pixel formats are typed errors; wrapped memories are released while
the pipeline runs and all of them once it is gone; a flushing seek starts over; downstream without GstVideoMeta
support gets GStreamer's default layout (counted); decodebin picks the element by rank; `interop run` reports 0
copies.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.elements import AppSinkSource, PipelineError, frames
from interop.elements.gst_decoder import NAME, register
from interop.native import gst as ng
from interop.tensors.gst import gst
from tests.support.requirements import need

need("gst")
need("ffmpeg")
Gst = gst()
register()
ROOT = Path(__file__).resolve().parent.parent
DEC = "qtdemux ! h264parse ! interopdec name=dec"


@pytest.fixture(scope="module")
def clip854(tmp_path_factory: pytest.TempPathFactory) -> str:
    from interop.clip import make_clip

    return make_clip(str(tmp_path_factory.mktemp("clips") / "odd854.mp4"), 854, 480, frames=40, preset="ultrafast")


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    from interop.clip import make_clip

    return make_clip(str(tmp_path_factory.mktemp("clips") / "long.mp4"), 214, 120, frames=300, preset="ultrafast")


def _pyav(path: str, n: int | None = None) -> list[tuple[int, list[np.ndarray]]]:
    """(pts in ns, the planes as arrays) of PyAV decoding ``path`` directly."""
    import av

    out = []
    with av.open(path) as c:
        for vf in c.decode(video=0):
            with interop.map(vf, MemoryType.CPU) as f:
                out.append((int(vf.pts * vf.time_base * 1_000_000_000), [np.array(t) for t in f.tensors]))
            if n is not None and len(out) == n:
                break
    return out


def _source(path: str, **options) -> AppSinkSource:
    return AppSinkSource(f"filesrc location={path} ! {DEC} ! appsink", **options)


def _memory_pointers(buffer) -> list[tuple[int, int]]:
    """(data pointer, size) of each GstMemory of a buffer, mapped for READ just long enough to read them."""
    buf = ng.pointer_of(buffer, "Gst.Buffer")
    out = []
    for i in range(ng.n_memory(buf)):
        m = ng.MemoryMapping(ng.peek_memory(buf, i), False)
        out.append((m.address, m.size))
        m.close()
    return out


def test_register_is_idempotent_and_parse_launch_finds_it():
    assert register() is register()
    f = Gst.ElementFactory.find(NAME)
    assert f is not None and "Decoder" in f.get_metadata("klass")
    assert {t.direction for t in f.get_static_pad_templates()} == {Gst.PadDirection.SINK, Gst.PadDirection.SRC}
    assert Gst.parse_launch(f"fakesrc ! {NAME} ! fakesink") is not None


def _mark(pts: int) -> int:
    return 1 + (pts // 33_333_333) % 250


def test_buffers_are_ffmpegs_frames_at_854x480(clip854: str):
    src = _source(clip854)
    dec = src.pipeline.get_by_name("dec")
    planes: dict[int, list[tuple[int, int, int]]] = {}  # pts -> PyAV's (buffer_ptr, buffer_size, line_size)
    pushed: dict[int, list[tuple[int, int]]] = {}  # pts -> what the src pad pushed: (data pointer, size)
    metas: dict[int, ng.VideoLayout] = {}

    def on_frame(vf, buf):  # the element's test hook: the AVFrame behind the buffer (a GstBuffer*)
        pts = ng.buffer_times(buf)[0]
        planes[pts] = [(p.buffer_ptr, p.buffer_size, p.line_size) for p in vf.planes]
        # a write through FFmpeg's own plane (a finished picture: the decoder no longer writes it) ...
        np.frombuffer(vf.planes[0], np.uint8)[0] = _mark(pts)

    def probe(pad, info):
        b = info.get_buffer()
        pushed[b.pts] = _memory_pointers(b)
        metas[b.pts] = ng.video_meta(ng.pointer_of(b, "Gst.Buffer"))
        return Gst.PadProbeReturn.OK

    dec.on_frame = on_frame
    dec.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe)
    n = 0
    with interop.copy_meter() as meter:
        for f in src:
            assert (f.format, f.width, f.height) == (FrameFormat.I420, 854, 480)
            with interop.map(f, MemoryType.CPU) as c:
                ptrs = [t.data_ptr for t in c.tensors]
                assert ptrs == [p for p, _ in pushed[f.pts]]  # the very memory the decoder pushed
                assert np.asarray(c.tensors[0])[0, 0] == _mark(f.pts)  # ... read through the mapped sample
                for t, (ptr, size, line) in zip(c.tensors, planes[f.pts]):
                    assert ptr <= t.data_ptr and t.data_ptr + t.info.extent <= ptr + size  # inside the AVFrame's plane
                    assert t.info.strides[0] == line
                meta = metas[f.pts]
                assert meta is not None and meta.strides[0] == planes[f.pts][0][2] > 854
                assert all(size <= psize for (_, size), (_, psize, _) in zip(pushed[f.pts], planes[f.pts]))
            n += 1
    assert n == 40 and meter.copies == 0 and meter.bytes == 0
    assert dec.get_property("copied-frames") == 0


def test_pixels_and_pts_equal_pyav_decoding_the_file(clip854: str):
    ref = _pyav(clip854, 30)
    got = []
    with interop.copy_meter() as meter:
        for f in frames(f"filesrc location={clip854} ! {DEC} ! appsink"):
            with interop.map(f, MemoryType.CPU) as c:
                got.append((f.pts, [np.array(t) for t in c.tensors]))
            if len(got) == 30:
                break
    assert meter.copies == 0
    assert [p for p, _ in got] == [p for p, _ in ref] == sorted(p for p, _ in ref)
    for (_, a), (_, b) in zip(got, ref):
        assert len(a) == len(b) == 3
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_eos_drains_every_frame_with_frame_threads(clip854: str):
    n = sum(1 for _ in _pyav(clip854))
    src = AppSinkSource(f"filesrc location={clip854} ! qtdemux ! h264parse ! interopdec max-threads=4 ! appsink")
    got = list(src)
    assert len(got) == n == 40
    assert [f.pts for f in got] == sorted(f.pts for f in got)
    assert all(f.metadata["duration"] == 33333333 and f.metadata["framerate"] == Fraction(30) for f in got)


STOP_MIDSTREAM = """
import sys
import interop
from interop.elements import AppSinkSource
from interop.elements import gst_decoder
gst_decoder.register()
if len(sys.argv) > 2:  # the old packets, over Python bytes: shows the deadlock this test guards against
    gst_decoder._packet = lambda av, b: av.Packet(b.extract_dup(0, b.get_size()))
for i in range(40):
    src = AppSinkSource(f"filesrc location={sys.argv[1]} ! qtdemux ! h264parse ! interopdec max-threads=4 ! appsink")
    for _ in range(3):
        src.read()
    src.close()  # frames still in FFmpeg's frame threads: the decoder is freed with packets in flight
print("ok")
"""


def test_stopping_mid_stream_with_frame_threads_does_not_hang(clip854: str):
    p = subprocess.run([sys.executable, "-c", STOP_MIDSTREAM, clip854], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_delta_unit_flag_on_non_key_frames(clip854: str):
    flags = [bool(f.native.get_buffer().get_flags() & Gst.BufferFlags.DELTA_UNIT) for f in frames(
        f"filesrc location={clip854} ! {DEC} ! appsink")]
    assert flags[0] is False and any(flags)


def _push_random(caps: str, n: int = 30) -> None:
    src = AppSinkSource(f"appsrc name=in caps={caps} format=time ! interopdec ! appsink", timeout=20)
    appsrc = src.pipeline.get_by_name("in")
    rng = np.random.default_rng(1)
    for i in range(n):
        b = Gst.Buffer.new_wrapped(rng.integers(0, 256, 4000, np.uint8).tobytes())
        b.pts = i * 33_333_333
        appsrc.emit("push-buffer", b)
    appsrc.emit("end-of-stream")
    with pytest.raises(PipelineError, match=NAME) as e:
        list(src)
    assert isinstance(e.value, interop.InteropError) and isinstance(e.value, RuntimeError)


@pytest.mark.parametrize("caps", [
    "video/x-h264,stream-format=byte-stream,alignment=au",
    "video/x-h264,stream-format=avc,alignment=au,codec_data=(buffer)0164001effe1001967640a",
])
def test_corrupt_input_is_a_typed_error_not_a_crash(caps: str):
    _push_random(caps)


def test_unsupported_pixel_format_is_an_element_error(tmp_path):
    from interop.clip import encode

    path = encode(str(tmp_path / "444.mp4"), 4, 64, 48, pix_fmt="yuv444p", options={"preset": "ultrafast"})
    with pytest.raises(PipelineError, match="cannot output yuv444p"):
        list(frames(f"filesrc location={path} ! {DEC} ! appsink"))


def test_wrapped_frames_are_released_while_running_and_all_at_the_end(long_clip: str):
    gc.collect()
    base = ng.live_wrapped()
    peak = 0
    kept = []
    n = 0
    for f in frames(f"filesrc location={long_clip} ! {DEC} ! appsink"):
        if n % 50 == 0:
            kept.append(interop.map(f, MemoryType.CPU))  # views that outlive the sample, the pipeline
        peak = max(peak, ng.live_wrapped() - base)
        n += 1
    assert n == 300
    # appsink's queue, the decoder's delay and the kept frames: bounded, far below 3 memories x 300 frames
    assert peak <= 3 * (len(kept) + 24)
    del f
    gc.collect()
    assert ng.live_wrapped() - base == 3 * len(kept)  # the pipeline is gone: only the kept frames' memories live
    assert all(np.array(k[0]).shape == (120, 214) for k in kept)
    del kept
    gc.collect()
    assert ng.live_wrapped() == base


def test_flushing_seek_starts_over(clip854: str):
    src = _source(clip854)
    first = src.read()
    with interop.map(first, MemoryType.CPU) as c:
        want = [np.array(t) for t in c.tensors]
    for _ in range(10):
        src.read()
    assert src.pipeline.seek_simple(Gst.Format.TIME, Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT, 0)
    f = src.read()
    assert f.pts == first.pts
    with interop.map(f, MemoryType.CPU) as c:
        for a, b in zip(c.tensors, want):
            np.testing.assert_array_equal(np.array(a), b)
    rest = list(src)
    assert len(rest) == 39
    src.close()


def test_seek_back_after_eos_decodes_again(clip854: str):
    p = Gst.parse_launch(f"filesrc location={clip854} ! {DEC} ! appsink name=s sync=false")
    sink = p.get_by_name("s")
    ng.offer_video_meta(sink)
    p.set_state(Gst.State.PLAYING)
    try:
        n = 0
        while sink.emit("try-pull-sample", 10 * Gst.SECOND) is not None:
            n += 1
        assert n == 40 and sink.get_property("eos")
        assert p.seek_simple(Gst.Format.TIME, Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT, 0)
        s = sink.emit("try-pull-sample", 10 * Gst.SECOND)  # the drained decoder is opened again: no error
        assert s is not None and s.get_buffer().pts == 0
        assert p.get_bus().pop_filtered(Gst.MessageType.ERROR) is None
    finally:
        p.set_state(Gst.State.NULL)


def test_downstream_without_video_meta_gets_the_default_layout_counted(clip854: str):
    # a plain appsink (no interop probe) announces no GstVideoMeta: FFmpeg's 896-byte rows would be misread
    p = Gst.parse_launch(f"filesrc location={clip854} ! {DEC} ! appsink name=s sync=false")
    p.set_state(Gst.State.PLAYING)
    sink = p.get_by_name("s")
    ref = _pyav(clip854, 3)
    try:
        for _, planes in ref:
            s = sink.emit("try-pull-sample", 10 * Gst.SECOND)
            assert ng.video_meta(ng.pointer_of(s.get_buffer(), "Gst.Buffer")) is None
            with interop.map(s, MemoryType.CPU) as c:
                assert c[0].info.strides[0] == 856  # GStreamer's default I420 stride at 854
                for a, b in zip(c.tensors, planes):
                    np.testing.assert_array_equal(np.array(a), b)
        assert p.get_by_name("dec").get_property("copied-frames") >= 3
    finally:
        p.set_state(Gst.State.NULL)


@pytest.mark.parametrize("rank", ["high", 1.5, -1, True])
def test_a_bad_rank_is_a_typed_error(rank: object):
    with pytest.raises(interop.InteropError, match="rank must be"):
        register(rank)


def test_decodebin_prefers_it_by_rank(clip854: str):
    try:
        register(rank=Gst.Rank.PRIMARY + 1)
        src = AppSinkSource(f"filesrc location={clip854} ! decodebin ! appsink")
        f = src.read()
        names = []
        it = src.pipeline.iterate_recurse()
        while True:
            ok, e = it.next()
            if ok != Gst.IteratorResult.OK:
                break
            names.append(e.get_factory().get_name())
        src.close()
        assert NAME in names and "avdec_h264" not in names
        assert f.width == 854
    finally:
        register(rank=Gst.Rank.NONE)
    assert Gst.ElementFactory.find(NAME).get_rank() == Gst.Rank.NONE


def _model_or_skip() -> None:
    from interop import textdet
    from interop.errors import BackendUnavailableError

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


def test_run_in_process_zero_copies_and_pyav_detections(clip854: str):
    _model_or_skip()
    from interop.pipeline import run
    from interop.textdet import iou

    n = 6
    r = run(f"gst:filesrc location={clip854} ! {DEC} ! appsink", device="CPU", frames=n)
    assert r.frames == n and r.copies == 0 and r.bytes_copied == 0 and r.width == 854
    # the PyAV path on the same file finds the same text (the pixels are FFmpeg's in both)
    a = run(clip854, device="CPU", frames=n)
    assert (a.width, a.height, a.input_size) == (r.width, r.height, r.input_size)
    for i in range(n):
        assert len(r.boxes[i]) == len(a.boxes[i]) >= 1, i
        for box in a.boxes[i]:
            assert max(iou(box, other) for other in r.boxes[i]) >= 0.8, (i, box.bbox)


def test_cli_run_reports_zero_copies(clip854: str):
    _model_or_skip()
    p = subprocess.run([sys.executable, "-m", "interop", "run",
                        f"gst:filesrc location={clip854} ! qtdemux ! h264parse ! interopdec ! appsink",
                        "--frames", "4", "--json", "--no-progress"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env={**os.environ})
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["frames"] == 4 and d["copies"] == 0 and d["bytes_copied"] == 0


# ---- timestamps, renegotiation, latency, caps, the copy path ----------------------------------------------------


@pytest.fixture(scope="module")
def bytestream854(clip854: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """clip854's H.264 as a raw Annex B file (no container: h264parse gives DTS only, PTS NONE)."""
    path = str(tmp_path_factory.mktemp("clips") / "odd854.h264")
    p = Gst.parse_launch(f"filesrc location={clip854} ! qtdemux ! h264parse ! video/x-h264,stream-format=byte-stream "
                         f"! filesink location={path}")
    p.set_state(Gst.State.PLAYING)
    msg = p.get_bus().timed_pop_filtered(30 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    p.set_state(Gst.State.NULL)
    assert msg is not None and msg.type == Gst.MessageType.EOS
    return path


def _samples(desc: str, meta: bool = True) -> tuple[list, Any]:
    """Every sample of ``desc`` (ending in ``appsink name=s``) and the pipeline's error (None when it had none)."""
    p = Gst.parse_launch(desc)
    sink = p.get_by_name("s")
    sink.set_property("sync", False)
    if meta:
        ng.offer_video_meta(sink)
    p.set_state(Gst.State.PLAYING)
    out = []
    try:
        while (s := sink.emit("try-pull-sample", 10 * Gst.SECOND)) is not None:
            out.append(s)
        msg = p.get_bus().pop_filtered(Gst.MessageType.ERROR)
    finally:
        p.set_state(Gst.State.NULL)
    return out, msg and msg.parse_error()[0].message


def _samples_by_decoder(desc: str, frames: int, meta: bool = True) -> dict[str, list[Any]]:
    """The samples of ``desc`` (a pipeline string with ``{dec}`` where the decoder goes) with avdec_h264 and with
    interopdec, each run to EOS without an error and giving ``frames`` pictures."""
    out = {}
    for dec in ("avdec_h264", NAME):
        samples, err = _samples(desc.format(dec=dec), meta=meta)
        assert err is None and len(samples) == frames, (dec, err, len(samples))
        out[dec] = samples
    return out


def _pts_by_decoder(desc: str, frames: int) -> dict[str, list[int]]:
    return {dec: [s.get_buffer().pts for s in ss] for dec, ss in _samples_by_decoder(desc, frames).items()}


def test_byte_stream_pts_equal_avdec_h264s(bytestream854: str):
    pts = _pts_by_decoder(f"filesrc location={bytestream854} ! h264parse ! {{dec}} ! appsink name=s", 40)
    assert pts[NAME] == pts["avdec_h264"]
    assert all(0 < b - a <= 33_333_334 for a, b in zip(pts[NAME], pts[NAME][1:])) and pts[NAME][0] == 0


def test_a_branch_linked_later_without_video_meta_gets_the_default_layout(long_clip: str):
    # the first branch takes GstVideoMeta; a plain appsink linked to the tee later sends RECONFIGURE, and the
    # element must ask again (tee then answers for both branches: no meta)
    p = Gst.parse_launch(f"filesrc location={long_clip} ! {DEC} ! tee name=t t. ! queue ! videoconvert ! "
                         "video/x-raw,format=RGB ! fakesink sync=true")
    dec = p.get_by_name("dec")
    p.set_state(Gst.State.PLAYING)
    try:
        assert p.get_state(10 * Gst.SECOND)[0] == Gst.StateChangeReturn.SUCCESS
        assert dec.get_property("copied-frames") == 0
        q, s = Gst.ElementFactory.make("queue"), Gst.ElementFactory.make("appsink")
        s.set_property("sync", False)
        for e in (q, s):
            p.add(e)
        q.link(s)
        # playing before the tee links to them: a buffer the tee pushed into a branch not yet active would come back
        # FLUSHING, which the tee passes upstream, pausing the stream (seen once in a loaded full run)
        s.sync_state_with_parent()
        q.sync_state_with_parent()
        p.get_by_name("t").link(q)
        samples = [s.emit("try-pull-sample", 10 * Gst.SECOND) for _ in range(5)]
        assert all(x is not None for x in samples)
        last = samples[-1]
        assert ng.video_meta(ng.pointer_of(last.get_buffer(), "Gst.Buffer")) is None
        assert last.get_buffer().get_size() == ng.video_info(ng.pointer_of(last.get_caps(), "Gst.Caps")).size
        assert dec.get_property("copied-frames") >= 1
    finally:
        p.set_state(Gst.State.NULL)


def _latency(pipeline: Any) -> tuple[bool, int, int]:
    q = Gst.Query.new_latency()
    assert pipeline.get_by_name("dec").get_static_pad("src").query(q)
    return q.parse_latency()


@pytest.mark.parametrize("threads", [4, 1])
def test_latency_query_adds_the_frame_threads_delay(clip854: str, threads: int):
    p = Gst.parse_launch(f"filesrc location={clip854} ! qtdemux ! h264parse ! interopdec name=dec "
                         f"max-threads={threads} ! fakesink")
    p.set_state(Gst.State.PAUSED)
    try:
        assert p.get_state(10 * Gst.SECOND)[0] == Gst.StateChangeReturn.SUCCESS
        live, lo, hi = _latency(p)
    finally:
        p.set_state(Gst.State.NULL)
    # each frame thread but the first holds a picture back (the clip has no B-frames: no reorder delay)
    assert not live and lo == (threads - 1) * 33_333_333
    assert hi == Gst.CLOCK_TIME_NONE or hi >= lo


def _live_decoder(caps: str) -> Gst.Pipeline:
    """A live byte-stream pipeline (appsrc ``in`` with ``caps`` added to its H.264 caps, interopdec ``dec``, appsink
    ``s`` offering GstVideoMeta), already PLAYING: set it to NULL when done."""
    p = Gst.parse_launch("appsrc name=in is-live=true format=time do-timestamp=true "
                         f"caps=video/x-h264,stream-format=byte-stream{caps} ! h264parse ! "
                         "interopdec name=dec max-threads=4 ! appsink name=s sync=false")
    ng.offer_video_meta(p.get_by_name("s"))
    p.set_state(Gst.State.PLAYING)
    return p


def _upstream_latency(dec: Gst.Element) -> int:
    """The minimum latency upstream of ``dec`` reports (what the decoder adds its own to)."""
    up = Gst.Query.new_latency()
    assert dec.get_static_pad("sink").peer_query(up)
    return int(up.parse_latency()[1])


def test_live_upstream_gets_slice_threads_and_no_frame_delay(bytestream854: str):
    data = Path(bytestream854).read_bytes()
    p = _live_decoder("")
    try:
        appsrc = p.get_by_name("in")
        appsrc.emit("push-buffer", Gst.Buffer.new_wrapped(data))
        appsrc.emit("end-of-stream")
        assert p.get_by_name("s").emit("try-pull-sample", 10 * Gst.SECOND) is not None
        dec = p.get_by_name("dec")
        assert str(dec._ctx.thread_type).endswith("SLICE")
        live, lo, _ = _latency(p)
        assert live and lo == _upstream_latency(dec)  # slice threads hold nothing back; no B-frames
    finally:
        p.set_state(Gst.State.NULL)


def test_caps_interlace_mode_and_chroma_site_equal_avdec_h264s(clip854: str):
    fields = {}
    for dec, samples in _samples_by_decoder(f"filesrc location={clip854} ! qtdemux ! h264parse ! {{dec}} ! "
                                            "appsink name=s", 40).items():
        st = samples[0].get_caps().get_structure(0)
        fields[dec] = (st.get_string("interlace-mode"), st.get_string("chroma-site"))
    assert fields[NAME] == fields["avdec_h264"] == ("progressive", "mpeg2")


def test_copy_path_zeroes_the_padding_and_is_metered(clip854: str):
    # a plain appsink: the default layout at 854 wide has 856-byte luma rows and 428-byte chroma rows
    with interop.copy_meter() as meter:
        samples, err = _samples(f"filesrc location={clip854} ! {DEC} ! appsink name=s", meta=False)
    assert err is None and len(samples) == 40
    for s in samples:
        ok, mi = s.get_buffer().map(Gst.MapFlags.READ)
        data = np.frombuffer(mi.data, np.uint8)
        y = data[:856 * 480].reshape(480, 856)
        u = data[856 * 480:856 * 480 + 428 * 240].reshape(240, 428)
        assert not y[:, 854:].any() and not u[:, 427:].any()
        s.get_buffer().unmap(mi)
    per_frame = 854 * 480 + 2 * 427 * 240  # bytes written, padding excluded
    mine = [r for r in meter.records if r.mapper == NAME]
    assert len(mine) == 40 and all(r.bytes == per_frame for r in mine)


def test_videoconvert_reads_the_several_memory_video_meta_like_avdec_h264s(clip854: str):
    rgb = {dec: [s.get_buffer().extract_dup(0, s.get_buffer().get_size()) for s in samples]
           for dec, samples in _samples_by_decoder(f"filesrc location={clip854} ! qtdemux ! h264parse ! {{dec}} ! "
                                                   "videoconvert ! video/x-raw,format=RGB ! appsink name=s", 40,
                                                   meta=False).items()}
    stride = (854 * 3 + 3) // 4 * 4
    for a, b in zip(rgb["avdec_h264"], rgb[NAME]):
        x = np.frombuffer(a, np.uint8).reshape(480, stride)[:, :854 * 3]
        y = np.frombuffer(b, np.uint8).reshape(480, stride)[:, :854 * 3]
        np.testing.assert_array_equal(x, y)


def _aus(clip: str) -> list[bytes]:
    samples, err = _samples(f"filesrc location={clip} ! qtdemux ! h264parse ! "
                            "video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=s", meta=False)
    assert err is None
    return [s.get_buffer().extract_dup(0, s.get_buffer().get_size()) for s in samples]


@pytest.mark.parametrize("max_errors", [-1, 10])
def test_max_errors_minus_one_keeps_going_over_corrupt_packets(clip854: str, max_errors: int):
    aus = _aus(clip854)
    rng = np.random.default_rng(2)
    junk = [rng.integers(0, 256, 4000, np.uint8).tobytes() for _ in range(30)]
    p = Gst.parse_launch("appsrc name=in format=time caps=video/x-h264,stream-format=byte-stream,alignment=au ! "
                         f"interopdec max-errors={max_errors} ! appsink name=s sync=false")
    sink = p.get_by_name("s")
    ng.offer_video_meta(sink)
    p.set_state(Gst.State.PLAYING)
    try:
        appsrc = p.get_by_name("in")
        for i, data in enumerate(junk[:15] + aus[:20] + junk[15:] + aus[20:]):
            b = Gst.Buffer.new_wrapped(data)
            b.pts = i * 33_333_333
            appsrc.emit("push-buffer", b)
        appsrc.emit("end-of-stream")
        n = 0
        while sink.emit("try-pull-sample", 10 * Gst.SECOND) is not None:
            n += 1
        err = p.get_bus().pop_filtered(Gst.MessageType.ERROR)
    finally:
        p.set_state(Gst.State.NULL)
    if max_errors < 0:
        assert err is None and n >= 30  # the pictures after each run of junk
    else:
        assert err is not None and "could not decode" in err.parse_error()[0].message


def test_video_frame_buffer_builds_the_whole_buffer_and_lets_go_of_keep():
    gc.collect()
    base = ng.live_wrapped()
    a, b = np.arange(64, dtype=np.uint8), np.arange(32, dtype=np.uint8)
    keep = [a, b]
    flag = int(Gst.BufferFlags.DELTA_UNIT)
    buf = ng.video_frame_buffer([(a.ctypes.data, 64), (b.ctypes.data, 32)], keep, ng.format_code("NV12"), 8, 8,
                                [8, 8], 5, 7, flag)
    try:
        assert ng.n_memory(buf) == 2 and ng.live_wrapped() - base == 2
        maps = [ng.MemoryMapping(ng.peek_memory(buf, i), False) for i in range(2)]
        assert [m.address for m in maps] == [a.ctypes.data, b.ctypes.data]
        for m in maps:
            m.close()
        meta = ng.video_meta(buf)
        assert meta is not None and (meta.format, meta.offsets, meta.strides) == ("NV12", (0, 64), (8, 8))
        assert ng.buffer_times(buf) == (5, 7)
        assert ctypes.c_uint.from_address(buf + ng.MINI_OBJECT_FLAGS_OFFSET).value & flag
        assert ng.memory_flags(ng.peek_memory(buf, 0)) & ng.GST_MEMORY_FLAG_READONLY
    finally:
        ng.libs()[0].gst_mini_object_unref(buf)
    gc.collect()
    assert ng.live_wrapped() == base


# ---- probes removed while decoding, B-frame timestamps, latency, leaks -----------------------------------------

PROBE_CHURN = r"""
import sys, threading, time
from interop.elements.gst_decoder import register
from interop.tensors.gst import gst
Gst = gst(); register()
p = Gst.parse_launch(f"multifilesrc location={sys.argv[1]} loop=true ! h264parse ! interopdec name=dec max-threads=1 "
                     "! queue ! fakesink sync=false")
src = p.get_by_name("dec").get_static_pad("src")
p.set_state(Gst.State.PLAYING)
stop = []
def busy():  # another Python thread, so that the GIL changes hands
    while not stop:
        pass
threading.Thread(target=busy, daemon=True).start()
t0 = time.monotonic()
while time.monotonic() - t0 < 3:
    src.remove_probe(src.add_probe(Gst.PadProbeType.EVENT_UPSTREAM, lambda pad, info: Gst.PadProbeReturn.OK))
stop.append(1)
m = p.get_bus().pop_filtered(Gst.MessageType.ERROR)
p.set_state(Gst.State.NULL)
print("error" if m else "ok")
"""


def test_probes_added_and_removed_while_decoding_do_not_deadlock(bytestream854: str):
    # removing a probe runs its (PyGObject) destroy notify under the src pad's lock, and that notify waits for the
    # GIL: the decoder's streaming thread must never take that lock while it holds the GIL
    try:
        p = subprocess.run([sys.executable, "-c", PROBE_CHURN, bytestream854], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the decoder deadlocked with a thread removing pad probes")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def _bframes_h264(path: str, bf: int, pyramid: bool) -> str:
    """A raw Annex B H.264 stream of 30 pictures with ``bf`` consecutive B-frames (libx264 through PyAV)."""
    import av

    with av.open(path, "w", format="h264") as out:
        s = out.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
        s.options = {"bf": str(bf), "preset": "medium", "x264-params": f"b-pyramid={'normal' if pyramid else 'none'}"}
        base = np.random.default_rng(0).integers(0, 255, (240, 320, 3), np.uint8)
        for i in range(30):
            for p in s.encode(av.VideoFrame.from_ndarray(np.roll(base, i * 3, axis=1), format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


@pytest.fixture(scope="module", params=[(2, False), (3, True)], ids=["bf2", "bf3-pyramid"])
def bframes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    bf, pyramid = request.param
    return _bframes_h264(str(tmp_path_factory.mktemp("clips") / f"bf{bf}.h264"), bf, pyramid)


def test_b_frame_byte_stream_pts_equal_avdec_h264s(bframes: str):
    # h264parse gives a byte stream's buffers a DTS only; the pictures' pts are the DTS in increasing order, not the
    # DTS of the packet that released each picture (late by the reorder depth)
    pts = _pts_by_decoder(f"filesrc location={bframes} ! h264parse ! {{dec}} max-threads=2 ! appsink name=s", 30)
    assert pts[NAME] == pts["avdec_h264"]
    assert pts[NAME][0] == 0 and all(0 < b - a <= 33_333_334 for a, b in zip(pts[NAME], pts[NAME][1:]))


def test_live_latency_adds_the_reorder_depth_and_is_announced(bframes: str):
    # a live pipeline asks for the latency at PLAYING, before the decoder knows the stream: the decoder posts
    # LATENCY once its reorder depth is known, and its answer then adds that many frames
    p = _live_decoder(",framerate=30/1")
    try:
        p.get_by_name("in").emit("push-buffer", Gst.Buffer.new_wrapped(Path(bframes).read_bytes()))
        for _ in range(10):
            assert p.get_by_name("s").emit("try-pull-sample", 10 * Gst.SECOND) is not None
        dec = p.get_by_name("dec")
        depth = int(dec._ctx.reorder_depth)
        assert depth >= 1
        live, lo, _ = _latency(p)
        assert live and lo == _upstream_latency(dec) + depth * 33_333_333  # slice threads: no frame-thread term
        posters = []
        while (m := p.get_bus().pop_filtered(Gst.MessageType.LATENCY)) is not None:
            posters.append(m.src)
        assert dec in posters
    finally:
        p.set_state(Gst.State.NULL)


def test_automatic_thread_count_is_ffmpegs(tmp_path):
    import av

    from interop.elements.gst_decoder import _frame_threads

    # the count FFmpeg really picks once the decoder opens (thread_count=0, AUTO: as the element opens it)
    h264 = av.CodecContext.create("h264", "r")
    h264.thread_type, h264.thread_count = "AUTO", 0
    expected = _frame_threads(h264, False, 0)
    packets = av.CodecContext.create("h264", "r").parse(Path(_bframes_h264(str(tmp_path / "bf.h264"), 2, False))
                                                         .read_bytes())
    for packet in packets[:4]:
        h264.decode(packet)
    assert h264.thread_count == expected
    assert _frame_threads(h264, False, 3) == 3
    assert _frame_threads(h264, True, 3) == 1  # slice threads hold nothing back


def test_interlaced_pictures_are_flagged_and_caps_say_mixed(tmp_path, caplog: pytest.LogCaptureFixture):
    import av
    from gi.repository import GstVideo

    path = str(tmp_path / "interlaced.h264")
    with av.open(path, "w", format="h264") as out:
        s = out.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
        s.options = {"x264-params": "interlaced=1:tff=1", "flags": "+ildct+ilme", "preset": "ultrafast"}
        rng = np.random.default_rng(0)
        for _ in range(6):
            for p in s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 255, (240, 320, 3), np.uint8),
                                                         format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    with caplog.at_level("WARNING", logger="interop"):
        samples, err = _samples(f"filesrc location={path} ! h264parse ! {NAME} ! appsink name=s")
    assert err is None and len(samples) == 6
    assert all(s.get_caps().get_structure(0).get_string("interlace-mode") == "mixed" for s in samples)
    flags = [s.get_buffer().get_flags() for s in samples]
    assert all(f & GstVideo.VideoBufferFlags.INTERLACED for f in flags)
    # the field order is not known (docs): said once per stream
    assert sum("field order unknown" in r.getMessage() for r in caplog.records) == 1


def test_a_raising_frame_hook_leaks_no_buffer(clip854: str):
    gc.collect()
    base = ng.live_wrapped()
    p = Gst.parse_launch(f"filesrc location={clip854} ! {DEC} ! appsink name=s sync=false")
    ng.offer_video_meta(p.get_by_name("s"))

    def hook(vf, buf):
        raise RuntimeError("a test hook failed")

    p.get_by_name("dec").on_frame = hook
    p.set_state(Gst.State.PLAYING)
    try:
        msg = p.get_bus().timed_pop_filtered(10 * Gst.SECOND, Gst.MessageType.ERROR | Gst.MessageType.EOS)
        assert msg is not None and msg.type == Gst.MessageType.ERROR
        assert "a test hook failed" in msg.parse_error()[0].message
    finally:
        p.set_state(Gst.State.NULL)
    del p, msg
    gc.collect()
    assert ng.live_wrapped() == base


def test_buffer_field_offsets_are_refused_off_lp64(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ng, "_LP64", False)
    monkeypatch.setattr(ng, "_held_libs", [])
    a = np.zeros(64, np.uint8)
    with pytest.raises(interop.errors.BackendUnavailableError, match="LP64"):
        ng.video_frame_buffer([(a.ctypes.data, 64)], a, 0, 0, 0, None, 0, 0, 0)
    assert not hasattr(ng, "BUFFER_DTS_OFFSET")  # unused, and unchecked


def test_buffer_field_offsets_are_the_ones_gstreamer_reads():
    b = Gst.Buffer.new()
    b.pts, b.dts, b.duration = 111, 222, 333
    assert ng.buffer_times(ng.pointer_of(b, "Gst.Buffer")) == (111, 333)


def _keyint10_h264(path: str, frames: int = 40, keyint: int = 10) -> str:
    """A raw Annex B H.264 stream with 2 B-frames, an IDR every ``keyint`` pictures and SPS/PPS before each."""
    import av

    with av.open(path, "w", format="h264") as out:
        s = out.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 160, 128, "yuv420p"
        s.options = {"bf": "2", "preset": "ultrafast",
                     "x264-params": f"keyint={keyint}:min-keyint={keyint}:scenecut=0:repeat-headers=1:b-adapt=0"}
        base = np.random.default_rng(0).integers(0, 255, (128, 160, 3), np.uint8)
        for i in range(frames):
            for p in s.encode(av.VideoFrame.from_ndarray(np.roll(base, i * 3, axis=1), format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


def _pts_dropping(desc: str, drop: set[int]) -> tuple[list[int], list[int]]:
    """The pts of every picture of ``desc`` (its parser named hp, ending in ``appsink name=s``) when the parser's
    buffers whose index is in ``drop`` never reach the decoder, and the DTS of the buffers that do."""
    p = Gst.parse_launch(desc)
    n = [0]
    dts: list[int] = []

    def probe(pad: Any, info: Any) -> Any:
        n[0] += 1
        if n[0] - 1 in drop:
            return Gst.PadProbeReturn.DROP
        dts.append(info.get_buffer().dts)
        return Gst.PadProbeReturn.OK

    p.get_by_name("hp").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe)
    sink = p.get_by_name("s")
    sink.set_property("sync", False)
    ng.offer_video_meta(sink)
    p.set_state(Gst.State.PLAYING)
    out = []
    try:
        while (s := sink.emit("try-pull-sample", 10 * Gst.SECOND)) is not None:
            out.append(s.get_buffer().pts)
    finally:
        p.set_state(Gst.State.NULL)
    return out, dts


@pytest.mark.parametrize("threads", [1, 3])
def test_joining_mid_gop_byte_stream_pts_equal_avdec_h264s(tmp_path, threads: int):
    # the packets before the first keyframe give no picture: their DTS must not be handed to later pictures. Not
    # compared with avdec_h264: it outputs concealed pictures for those packets and loses a DTS on the way
    path = _keyint10_h264(str(tmp_path / "k10.h264"))
    pts, dts = _pts_dropping(f"filesrc location={path} ! h264parse name=hp ! {NAME} max-threads={threads} ! "
                             "appsink name=s", {0})
    assert len(pts) == 30 and len(dts) == 39  # the three GOPs after the first, whole
    assert pts == sorted(dts[9:])  # from the keyframe on, each picture takes the lowest DTS not handed out


def test_many_frame_threads_byte_stream_pts_equal_avdec_h264s(tmp_path):
    # 100 frame threads hold back 100 pictures: every one of their DTS must still be there when they come out
    path = _keyint10_h264(str(tmp_path / "long.h264"), frames=150, keyint=250)
    pts = _pts_by_decoder(f"filesrc location={path} ! h264parse ! {{dec}} max-threads=100 ! appsink name=s", 150)
    assert pts[NAME] == pts["avdec_h264"]
