"""A new user's pass over the CLI: every message gives advice the user can follow where they are (a command to
paste, the option the CLI has, the caps filter that converts), the clip script has a real command line, and the
report speaks English ("1 frame"). Each test runs a few frames at most."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from interop import cli
from tests.support.requirements import need_module

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^interop: error: (\w+): (.+)$")


def _error_line(err: str) -> tuple[str, str]:
    """The one line a CLI failure writes on stderr, as (type, message); fails on anything else there."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    m = LINE.match(lines[0])
    assert m, lines[0]
    return m.group(1), m.group(2)


def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _tiny_ir(tmp_path: Path) -> str:
    """A BGR NCHW 48x64 conv model saved as IR: a --model that compiles in a moment."""
    ov = need_module("openvino")
    import numpy as np
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, 48, 64], np.float32, name="image")
    w = ops.constant(np.full((2, 3, 3, 3), 0.1, np.float32))
    y = ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    path = tmp_path / "tiny.xml"
    ov.save_model(ov.Model([y], [x], "tiny"), str(path))
    return str(path)


# ---- 1. the "model not installed" fix is a command that pastes -----------------------------------------------


def test_model_not_installed_names_a_command_a_user_can_paste(monkeypatch: pytest.MonkeyPatch) -> None:
    from interop import textdet
    from interop.errors import BackendUnavailableError

    def missing() -> str:
        raise BackendUnavailableError("not here", backend="openvino")

    monkeypatch.setattr(textdet, "model_path", missing)
    ok, fix = textdet.model_status()
    assert not ok
    commands = re.findall(r"`([^`]+)`", fix)
    assert "interop models install" in commands, fix
    pip = [c for c in commands if "pip" in c]
    assert pip == [shlex.join(["python", "-m", "pip", "install", "--no-deps", textdet.PIN])], fix


# ---- 2. a --model file OpenVINO has no reader for: one typed line, before read_model -------------------------


@pytest.mark.parametrize("name, text", [("notes.md", "# my notes\n"), ("model.onnx", "not a model\n")])
def test_model_file_openvino_cannot_read_is_one_line(tmp_path: Path, name: str, text: str) -> None:
    need_module("av")
    need_module("openvino")
    (tmp_path / name).write_text(text)
    p = subprocess.run([sys.executable, "-m", "interop", "run", "--model", str(tmp_path / name), "--frames", "1",
                        "--no-progress"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 1
    kind, message = _error_line(p.stderr)  # no TensorFlow parser lines before it
    assert kind == "ModelFileError"
    assert ".xml" in message and ".onnx" in message and ".tflite" in message, message


def test_model_weights_file_points_at_its_xml(tmp_path: Path) -> None:
    from interop.errors import ModelFileError
    from interop.pipeline import check_model_file

    (tmp_path / "model.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ModelFileError, match=r"give its \.xml"):
        check_model_file(str(tmp_path / "model.bin"))
    check_model_file(str(tmp_path / "absent.xml"))  # a missing path is Inference's to report (it says "not found")


# ---- 3. python -m interop.clip: a command line -----------------------------------------------------------------


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """make_clip's calls, recorded instead of encoding."""
    from interop import clip

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(clip, "make_clip", lambda *a, **k: calls.append(a) or a[0])
    monkeypatch.setattr(clip.os.path, "getsize", lambda p: 0)
    return calls


def test_clip_help_is_usage_not_an_output_path(made: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str]) -> None:
    from interop import clip

    with pytest.raises(SystemExit) as ei:
        clip.main(["--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m interop.clip") and "WIDTH" in out and "FRAMES" in out, out
    assert made == []


@pytest.mark.parametrize("argv, what", [(["x.mp4", "wide", "48", "2"], "not a whole number"),
                                        (["x.mp4", "320", "240"], "all three or none"),
                                        (["x.mp4", "64", "0", "2"], "at least 1")])
def test_clip_bad_arguments_are_one_usage_line(made: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str],
                                               argv: list[str], what: str) -> None:
    from interop import clip

    with pytest.raises(SystemExit) as ei:
        clip.main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m interop.clip: error: UsageError: ") and what in err[0], err
    assert made == []  # nothing written


def test_clip_valid_arguments_do_what_they_did(made: list[tuple[Any, ...]]) -> None:
    from interop import clip

    assert clip.main([]) == 0
    assert clip.main(["my.mp4"]) == 0
    assert clip.main(["my.mp4", "64", "48", "2"]) == 0
    assert made == [(clip.DEFAULT_CLIP, 640, 480, 150, 30), ("my.mp4", 640, 480, 150, 30), ("my.mp4", 64, 48, 2, 30)]


def test_clip_script_usage_error_exits_2_without_traceback(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "interop.clip", str(tmp_path / "c.mp4"), "64", "wide", "2"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("python -m interop.clip: error: UsageError:"), p.stderr
    assert not (tmp_path / "c.mp4").exists()


# ---- 4. advice the CLI can follow ------------------------------------------------------------------------------


def test_stalled_pipeline_says_what_a_cli_user_can_do(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    need_module("gi")
    need_module("openvino")
    from interop import pipeline

    monkeypatch.setattr(pipeline, "GST_TIMEOUT", 0.5)
    code, _, err = _run_cli(capsys, "run", "gst:videotestsrc ! video/x-raw,format=I420 ! valve drop=true ! appsink",
                            "--frames", "1", "--no-progress")
    assert code == 1
    kind, message = _error_line(err)
    assert kind == "PipelineTimeoutError"
    assert "timeout=" not in message.split("interop.elements.frames(")[0], message  # no option `run` lacks
    assert "gst-launch-1.0" in message and "interop.elements.frames(PIPELINE, timeout=SECONDS)" in message, message


def test_routes_copy_advice_names_the_cli_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run_cli(capsys, "routes", "cpu", "cuda")
    assert code == 0
    first = out.splitlines()[0]
    assert "no zero-copy route" in first and "--allow-copy" in first and "allow_copy=True" not in first, first


def test_detector_input_size_must_be_multiples_of_32(capsys: pytest.CaptureFixture[str]) -> None:
    need_module("av")
    need_module("openvino")
    from interop.pipeline import RunArgumentError, _make_inference

    code, _, err = _run_cli(capsys, "run", "--input-size", "641", "480", "--frames", "1", "--no-progress")
    assert code == 1
    kind, message = _error_line(err)
    assert kind == "RunArgumentError" and "multiples of 32" in message and "640x480" in message, message
    assert "--input-size W H" in message and "input_size=(" not in message, message
    with pytest.raises(RunArgumentError, match=r"input_size=\(width, height\) in multiples of 32"):  # Python's words
        _make_inference(None, "CPU", None, (641, 480), 640, 480)


def test_pipeline_ending_in_another_sink_says_end_it_in_appsink(capsys: pytest.CaptureFixture[str]) -> None:
    need_module("gi")
    need_module("openvino")
    code, _, err = _run_cli(capsys, "run", "gst:videotestsrc num-buffers=2 ! fakesink", "--frames", "1",
                            "--no-progress")
    assert code == 1
    kind, message = _error_line(err)
    assert kind == "PipelineError" and "fakesink0" in message, message
    assert "end the pipeline in appsink (or leave the sink out: one is appended)" in message, message
    assert "element names" not in message, message


# ---- 5. GStreamer formats: the caps filter, one naming, sorted -------------------------------------------------


def _listed(message: str, after: str) -> list[str]:
    m = re.search(re.escape(after) + r" ([^.;]+)[.;]", message)
    assert m, message
    return m.group(1).split(", ")


def test_gst_format_not_mapped_names_the_caps_filter() -> None:
    need_module("gi")
    from interop.elements import frames
    from interop.errors import UnsupportedFormatError
    from interop.tensors.gst import GST_FORMATS

    with pytest.raises(UnsupportedFormatError) as ei:
        next(frames("videotestsrc num-buffers=1 ! video/x-raw,format=Y444,width=64,height=48 ! appsink", timeout=10))
    message = str(ei.value)
    assert "videoconvert ! video/x-raw,format=I420 ! appsink" in message, message
    names = _listed(message, "supported:")
    assert names == sorted(names) and set(names) == set(GST_FORMATS), names


def test_gst_format_the_model_cannot_take_says_convert_in_the_pipeline(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    need_module("gi")
    model = _tiny_ir(tmp_path)
    code, _, err = _run_cli(capsys, "run", "gst:videotestsrc num-buffers=2 ! video/x-raw,format=GRAY16_LE,width=64,"
                            "height=48 ! appsink", "--model", model, "--frames", "1", "--no-progress")
    assert code == 1
    kind, message = _error_line(err)
    assert kind == "UnsupportedFormatError" and "GRAY16_LE" in message, message
    assert "allow_copy" not in message and "allow-copy" not in message, message  # a gst: input is not converted
    assert "video/x-raw,format=I420 ! appsink" in message, message
    names = _listed(message, "it takes")
    from interop.tensors.gst import GST_FORMATS

    assert names == sorted(names) and set(names) <= set(GST_FORMATS), names  # GStreamer's names only


def test_decoded_format_refusal_lists_ffmpeg_names_sorted() -> None:
    need_module("av")
    need_module("openvino")
    from interop.inference._inputs import refusal
    from interop.pipeline import _supported_message
    from interop.tensors.ffmpeg import PIXEL_FORMATS

    message = _supported_message(refusal("gray16le"), "gray16le")
    names = _listed(message, "it takes")
    assert names == sorted(names) and set(names) <= set(PIXEL_FORMATS), names
    assert "--allow-copy" in message and "Pass allow_copy=True to Inference" not in message, message


def test_pipeline_without_raw_video_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    need_module("gi")
    need_module("openvino")
    code, _, err = _run_cli(capsys, "run", "gst:fakesrc num-buffers=2 ! appsink", "--frames", "1", "--no-progress")
    assert code == 1
    kind, message = _error_line(err)
    assert kind == "VideoInputError" and "no raw video" in message and "video/x-raw" in message, message
    assert "wrap_buffer" not in message, message


# ---- 6. small ones --------------------------------------------------------------------------------------------


def test_unknown_option_points_at_the_subcommands_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        cli.main(["doctor", "--jsn"])
    assert ei.value.code == 2
    kind, message = _error_line(capsys.readouterr().err)
    assert kind == "UsageError" and "--jsn" in message and "`interop doctor --help`" in message, message


def test_report_says_1_frame_and_1_stream() -> None:
    import io

    import numpy as np

    from interop import textdet
    from interop.cli_run import report, streams_report
    from interop.pipeline import RunResult

    res = RunResult("clip.mp4", "m", "CPU", 64, 48, None, frames=1, wall=0.5)
    res.boxes = {0: [textdet.TextBox(np.array([[0, 0], [8, 0], [8, 4], [0, 4]], np.float32), 0.9)]}
    out = io.StringIO()
    report(res, out)
    text = out.getvalue()
    assert "(1 frame in 0.500 s" in text and "1 in 1 frame " in text and ": 1 box [" in text, text
    one = SimpleNamespace(streams=[SimpleNamespace(index=0, run=res, wall=0.5, worker_copies=0, error=None,
                                                   error_type=None)],
                          model="m", device="CPU", input_size=None, decode="threads", compile=0.0, frames=1, fps=2.0,
                          wall=0.5, total_copies=0, copies=0, total_bytes_copied=0, output_bytes=0)
    out = io.StringIO()
    streams_report(one, out)  # type: ignore[arg-type]
    text += out.getvalue()
    assert "1 stream ->" in text and "(64x48): 1 frame," in text, text
    assert not re.search(r"\b1 (frames|streams|boxes)\b", text), text


def test_routes_help_lists_the_memory_types(capsys: pytest.CaptureFixture[str]) -> None:
    from interop.types import MemoryType

    with pytest.raises(SystemExit) as ei:
        cli.main(["routes", "--help"])
    assert ei.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert all(m.value in out for m in MemoryType), out
