"""The CLI's bad-input catalogue: each case is one typed error line on stderr (``interop: error: Type: message``),
no traceback, a non-zero exit, and with --json exactly one JSON line on stdout: ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("openvino")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE = re.compile(r"^interop: error: (\w+): (.+)$")


def _model_or_skip() -> None:
    from interop import textdet
    from interop.errors import BackendUnavailableError

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


def _dynamic_model(path: Path) -> str:
    """An IR whose input is (1, 3, ?, ?) but whose graph only works at 16x16 (a fixed reshape): unreshapable."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter(ov.PartialShape([1, 3, -1, -1]), ov.Type.f32, name="image")
    y = ops.reshape(x, ops.constant(np.array([1, 3 * 16 * 16], np.int64)), special_zero=False)
    ov.save_model(ov.Model([y], [x], "fixed16"), str(path))
    return str(path)


def _cases(tmp: Path) -> dict[str, tuple[list[str], str, str]]:
    """name -> (arguments after `interop run`, the error type, a part of the message that says what to do)."""
    (tmp / "adir").mkdir()
    (tmp / "empty.mp4").write_bytes(b"")
    (tmp / "notes.txt").write_text("these are my notes, not a video\n" * 20)
    (tmp / "model.onnx").write_text("not a model\n")
    ro = tmp / "ro"
    ro.mkdir()
    dyn = _dynamic_model(tmp / "dyn.xml")
    return {
        "precision garbage": (["--precision", "garbage"], "CompileError", "f32"),
        "model missing": (["--model", str(tmp / "nope.xml")], "ModelFileError", "not found"),
        "model not a model": (["--model", str(tmp / "model.onnx")], "ModelFileError", "ONNX"),
        "model dynamic, at the video's size": (["--model", dyn], "CompileError", "--input-size W H"),
        "model dynamic, unreshapable": (["--model", dyn, "--input-size", "64", "48"], "CompileError", "--input-size"),
        "video missing": ([str(tmp / "nope.mp4")], "VideoInputError", "not found"),
        "video is a directory": ([str(tmp / "adir")], "VideoInputError", "is a directory"),
        "video empty": ([str(tmp / "empty.mp4")], "VideoInputError", "empty (0 bytes)"),
        "video is text": ([str(tmp / "notes.txt")], "VideoInputError", "text file, not a video"),
        "save in a missing folder": (["--save", str(tmp / "no" / "out.png")], "OutputPathError", "does not exist"),
        "save unwritable": (["--save", "/proc/interop-out.png"], "OutputPathError", "writable folder"),
        "save unknown extension": (["--save", str(tmp / "out.txt")], "OutputPathError", ".png"),
        "device unknown": (["--device", "FLOPPY"], "BackendUnavailableError", "--device out"),
        "frames negative": (["--frames", "-1"], "RunArgumentError", "positive"),
        "frames not a number": (["--frames", "many"], "UsageError", "invalid int"),
    }


NEEDS_DEFAULT_MODEL = {"precision garbage", "device unknown"}
CASES = ["precision garbage", "model missing", "model not a model", "model dynamic, at the video's size",
         "model dynamic, unreshapable", "video missing", "video is a directory", "video empty", "video is text",
         "save in a missing folder", "save unwritable", "save unknown extension", "device unknown", "frames negative",
         "frames not a number"]


@pytest.mark.parametrize("case", CASES)
def test_run_error_is_one_typed_line_and_one_json_line(case: str, tmp_path: Path) -> None:
    if case in NEEDS_DEFAULT_MODEL:
        _model_or_skip()
    args, kind, fix = _cases(tmp_path)[case]
    p = subprocess.run([sys.executable, "-m", "interop", "run", *args, "--frames", "2", "--no-progress", "--json"]
                       if "--frames" not in args else
                       [sys.executable, "-m", "interop", "run", *args, "--no-progress", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode != 0, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("interop: error:")]
    assert len(errors) == 1, p.stderr
    m = LINE.match(errors[0])
    assert m and m.group(1) == kind, errors[0]
    assert fix in m.group(2), errors[0]
    assert "reformat(" not in m.group(2) and "input_size=(" not in m.group(2)  # CLI options, not Python calls
    out = p.stdout.splitlines()
    assert len(out) == 1, p.stdout
    assert json.loads(out[0]) == {"error": {"type": kind, "message": m.group(2)}}


def test_video_is_checked_before_the_model(tmp_path: Path) -> None:
    """The video and --save are checked before the model is loaded: a bad path fails fast, even with a bad model."""
    p = subprocess.run([sys.executable, "-m", "interop", "run", str(tmp_path / "nope.mp4"), "--model",
                        str(tmp_path / "nope.xml"), "--no-progress"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "VideoInputError" in p.stderr and p.stdout == ""


def test_unexpected_error_is_one_line_and_traceback_only_with_verbose(monkeypatch, capsys) -> None:
    from interop import cli

    def boom(args):  # noqa: ANN001, ANN202 - stands in for a command
        raise RuntimeError("something nobody expected")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["routes"].set_defaults(fn=boom)  # type: ignore[union-attr]
    assert cli.main(["routes"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interop: error: RuntimeError: something nobody expected (unexpected: rerun with -v for the "
                   "traceback and report it)"]
    with pytest.raises(RuntimeError):
        cli.main(["-v", "routes"])


def test_os_error_at_the_cli_boundary_is_one_line(monkeypatch, capsys) -> None:
    from interop import cli

    def fails(args):  # noqa: ANN001, ANN202
        raise PermissionError(13, "Permission denied", "/root/x")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["doctor"].set_defaults(fn=fails)  # type: ignore[union-attr]
    assert cli.main(["doctor", "--json"]) == 1
    cap = capsys.readouterr()
    assert cap.err.strip() == "interop: error: PermissionError: Permission denied '/root/x': check the path and its permissions"
    assert json.loads(cap.out) == {"error": {"type": "PermissionError",
                                             "message": "Permission denied '/root/x': check the path and its permissions"}}
