"""`interop run` end to end (in a subprocess, as a user runs it) and the decode_infer example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.ffmpeg_clips import raw_clip
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model_or_skip() -> None:
    from interop import textdet
    from interop.errors import BackendUnavailableError

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interop", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_run_json_default_clip_zero_copies(tmp_path) -> None:
    _model_or_skip()
    png = tmp_path / "last.png"
    p = _run("run", "--json", "--frames", "6", "--no-progress", "--save", str(png))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1  # stdout carries the JSON only; everything else went to stderr
    d = json.loads(lines[-1])
    for k in ("frames", "fps", "copies", "bytes_copied", "output_bytes", "device", "model", "stages"):
        assert k in d, k
    assert set(d["stages"]) >= {"decode", "map", "infer"}
    assert d["frames"] == 6 and d["fps"] > 0
    started, ended = d["monotonic_s"]  # the host's monotonic clock: this process's, too
    assert started <= ended <= time.monotonic() and ended - started >= d["wall_s"] + d["compile_s"] - 1e-3
    assert d["copies"] == 0 and d["bytes_copied"] == 0
    assert d["output_bytes"] == 6 * 4 * d["input_size"][0] * d["input_size"][1]  # one f32 map per frame
    assert d["device"] in ("CPU", "NPU") and "PP-OCRv4" in d["model"]
    assert d["detections"]["frames_with_text"] == 6 and d["detections"]["boxes_per_frame_mean"] >= 3
    assert "copies        0" in p.stderr and "text boxes" in p.stderr
    import cv2

    img = cv2.imread(str(png))
    assert img is not None and img.shape == (480, 640, 3)


def test_run_human_report_on_padded_video(tmp_path) -> None:
    _model_or_skip()
    from interop.clip import make_clip

    path = make_clip(str(tmp_path / "odd.mp4"), 854, 480, frames=4, preset="ultrafast")
    p = _run("run", path, "--frames", "3", "--no-progress", "--precision", "f32")
    assert p.returncode == 0, p.stderr
    assert "copies        0" in p.stdout and "fps" in p.stdout and "decode" in p.stdout
    assert "854x480" in p.stdout


def test_run_save_video(tmp_path) -> None:
    _model_or_skip()
    import av

    mp4 = tmp_path / "boxes.mp4"
    p = _run("run", "--frames", "5", "--no-progress", "--save", str(mp4))
    assert p.returncode == 0, p.stderr
    with av.open(str(mp4)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 5


def test_run_bad_arguments_are_errors() -> None:
    p = _run("run", "/no/such/video.mp4", "--no-progress")
    assert p.returncode == 1 and "not found" in p.stderr
    p = _run("run", "--save", "out.txt", "--no-progress")
    assert p.returncode == 1 and ".png" in p.stderr


def test_example_decode_infer() -> None:
    _model_or_skip()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "decode_infer.py"), "--frames", "4"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "copies 0 (0 bytes)" in p.stdout
    assert p.stdout.count("text boxes") == 4


def test_result_worker_does_every_item_in_order_and_waits_at_close() -> None:
    import threading

    from interop.pipeline import _ResultWorker

    done: list[int] = []
    threads: set[int] = set()
    w = _ResultWorker(lambda out, i: (done.append(i), threads.add(threading.get_ident())), threads=1)
    for i in range(3 * _ResultWorker.BACKLOG):  # more than the queue holds: put waits for the worker
        w.put({"x": i}, i)
    w.close()
    assert done == list(range(3 * _ResultWorker.BACKLOG))
    assert threading.get_ident() not in threads  # made on the worker's thread, not the caller's


def test_result_worker_reraises_the_first_error_once() -> None:
    from interop.pipeline import _ResultWorker

    done: list[int] = []

    def work(out: dict, i: int) -> None:
        if i in (2, 4):
            raise ValueError(f"bad output {i}")
        done.append(i)

    w = _ResultWorker(work, threads=1)  # one thread: "after the first error" is well defined
    for i in range(6):
        w.put({}, i)
    with pytest.raises(ValueError, match="bad output 2"):
        w.close()
    assert done == [0, 1]  # after the first error the rest is drained, not worked on
    w.close()  # closed, its error already raised: nothing more
    quiet = _ResultWorker(work)
    quiet.put({}, 2)
    quiet.close(raise_error=False)  # a run failing on its own stops the worker without a second error
    for i in range(2 * _ResultWorker.BACKLOG):
        quiet.put({}, i)  # requests finishing after the run failed: dropped, the callback never waits


def test_result_worker_threads_work_at_once_and_callbacks_run_one_at_a_time() -> None:
    import threading

    from interop.pipeline import RunResult, _result_handler, _ResultWorker

    # two items in flight at once on two threads (one thread would time the barrier out: BrokenBarrierError)
    both = threading.Barrier(2, timeout=10)
    done: list[int] = []
    w = _ResultWorker(lambda out, i: (both.wait(), done.append(i)), threads=2)
    w.put({}, 0)
    w.put({}, 1)
    w.close()
    assert sorted(done) == [0, 1]
    # the caller's callbacks are serialised: on_progress counts 1, 2, ... n however many threads make results
    res = RunResult("v", "m", "CPU", 8, 8, None)
    inside, seen, overlap = [0], [], []

    def progress(n: int, total: int | None) -> None:
        inside[0] += 1
        overlap.append(inside[0])
        threading.Event().wait(0.001)
        seen.append(n)
        inside[0] -= 1

    handle = _result_handler(res, False, False, progress, None, 200)
    w = _ResultWorker(handle, threads=4)
    for i in range(200):
        w.put({}, i)
    w.close()
    assert seen == list(range(1, 201)) and max(overlap) == 1


def test_run_leaves_opencv_threads_as_they_were() -> None:
    import cv2

    from interop.pipeline import run

    _model_or_skip()
    before = cv2.getNumThreads()
    seen: list[int] = []
    real = cv2.findContours

    def spy(*a, **k):  # noqa: ANN002, ANN003 - cv2's own signature
        seen.append(cv2.getNumThreads())
        return real(*a, **k)

    cv2.findContours = spy
    try:
        res = run(frames=3)
    finally:
        cv2.findContours = real
    assert res.frames == 3 and len(res.boxes) == 3 and res.copies == 0
    assert seen and set(seen) == {1}  # post-processing ran with OpenCV's pool off
    assert cv2.getNumThreads() == before


# issue 17: per-frame JSON results, resolution changes, damaged input, --allow-copy


def _json_run(*args: str, cwd: str = ROOT) -> tuple[subprocess.CompletedProcess, dict]:
    p = subprocess.run([sys.executable, "-m", "interop", "run", *args, "--no-progress", "--json"], capture_output=True,
                       text=True, timeout=300, cwd=cwd)
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, (p.stdout, p.stderr)
    return p, json.loads(lines[0])


def test_run_json_carries_every_frames_results() -> None:
    _model_or_skip()
    p, d = _json_run("--frames", "4")
    assert p.returncode == 0, p.stderr
    (s,) = d["streams"]
    assert s["input"] == d["video"] and s["frames"] == d["frames"] == 4
    assert [r["index"] for r in s["results"]] == [0, 1, 2, 3]
    for r in s["results"]:
        assert (r["width"], r["height"]) == (640, 480) and isinstance(r["pts"], int) and r["time"] >= 0
        assert len(r["boxes"]) >= 3
        for b in r["boxes"]:
            assert len(b["points"]) == 4 and all(len(pt) == 2 for pt in b["points"]) and 0 < b["score"] <= 1
            assert all(0 <= x < 640 and 0 <= y < 480 for x, y in b["points"])
    assert s["results"][0]["boxes"] != s["results"][3]["boxes"]  # each frame's own, not the last frame's


def _size_change_clip(tmp_path, sizes=((320, 240), (640, 480))) -> str:
    """An MPEG-TS stream: 4 frames of rendered text at each size of ``sizes`` in turn (encodes concatenated)."""
    from interop.clip import make_clip

    out = tmp_path / "change.ts"
    with open(out, "wb") as f:
        for j, (w, h) in enumerate(sizes):
            part = make_clip(str(tmp_path / f"part{j}.ts"), w, h, frames=4, preset="ultrafast")
            f.write(open(part, "rb").read())
    return str(out)


def test_run_resolution_change_boxes_in_each_frames_coordinates(tmp_path) -> None:
    _model_or_skip()
    import av

    video = _size_change_clip(tmp_path)
    mp4 = tmp_path / "saved.mp4"
    p, d = _json_run(video, "--save", str(mp4))
    assert p.returncode == 0, p.stderr
    (s,) = d["streams"]
    assert [(r["width"], r["height"]) for r in s["results"]] == [(320, 240)] * 4 + [(640, 480)] * 4
    assert s["sizes"] == [{"width": 320, "height": 240, "from_frame": 0}, {"width": 640, "height": 480, "from_frame": 4}]
    assert d["size"] == [320, 240]  # the first frame's size, whatever the container's header said
    small = [x for r in s["results"][:4] for b in r["boxes"] for x, _ in b["points"]]
    large = [x for r in s["results"][4:] for b in r["boxes"] for x, _ in b["points"]]
    assert small and large and max(small) < 320 and max(large) > 320  # the 640-wide frames' boxes span them
    assert p.stderr.count("frame size changed from 320x240 to 640x480 at frame 4") == 1  # logged once
    with av.open(str(mp4)) as c:  # a video has one size: the later frames are scaled to the first one
        assert [(f.width, f.height) for f in c.decode(video=0)] == [(320, 240)] * 8


def test_run_sizes_list_a_return_to_an_earlier_size(tmp_path) -> None:
    """320x240 -> 640x480 -> 320x240: the third part needs no compile (its variant exists) but is a size change all
    the same; `sizes` missed it."""
    _model_or_skip()
    from interop.pipeline import run

    r = run(_size_change_clip(tmp_path, ((320, 240), (640, 480), (320, 240))))
    assert [r.frame_info[i][2:] for i in range(r.frames)] == [(320, 240)] * 4 + [(640, 480)] * 4 + [(320, 240)] * 4
    assert r.sizes == [(0, 320, 240), (4, 640, 480), (8, 320, 240)] and len(r.compile_spans) == 2


def test_run_cut_mp4_decodes_what_is_there_and_warns(tmp_path) -> None:
    _model_or_skip()
    import av

    try:  # the helpers are moving to tests/support
        from tests.support.ffmpeg_clips import make_clip
    except ImportError:
        from tests.ffmpeg_clips import make_clip

    full = make_clip(tmp_path / "full.mp4", 160, 120, 40)
    fast = tmp_path / "faststart.mp4"  # the index at the front, as streaming encoders write it
    with av.open(str(full)) as i, av.open(str(fast), "w", options={"movflags": "faststart"}) as o:
        s = o.add_stream_from_template(i.streams.video[0])
        for pkt in i.demux(i.streams.video[0]):
            if pkt.dts is not None:
                pkt.stream = s
                o.mux(pkt)
    data = fast.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    p, d = _json_run(str(cut))
    assert p.returncode == 0, p.stderr
    assert 0 < d["frames"] < 40
    assert d["streams"][0]["declared_frames"] == 40
    warn = f"ended early: {d['frames']} of the 40 frames its container declares"
    assert warn in p.stderr and any(warn in w for w in d["warnings"])


def test_run_mp4_without_index_and_audio_only_are_exact_errors(tmp_path) -> None:
    import av
    import numpy as np

    try:  # the helpers are moving to tests/support
        from tests.support.ffmpeg_clips import make_clip
    except ImportError:
        from tests.ffmpeg_clips import make_clip

    data = make_clip(tmp_path / "full.mp4", 160, 120, 10).read_bytes()
    nomoov = tmp_path / "nomoov.mp4"
    nomoov.write_bytes(data[: data.rfind(b"moov") - 4])  # libx264 in mp4 writes the index last: cut it off
    wav = tmp_path / "audio.wav"
    with av.open(str(wav), "w") as o:
        s = o.add_stream("pcm_s16le", rate=8000)
        f = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        f.sample_rate = 8000
        for pkt in [*s.encode(f), *s.encode()]:
            o.mux(pkt)
    for path, expect in ((nomoov, "without its index (no moov atom)"), (wav, "has no video stream (it has audio)")):
        p, d = _json_run(str(path))
        assert p.returncode == 1 and d["error"]["type"] == "VideoInputError", p.stderr
        assert expect in d["error"]["message"] and "Traceback" not in p.stderr


def test_run_allow_copy_converts_an_unsupported_pixel_format_and_counts_it(tmp_path) -> None:
    _model_or_skip()
    video = raw_clip(tmp_path, "yuv410p")
    p, d = _json_run(video)
    assert p.returncode == 1 and d["error"]["type"] == "UnsupportedFormatError"
    assert "--allow-copy" in d["error"]["message"] and "reformat(" not in d["error"]["message"]
    p, d = _json_run(video, "--allow-copy")
    assert p.returncode == 0, p.stderr
    assert d["frames"] == 3 and d["copies"] == 3 and d["bytes_copied"] == 3 * (96 * 64 + 2 * 48 * 32)
    assert d["streams"][0]["converted"] == {"yuv410p": "yuv420p"}
    assert "converted to yuv420p" in p.stderr


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_run_allow_copy_with_several_inputs_converts_per_stream(tmp_path, decode) -> None:
    """With several inputs each stream converts a pixel format interop has no planes for (counted in that stream's
    copies, beside a decode worker's copy into its pool); without --allow-copy those streams end with the typed
    error and the others run."""
    _model_or_skip()
    odd, plain = raw_clip(tmp_path, "yuv410p"), raw_clip(tmp_path, "yuv420p")
    p, d = _json_run(odd, plain, "--decode", decode)
    bad, good = d["streams"]
    assert p.returncode != 0 and bad["error"]["type"] == "UnsupportedFormatError" and d["decode"] == decode
    assert "--allow-copy" in bad["error"]["message"] and good["frames"] == 3 and good.get("error") is None
    p, d = _json_run(odd, plain, "--allow-copy", "--decode", decode)
    assert p.returncode == 0, p.stderr
    a, b = d["streams"]
    assert a["frames"] == b["frames"] == 3 and a.get("error") is None and b.get("error") is None
    if decode == "processes":
        assert a["copies"] == 2 * 3 and b["copies"] == 3  # conversion + pool write per frame; pool write only
    else:
        assert a["copies"] == 3 and b["copies"] == 0  # the conversion only: decoded frames reach the model in place
        assert "yuv410p->yuv420p" in a["copy"] and d["copies"] == 3


# ---- `interop run gst:PIPELINE`: GStreamer decodes, the same loop maps and infers --------------------------


def _clip_pipeline() -> str:
    from interop.clip import default_clip

    return f"gst:filesrc location={default_clip()} ! qtdemux ! h264parse ! avdec_h264 ! appsink"


def _iou(a, b) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union else 0.0


def test_run_gst_input_zero_copies_and_pyav_detections() -> None:
    _model_or_skip()
    from interop.pipeline import run

    n = 12
    g = run(_clip_pipeline(), device="CPU", frames=n)
    a = run(None, device="CPU", frames=n)
    assert g.frames == a.frames == n
    assert g.copies == 0 and g.bytes_copied == 0
    assert (g.width, g.height, g.input_size) == (a.width, a.height, a.input_size)
    for i in range(n):
        gb, ab = [b.bbox for b in g.boxes[i]], [b.bbox for b in a.boxes[i]]
        assert len(gb) == len(ab) >= 3, i
        for box in ab:
            assert max(_iou(box, other) for other in gb) >= 0.8, (i, box, gb)
    # pts in ns from the buffers, one frame period apart (qtdemux may shift the whole timeline by its edit list)
    pts = [g.frame_info[i][0] for i in range(4)]
    assert all(isinstance(x, int) for x in pts) and {b - a for a, b in zip(pts, pts[1:])} <= {33_333_333, 33_333_334}
    assert abs((g.frame_info[3][1] - g.frame_info[0][1]) - (a.frame_info[3][1] - a.frame_info[0][1])) < 1e-3


def test_run_gst_cli_json_save_and_report(tmp_path) -> None:
    _model_or_skip()
    png = tmp_path / "last.png"
    p = _run("run", _clip_pipeline(), "--json", "--frames", "4", "--no-progress", "--save", str(png))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert d["frames"] == 4 and d["copies"] == 0 and d["bytes_copied"] == 0 and d["video"].startswith("gst:")
    assert set(d["stages"]) >= {"decode", "map", "infer"} and d["detections"]["frames_with_text"] == 4
    assert "copies        0" in p.stderr and "text boxes" in p.stderr
    import cv2

    img = cv2.imread(str(png))
    assert img is not None and img.shape == (480, 640, 3) and img.std() > 10  # a real picture, boxes drawn


def test_run_gst_save_video(tmp_path) -> None:
    _model_or_skip()
    out = tmp_path / "run.mp4"
    p = _run("run", _clip_pipeline(), "--frames", "5", "--no-progress", "--save", str(out))
    assert p.returncode == 0, p.stderr
    import av

    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 5


@pytest.mark.parametrize("video, kind, words", [
    ("gst:nosuchelement ! appsink", "PipelineError", "nosuchelement"),
    ("gst:filesrc location=/nonexistent/clip.mp4 ! qtdemux ! appsink", "PipelineError", "filesrc"),
    (f"gst:filesrc location={os.path.join(ROOT, 'README.md')} ! qtdemux ! appsink", "PipelineError", "qtdemux"),
    ("gst:", "VideoInputError", "needs a GStreamer pipeline"),
])
def test_run_gst_errors_are_one_typed_line(video: str, kind: str, words: str) -> None:
    p = _run("run", video, "--json", "--no-progress", timeout=120)
    assert p.returncode == 1
    err = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("interop: error:")]
    assert len(err) == 1 and err[0].startswith(f"interop: error: {kind}: ") and words in err[0], p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["error"]["type"] == kind and words in d["error"]["message"]


def test_run_gst_stall_is_a_timeout_error(monkeypatch) -> None:
    import interop.pipeline as pl
    from interop.elements import PipelineTimeoutError

    monkeypatch.setattr(pl, "GST_TIMEOUT", 0.5)
    with pytest.raises(PipelineTimeoutError, match="stalled") as e:  # an appsrc nobody feeds: no frame, no EOS
        pl.run("gst:appsrc ! video/x-raw,format=I420,width=64,height=48,framerate=30/1 ! appsink", device="CPU")
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, interop.InteropError)


# issue 16 points 5 and 8: pipeline.run split by what it does; the library never prints (the CLI writes the report)


def _writes_to_std_streams(tree) -> list[str]:
    import ast

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"print( at line {node.lineno}")
        if (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr", "__stdout__", "__stderr__")
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            found.append(f"sys.{node.attr} at line {node.lineno}")
        if isinstance(node, ast.ImportFrom) and node.module == "sys":
            found += [f"from sys import {a.name} at line {node.lineno}" for a in node.names
                      if a.name in ("stdout", "stderr", "__stdout__", "__stderr__")]
    return found


def test_pipeline_module_never_prints() -> None:
    import ast

    import interop.pipeline as pl

    with open(pl.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    assert _writes_to_std_streams(tree) == []
    # the check itself sees what it looks for
    bad = ast.parse("import sys\nfrom sys import stderr\nprint(1)\nsys.stdout.write('x')\nf(file=sys.stderr)\n")
    assert len(_writes_to_std_streams(bad)) == 4


def test_run_reports_progress_and_results_through_callbacks_and_writes_nothing(capfd) -> None:
    _model_or_skip()
    import threading

    from interop.pipeline import FrameResult, run

    progress: list[tuple[int, int | None]] = []
    results: list[FrameResult] = []
    threads: set[int] = set()

    def on_result(r: FrameResult) -> None:
        results.append(r)
        threads.add(threading.get_ident())

    capfd.readouterr()
    res = run(frames=4, device="CPU", on_progress=lambda done, total: progress.append((done, total)),
              on_result=on_result)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # the report and the bar are the CLI's
    assert progress == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert sorted(r.index for r in results) == [0, 1, 2, 3]
    for r in results:  # the same results the RunResult keeps
        assert r.to_json() == res.result(r.index).to_json() and r.boxes
    assert threading.get_ident() not in threads  # made on the result thread, not the caller's


def test_detector_compiles_with_one_stream_per_core() -> None:
    """`interop run` (and the benchmarks beside it) compile the bundled detector with one CPU stream per physical
    core, its threads unpinned; other devices and user models keep OpenVINO's own choice."""
    import openvino as ov

    from interop import textdet
    from interop.pipeline import _make_inference

    cores = textdet.physical_cores()
    assert 1 <= cores <= int(ov.Core().get_property("CPU", "RANGE_FOR_STREAMS")[1])
    unpinned = {"ENABLE_CPU_PINNING": False}
    assert textdet.compile_config("CPU", "f32") == {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": cores, **unpinned}
    assert textdet.compile_config("cpu:0", None) == {"NUM_STREAMS": cores, **unpinned}
    assert textdet.compile_config("NPU", None) is None
    assert textdet.compile_config("AUTO", "f16") == {"INFERENCE_PRECISION_HINT": "f16"}
    assert textdet.compile_requests(textdet.compile_config("CPU", None)) == 2 * cores
    assert textdet.compile_requests(textdet.compile_config("NPU", None)) is None
    inf, _, _ = _make_inference(None, "CPU", "f32", (64, 64), 64, 64)
    try:
        assert int(inf.compiled_property("NUM_STREAMS")) == cores
        assert inf.compiled_property("ENABLE_CPU_PINNING") is False  # stream threads may move off a decoder's core
        assert inf.pool_size() == 2 * cores  # two requests per stream
    finally:
        inf.close()
