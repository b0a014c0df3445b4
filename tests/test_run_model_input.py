"""`interop run --model` with --mean, --scale and --bgr (pipeline.run's model_input): the user's model gets each
frame as it expects, through Inference's own pre-processing (no copy); the text detector refuses them (its own are
fixed). Before, a --model got RGB 0..255 and nothing else: a model trained on BGR or normalised input could not run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from interop import cli, pipeline
from interop.pipeline import ModelInput, RunArgumentError
from tests.support.requirements import need_module

COLOR = (200, 50, 10)  # R, G, B


@pytest.fixture(scope="module")
def solid_clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Four 64x48 frames of one colour (H.264 4:2:0, lossless: each channel comes back within a few levels)."""
    need_module("av")
    from interop.clip import encode

    img = np.empty((48, 64, 3), np.uint8)
    img[:] = COLOR
    path = tmp_path_factory.mktemp("clip") / "solid.mp4"
    return str(encode(path, [img] * 4, 64, 48, fps=10, options={"crf": "0"}))


@pytest.fixture(scope="module")
def channel_means(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An IR whose output is each input channel's mean over the image, shape [1, 3]."""
    ov = need_module("openvino")
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, 48, 64], np.float32, name="image")
    y = ops.reduce_mean(x, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    path = tmp_path_factory.mktemp("model") / "means.xml"
    ov.save_model(ov.Model([y], [x], "means"), str(path))
    return str(path)


def _channels(res: pipeline.RunResult) -> dict[str, float]:
    (summary,) = res.outputs[res.frames - 1].values()
    return summary


@pytest.mark.parametrize("model_input, argmax, lo, hi", [
    (None, 0, COLOR[2], COLOR[0]),                                       # RGB 0..255 as decoded
    (ModelInput(rgb=False), 2, COLOR[2], COLOR[0]),                      # BGR: blue first
    (ModelInput(mean=100.0, scale=2.0), 0, (COLOR[2] - 100) / 2, (COLOR[0] - 100) / 2),
    (ModelInput(mean=(200.0, 50.0, 10.0)), None, 0.0, 0.0),              # per channel: every channel to 0
])
def test_the_model_gets_frames_as_model_input_says(solid_clip: str, channel_means: str, model_input: ModelInput | None,
                                                   argmax: int | None, lo: float, hi: float) -> None:
    with interop.copy_meter() as meter:
        res = pipeline.run(solid_clip, channel_means, "CPU", model_input=model_input)
    s = _channels(res)
    assert abs(s["min"] - lo) <= 4 and abs(s["max"] - hi) <= 4, s
    if argmax is not None:
        assert s["argmax"] == argmax, s
    assert meter.copies == 0 and res.copies == 0


def test_cli_options_reach_the_model(solid_clip: str, channel_means: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", solid_clip, "--model", channel_means, "--device", "CPU", "--json", "--no-progress",
                     "--bgr", "--mean", "10", "50", "200", "--scale", "1"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, out
    (summary,) = out["outputs"].values()  # the last frame's
    assert abs(summary["min"]) <= 4 and abs(summary["max"]) <= 4, summary  # BGR minus (10, 50, 200): all ~0


def test_the_text_detector_refuses_them(solid_clip: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunArgumentError, match="--model"):
        pipeline.run(solid_clip, None, "CPU", model_input=ModelInput(rgb=False))
    code = cli.main(["run", solid_clip, "--device", "CPU", "--no-progress", "--mean", "127"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "RunArgumentError" in err[0], err


def test_a_zero_scale_is_one_typed_line(solid_clip: str, channel_means: str, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    code = cli.main(["run", solid_clip, "--model", channel_means, "--device", "CPU", "--no-progress", "--scale", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "scale" in err[0], err


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_every_stream_gets_it(solid_clip: str, channel_means: str, decode: str) -> None:
    from interop.streams import run_streams

    res = run_streams([solid_clip, solid_clip], channel_means, "CPU", decode=decode, model_input=ModelInput(rgb=False))
    for s in res.streams:
        assert s.error is None, s.error
        (summary,) = s.run.outputs[s.run.frames - 1].values()
        assert summary["argmax"] == 2, summary  # blue first
