"""`interop run` at its edges: models OpenVINO reads whatever their file is named, one JSON line on stdout when a
Ctrl-C lands as it is printed, and advice about pixel formats only for refusals about them."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
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



def _small_onnx() -> str:
    """A real, small ONNX model (the text-direction classifier that ships beside the detector)."""
    from interop import textdet

    try:
        det = textdet.model_path()
    except Exception as e:  # noqa: BLE001 - the package is missing: nothing to test with
        pytest.skip(f"needs the rapidocr models: {e}")
    path = os.path.join(os.path.dirname(det), "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if not os.path.isfile(path):
        pytest.skip("needs ch_ppocr_mobile_v2.0_cls_infer.onnx")
    return path


# ---- (2) check_model_file refuses models OpenVINO reads ----------------------------------------------------------


@pytest.mark.parametrize("name", ["model", "model.v2", "link"])
def test_check_model_file_lets_through_an_onnx_model_openvino_reads_by_its_content(tmp_path: Path, name: str) -> None:
    """OpenVINO's ONNX and IR frontends recognise a model by its content, not its name: read_model (and
    interop.Inference) read an ONNX file called `model`, `model.v2`, or a symlink without an extension. When written,
    check_model_file (so `interop run --model` and pipeline.run) refused each as 'not a model file OpenVINO reads'."""
    import openvino as ov

    from interop.pipeline import check_model_file

    src = _small_onnx()
    path = tmp_path / name
    if name == "link":
        path.symlink_to(src)
    else:
        shutil.copyfile(src, path)
    ov.Core().read_model(str(path))  # OpenVINO reads it
    check_model_file(str(path))  # so interop run must not refuse it


def test_check_model_file_lets_through_an_ir_without_the_xml_extension(tmp_path: Path) -> None:
    """The IR frontend also sniffs the XML (<net ...>): an IR saved as `net` + `net.bin` reads in OpenVINO and in
    interop.Inference; check_model_file refused it."""
    import openvino as ov

    from interop.pipeline import check_model_file

    ov.save_model(ov.Core().read_model(_small_onnx()), str(tmp_path / "ir.xml"))
    os.rename(tmp_path / "ir.xml", tmp_path / "net")
    os.rename(tmp_path / "ir.bin", tmp_path / "net.bin")
    ov.Core().read_model(str(tmp_path / "net"))
    check_model_file(str(tmp_path / "net"))


# ---- (4) --json: one JSON line on every path -----------------------------------------------------------------------


class _CtrlCAfterTheLine(io.StringIO):
    """stdout where a Ctrl-C lands right after the JSON line went out (as it would between print()'s two writes, the
    text and its newline, before the line was written in one piece)."""

    def __init__(self) -> None:
        super().__init__()
        self.fired = False

    def write(self, s: str) -> int:
        n = super().write(s)
        if not self.fired and self.getvalue().startswith("{") and "\n" in s:
            self.fired = True
            raise KeyboardInterrupt
        return n


def test_ctrl_c_as_the_json_line_is_printed_leaves_one_json_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """`interop run A B --json`: a Ctrl-C as the result's JSON line was printed made cli.main print the
    KeyboardInterrupt error object after it (on the same line when it came between the text and its newline:
    `{...}{"error": ...}`, which json.loads refuses; reproduced with a real SIGINT to the process group). stdout must
    hold one JSON line: the result's, once it went out."""
    from interop import cli, streams
    from tests.test_cli_streams_report import _result

    monkeypatch.setattr(streams, "run_streams", lambda *a, **kw: _result([]))
    fake = _CtrlCAfterTheLine()
    monkeypatch.setattr(sys, "stdout", fake)
    code = cli.main(["run", "a.mp4", "b.mp4", "--json", "--no-progress"])
    assert fake.fired
    lines = fake.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "streams" in json.loads(lines[0])
    assert code == 130


def test_the_next_command_line_in_the_same_process_still_gets_its_error_line(monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from interop import cli

    assert cli.main(["doctor", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["run", "/nonexistent/clip.mp4", "--json", "--no-progress"]) != 0
    assert "error" in json.loads(capsys.readouterr().out)


# ---- (3) rewording: processes mode and other refusals ------------------------------------------------------------


def test_a_refusal_that_is_not_about_the_pixel_format_does_not_advise_allow_copy(clip: str, tmp_path: Path) -> None:
    """A --model with two inputs (UnsupportedFormatError from compile_for, not a pixel format) was reworded by
    _supported_message into 'Run with --allow-copy ... to convert each yuv420p frame to yuv420p', with allow_copy
    already on; a gst: input got 'Convert in the pipeline ... format=I420' for an I420 frame."""
    import openvino as ov
    import openvino.opset11 as ops

    from interop.errors import UnsupportedFormatError
    from interop.pipeline import run

    a = ops.parameter([1, 3, 64, 64], np.float32, name="a")
    b = ops.parameter([1, 3, 64, 64], np.float32, name="b")
    ov.save_model(ov.Model([ops.add(a, b)], [a, b], "two_inputs"), str(tmp_path / "two.xml"))
    with pytest.raises(UnsupportedFormatError) as e:
        run(clip, model=str(tmp_path / "two.xml"), device="CPU", frames=1, allow_copy=True)
    assert "2 inputs" in str(e.value)
    assert "allow-copy" not in str(e.value) and "yuv420p frame to yuv420p" not in str(e.value), str(e.value)


# ---- (5) the multi-stream runner in processes mode -----------------------------------------------------------------
