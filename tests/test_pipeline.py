"""`interop run` end to end (in a subprocess, as a user runs it) and the decode_infer example."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first

pytest.importorskip("av")
pytest.importorskip("cv2")
pytest.importorskip("openvino")

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
    w = _ResultWorker(lambda out, i: (done.append(i), threads.add(threading.get_ident())))
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

    w = _ResultWorker(work)
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
