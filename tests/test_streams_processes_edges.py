"""run_streams with --decode processes at its edges: gst: pipeline errors worded as in threads mode, a format the
model refuses ending only its own stream, and GStreamer frames decoded into the pool never dropped or overwritten in
flight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from tests import test_streams  # noqa: E402

clip = test_streams.clip  # the bundled clip (skipped without the detector model)


def test_processes_mode_words_a_gst_pipeline_error_as_threads_mode_does(clip: str) -> None:
    """7ee4845 rewords a gst: pipeline that ends in another sink (and one giving no raw video) in _Input, which
    threads mode uses; the decode worker of processes mode builds its pipeline itself and still says the library's
    'could not link fakesink0 to appsink0 ... Check the element names (gst-inspect-1.0)', advice that is wrong."""
    from interop.streams import run_streams

    bad = "gst:videotestsrc num-buffers=30 ! fakesink"
    res = run_streams([bad, clip], device="CPU", frames=2, decode="processes")
    assert "passes nothing on" in (res.streams[0].error or ""), res.streams[0].error
    assert "Check the element names" not in (res.streams[0].error or "")


def _gray16_clip(tmp_path: Path) -> str:
    import av

    path = str(tmp_path / "gray16.mkv")
    with av.open(path, "w") as c:
        s = c.add_stream("ffv1", rate=10)
        s.width, s.height, s.pix_fmt = 64, 64, "gray16le"
        for _ in range(3):
            rgb = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="gray16le")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.mark.parametrize("allow_copy", [False, True])
def test_a_format_the_model_refuses_ends_only_its_stream_in_processes_mode(clip: str, tmp_path: Path,
                                                                          allow_copy: bool) -> None:
    """docs/streams.md: a stream whose decoding fails ends with its error, the others go on (threads mode does so
    for a gray16le input). Decoded in processes, the model's refusal of one stream's pixel format raised out of
    run_streams (the good stream's results lost) with the Python-only 'Pass allow_copy=True to Inference', and
    allow_copy=True did not convert it."""
    from interop.streams import run_streams

    res = run_streams([_gray16_clip(tmp_path), clip], device="CPU", frames=2, decode="processes",
                      allow_copy=allow_copy)
    gray, good = res.streams
    assert good.error is None and good.run.frames == 2
    if allow_copy:
        assert gray.error is None and gray.run.frames == 2
    else:
        assert gray.error_type == "UnsupportedFormatError"


def test_a_gst_format_the_model_refuses_ends_only_its_stream_in_processes_mode(clip: str) -> None:
    """The same for a gst: input (GRAY16_LE, which interop maps and the model cannot take): the stream ends with
    threads mode's words (convert in the pipeline), the other goes on; the refusal raised out of run_streams."""
    from interop.streams import run_streams

    gray = "gst:videotestsrc num-buffers=5 ! video/x-raw,format=GRAY16_LE,width=64,height=48"
    res = run_streams([gray, clip], device="CPU", frames=2, decode="processes")
    bad, good = res.streams
    assert good.error is None and good.run.frames == 2
    assert bad.error_type == "UnsupportedFormatError" and "Convert in the pipeline" in (bad.error or "")


def test_a_torn_frame_is_counted_in_its_streams_warnings() -> None:
    """A frame the inference process drops as torn (its marker says the worker was still writing it) is never
    silent: the stream's warnings say how many (a stream short of --frames with no error and no warning was how
    the overwritten pool buffers showed)."""
    from types import SimpleNamespace

    from interop.pipeline import RunResult
    from interop.streams import StreamResult, _end_stream

    w = SimpleNamespace(video="a.mp4", rx=SimpleNamespace(torn=3), proc=SimpleNamespace(wait=lambda timeout: 0))
    s = StreamResult(0, RunResult("a.mp4", "", "", 64, 48, None))
    s.run.frames = 7
    _end_stream(s, w, 10)  # type: ignore[arg-type]
    assert s.error is None
    assert [m for m in s.run.warnings if "3 frames" in m and "torn" in m], s.run.warnings


def test_gst_zero_copy_frames_are_not_dropped_silently_in_processes_mode(clip: str) -> None:
    """Two videotestsrc streams whose frames the element writes into the worker's pool (zero copy): the inference
    process logged 'dropped frame N: its writer did not finish it (marker state 1, seq S+1, expected S)' for a few
    frames of many runs (the pool buffer was being written again while its frame was in flight) and the stream
    ended with fewer frames than --frames, no error and no warning. Probabilistic (it failed in about half the runs
    when written): the frames in flight as the worker ended were overwritten; the test after this one makes that
    certain."""
    from interop.streams import run_streams

    src = "gst:videotestsrc ! video/x-raw,format=I420,width=640,height=480"
    res = run_streams([src, src], device="CPU", frames=100, decode="processes", pool_size=3)
    for s in res.streams:
        assert s.error is None
        assert (s.run.frames, s.run.warnings) == (100, []), s.worker_zero_copy


def test_a_gst_worker_ending_never_tears_the_frames_it_left_in_flight() -> None:
    """The cause of the drops above, made certain: the worker's FrameSender.close() gives back the buffers of the
    frames still in flight (the inference process may not have read them yet), and the worker closed it while its
    pipeline still ran, an element waiting in the pool's acquire for exactly those buffers. Here the consumer reads
    nothing until the worker has exited (every slot is held, so the element waits in acquire as the worker ends):
    each frame must arrive whole, none dropped as torn."""
    from interop.dma import TransportTimeoutError
    from interop.streams import _await_hello, _Worker

    # the frames sent (held: nobody releases them) and the appsink's queue (4) take every buffer of the pool (3 + 4 +
    # the element's minimum), so videotestsrc waits in the pool's acquire as the worker ends
    n = 8
    w = _Worker(0, "gst:videotestsrc ! video/x-raw,format=I420,width=320,height=240", n)
    try:
        assert "error" not in _await_hello([w])[0]
        w.go(3)
        assert w.proc.wait(30) == 0
        got = []
        while True:
            try:
                f = w.rx.recv(timeout=5)
            except TransportTimeoutError:  # a torn frame (counted below) or a slot message
                continue
            if f is None:
                break
            got.append(f.width)
            f.release()
        assert (len(got), w.rx.torn) == (n, 0)
    finally:
        w.stop()


def test_a_claimed_frame_outlives_gstreamer_freeing_its_memory() -> None:
    """claim() handed the worker a frame sharing the planes of the frame GStreamer's memory holds: GStreamer freeing
    the memory first (here the appsink's next pull lets go of the sample before; a tee or a sink's last sample frees
    it on a streaming thread, at any moment) released the worker's frame under it and gave the slot back to the pool
    while that frame was still to be sent (or on its way). The claimed frame must keep its slot until it is
    released."""
    import gc

    from interop.elements.appsink import AppSinkSource
    from interop.elements.pool import GstFramePool
    from interop.tensors.dma import buffers_of

    pool = GstFramePool()
    src = AppSinkSource("videotestsrc ! video/x-raw,format=I420,width=64,height=48", timeout=10, pool=pool)
    try:
        pool.set_count(3)
        gf = src.read()
        assert gf is not None
        f = pool.claim(gf.native)
        assert f is not None
        gf.release()
        del gf
        nxt = src.read()  # the appsink lets go of the first sample: GStreamer frees its memory
        gc.collect()
        assert not any(t.released for t in f.tensors), "the claimed frame was released when GStreamer let go"
        b = buffers_of(f)[0]
        assert pool.frames is not None and b.pool_slot.index not in pool.frames._free
        f.release()
        assert nxt is not None
        nxt.release()
    finally:
        src.close()
        pool.close()


def test_processes_mode_does_not_advise_allow_copy_for_a_refusal_about_the_model(tmp_path: Path) -> None:
    """9a4b194 gated the --allow-copy advice on _about_format in threads mode; d9a4cc8's _refused (processes mode)
    rewords every UnsupportedFormatError with _supported_message: a --model of two inputs gets 'Run with --allow-copy
    ... to convert each I420 frame to yuv420p' with allow_copy already on (I420 is yuv420p)."""
    from tests.support.requirements import need_module

    need_module("av")
    need_module("openvino")
    import openvino as ov
    import openvino.opset11 as ops

    from interop.clip import default_clip
    from interop.streams import run_streams

    x = ops.parameter([1, 3, 64, 64], np.float32, name="a")
    y = ops.parameter([1, 3, 64, 64], np.float32, name="b")
    ov.save_model(ov.Model([ops.add(x, y)], [x, y], "two_inputs"), str(tmp_path / "two.xml"))
    clip = default_clip()
    res = run_streams([clip, clip], model=str(tmp_path / "two.xml"), device="CPU", frames=2, decode="processes",
                      allow_copy=True)
    for s in res.streams:
        assert s.error is not None and "2 inputs" in s.error, s.error
        assert "allow-copy" not in s.error and "I420 frame to yuv420p" not in s.error, s.error
