"""`interop run` over several inputs, what it prints when a run does not end cleanly: Ctrl-C with --json (one JSON
line on stdout on every path, the streams so far marked interrupted), a stream's warnings in the report, and a
stream --save could not write said so."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from interop import cli_run, streams
from interop.pipeline import RunResult
from interop.stream_results import MultiRunResult, StreamResult


def _args(**kw: Any) -> SimpleNamespace:
    base = {"video": ["a.mp4", "b.mp4"], "json": False, "save": None, "input_size": None, "no_progress": True,
            "model": None, "device": None, "frames": None, "precision": None, "allow_copy": False, "decode": None}
    base.update(kw)
    return SimpleNamespace(**base)


def _result(warnings: list[str], error: str | None = None) -> MultiRunResult:
    runs = [RunResult(video=v, model="m", device="CPU", width=64, height=48, input_size=(64, 48))
            for v in ("a.mp4", "b.mp4")]
    runs[0].frames, runs[1].frames = 5, 3
    runs[1].warnings.extend(warnings)
    out = MultiRunResult([StreamResult(0, runs[0]), StreamResult(1, runs[1], error=error,
                                                                  error_type="StreamError" if error else None)],
                         model="m", device="CPU")
    return out


def test_ctrl_c_with_json_prints_the_streams_so_far(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 130 with nothing on stdout, where one stream's run prints its JSON error line and
    docs/streams.md promises the `interrupted` key."""
    def interrupted(*a: Any, **kw: Any) -> Any:
        e = KeyboardInterrupt()
        e.result = _result([])  # type: ignore[attr-defined]
        e.result.interrupted = True  # type: ignore[attr-defined]
        raise e

    monkeypatch.setattr(streams, "run_streams", interrupted)
    assert cli_run.streams_main(_args(json=True)) == 130
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["interrupted"] is True and len(doc["streams"]) == 2
    assert "interrupted" in err


def test_ctrl_c_before_any_result_with_json_prints_the_error(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*a: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(streams, "run_streams", interrupted)
    assert cli_run.streams_main(_args(json=True)) == 130
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "KeyboardInterrupt"


def test_report_prints_each_streams_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: skipped packets or a short stream showed only in the log lines on stderr, never in the report."""
    cli_run.streams_report(_result(["stream 1: 60 packets could not be decoded and were skipped"]), None)
    out = capsys.readouterr().out
    assert "warning     stream 1: 60 packets could not be decoded" in out


def test_save_says_which_stream_it_did_not_write(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A stream that ended with an error is not saved (saving re-reads its input): the report says so."""
    import interop.pipeline as pipeline

    monkeypatch.setattr(streams, "run_streams", lambda *a, **kw: _result([], error="worker killed"))
    monkeypatch.setattr(pipeline, "save_image", lambda run, path: path)
    assert cli_run.streams_main(_args(save=str(tmp_path / "out.png"))) == 1
    out = capsys.readouterr().out
    assert "not saved     stream 1 (it ended with an error)" in out
    assert "saved" in out.replace("not saved", "")
