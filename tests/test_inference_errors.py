"""Bad input to interop.Inference: a catalogue. Each case raises a typed InteropError subclass that also subclasses
the builtin a caller would catch (TypeError for a wrong type, ValueError for a wrong value, ImportError for a device
that is not here), says what to do, and keeps OpenVINO's own text where OpenVINO refused. Every case runs under a
watchdog: an input OpenVINO fails on inside a request used to hang infer() for good.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

ov = need_module("openvino")

from interop import FrameFormat, InteropError, InvalidTensorError  # noqa: E402
from interop.errors import (  # noqa: E402
    BackendUnavailableError,
    InteropTimeoutError,
    ModelFileError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from interop.inference import CompileError, Inference  # noqa: E402

H, W = 24, 32


def conv_model(h: int | None = H, w: int | None = W) -> Any:
    """NCHW f32 image -> conv 3x3 (padded): runs at any spatial size >= 1 when dynamic."""
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, h or -1, w or -1], np.float32, name="image")
    wts = ops.constant(np.full((2, 3, 3, 3), 0.1, np.float32))
    return ov.Model([ops.convolution(x, wts, [1, 1], [1, 1], [1, 1], [1, 1])], [x], "conv")


def fixed_reshape_model() -> Any:
    """Dynamic spatial input that only 16x16 fits: a Reshape to a constant shape inside."""
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, -1, -1], np.float32, name="image")
    return ov.Model([ops.reshape(x, ops.constant(np.array([1, 3, 16, 16], np.int64)), False)], [x], "fixed16")


def bounded_model() -> Any:
    """Spatial dims bounded to 16..64."""
    import openvino.opset13 as ops

    x = ops.parameter(ov.PartialShape([1, 3, ov.Dimension(16, 64), ov.Dimension(16, 64)]), np.float32, name="image")
    return ov.Model([ops.relu(x)], [x], "bounded")


def bgr_frame(h: int = H, w: int = W) -> interop.Frame:
    return interop.wrap(np.zeros((h, w, 3), np.uint8), format=FrameFormat.BGR)


def raw(h: int = H, w: int = W) -> np.ndarray:
    return np.zeros((1, 3, h, w), np.float32)


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """Run fn on a thread; fail (not hang) if it does not return in time; re-raise what it raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: B036 - handed back to the test thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"hung for {seconds} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _text_file(tmp: str) -> str:
    p = os.path.join(tmp, "notes.txt")
    with open(p, "w") as f:
        f.write("hello")
    return p


# (id, call(tmp_dir), error class, builtin also subclassed, message pattern: what is wrong and what to do)
CASES: list[tuple[str, Callable[[str], Any], type[InteropError], type[BaseException], str]] = [
    # -- the model ---------------------------------------------------------------------------------------------
    ("model-missing", lambda d: Inference(os.path.join(d, "nope.onnx"), "CPU"),
     ModelFileError, ValueError, "not found: give the path of an OpenVINO IR"),
    ("model-directory", lambda d: Inference(d, "CPU"),
     ModelFileError, ValueError, "is a directory, not a model file: give the path"),
    ("model-not-a-model", lambda d: Inference(_text_file(d), "CPU"),
     ModelFileError, ValueError, r"cannot read the model .*Unable to read the model.*give an IR"),
    ("model-wrong-type", lambda d: Inference(42, "CPU"),
     UnsupportedTypeError, TypeError, "path or an openvino.Model"),
    # -- the device --------------------------------------------------------------------------------------------
    ("device-wrong-type", lambda d: Inference(conv_model(), 42),
     UnsupportedTypeError, TypeError, "device must be an OpenVINO device name"),
    ("device-absent", lambda d: Inference(conv_model(), "NOSUCHDEVICE"),
     BackendUnavailableError, ImportError, "devices found: .*leave device=None"),
    ("device-bad-id", lambda d: Inference(conv_model(), "CPU:garbage").infer(raw()),
     CompileError, ValueError, r"device 'CPU:garbage'.*supports only '' as device id.*check the device name"),
    # -- config ------------------------------------------------------------------------------------------------
    ("config-list", lambda d: Inference(conv_model(), "CPU", config=[1, 2]),
     UnsupportedTypeError, TypeError, r"config must be a dict of OpenVINO compile properties.*not list"),
    ("config-int-key", lambda d: Inference(conv_model(), "CPU", config={1: 2}),
     UnsupportedTypeError, TypeError, r"config keys must be OpenVINO property names \(str\)"),
    ("config-unknown-key", lambda d: Inference(conv_model(), "CPU", config={"NO_SUCH_KEY": "1"}).infer(raw()),
     CompileError, ValueError, r"Unsupported property NO_SUCH_KEY.*check .* each config key and value"),
    ("config-bad-value", lambda d: Inference(conv_model(), "CPU", config={"PERFORMANCE_HINT": "FAST"}).infer(raw()),
     CompileError, ValueError, r"Wrong value FAST ?for property key PERFORMANCE_HINT.*check"),
    ("config-value-type", lambda d: Inference(conv_model(), "CPU", config={"NUM_STREAMS": -5}).infer(raw()),
     CompileError, ValueError, r"NUM_STREAMS.*check"),
    ("precision-garbage",
     lambda d: Inference(conv_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "garbage"}).infer(bgr_frame()),
     CompileError, ValueError, r"Wrong value garbage for property key INFERENCE_PRECISION_HINT. Supported values"),
    # -- input_size --------------------------------------------------------------------------------------------
    ("size-string", lambda d: Inference(conv_model(None, None), "CPU", input_size="big"),
     UnsupportedTypeError, TypeError, r"input_size must be \(width, height\) or an int"),
    ("size-float", lambda d: Inference(conv_model(None, None), "CPU", input_size=2.5),
     UnsupportedTypeError, TypeError, "in whole pixels"),
    ("size-float-item", lambda d: Inference(conv_model(None, None), "CPU", input_size=(32.7, 24)),
     UnsupportedTypeError, TypeError, "in whole pixels"),
    ("size-bool", lambda d: Inference(conv_model(None, None), "CPU", input_size=True),
     UnsupportedTypeError, TypeError, "input_size must be"),
    ("size-three", lambda d: Inference(conv_model(None, None), "CPU", input_size=(1, 2, 3)),
     UnsupportedTypeError, TypeError, "input_size must be"),
    ("size-negative", lambda d: Inference(conv_model(None, None), "CPU", input_size=-3),
     InvalidTensorError, ValueError, "must be positive"),
    ("size-zero", lambda d: Inference(conv_model(None, None), "CPU", input_size=(0, 8)),
     InvalidTensorError, ValueError, "must be positive"),
    ("size-huge", lambda d: Inference(conv_model(None, None), "CPU", input_size=(2**40, 8)),
     InvalidTensorError, ValueError, "larger than an image model takes"),
    ("size-model-rejects", lambda d: Inference(fixed_reshape_model(), "CPU", input_size=(8, 8)).infer(bgr_frame()),
     CompileError, ValueError, r"fixed16 cannot run at input 8x8.*incompatible.*give an input_size"),
    ("dynamic-no-size-frame", lambda d: Inference(fixed_reshape_model(), "CPU").infer(bgr_frame(H, W)),
     CompileError, ValueError, r"cannot run at input 32x24"),
    # -- mean / scale / rgb ------------------------------------------------------------------------------------
    ("mean-string", lambda d: Inference(conv_model(), "CPU", mean="grey"),
     UnsupportedTypeError, TypeError, "mean must be a number or a sequence of numbers"),
    ("mean-dict", lambda d: Inference(conv_model(), "CPU", mean={"r": 1}),
     UnsupportedTypeError, TypeError, "mean must be a number"),
    ("mean-none-item", lambda d: Inference(conv_model(), "CPU", mean=[1, None, 3]),
     UnsupportedTypeError, TypeError, "mean must be a number"),
    ("mean-nested", lambda d: Inference(conv_model(), "CPU", mean=[[1, 2], [3, 4]]),
     UnsupportedTypeError, TypeError, "mean must be a number"),
    ("mean-bool", lambda d: Inference(conv_model(), "CPU", mean=True),
     UnsupportedTypeError, TypeError, "mean must be a number"),
    ("mean-nan", lambda d: Inference(conv_model(), "CPU", mean=math.nan),
     InvalidTensorError, ValueError, "finite"),
    ("mean-empty", lambda d: Inference(conv_model(), "CPU", mean=[]),
     InvalidTensorError, ValueError, "one value or one per channel"),
    ("mean-too-many", lambda d: Inference(conv_model(), "CPU", mean=[1, 2, 3, 4, 5]),
     InvalidTensorError, ValueError, "one value or one per channel"),
    ("mean-channels-mismatch", lambda d: Inference(conv_model(), "CPU", mean=[1, 2]).infer(bgr_frame()),
     UnsupportedFormatError, ValueError, r"cannot build pre-processing.*mean/scale = 2"),
    ("scale-inf", lambda d: Inference(conv_model(), "CPU", scale=math.inf),
     InvalidTensorError, ValueError, "finite"),
    ("scale-zero", lambda d: Inference(conv_model(), "CPU", scale=[1, 0, 1]),
     InvalidTensorError, ValueError, "must not contain 0"),
    ("scale-string-item", lambda d: Inference(conv_model(), "CPU", scale=["a"]),
     UnsupportedTypeError, TypeError, "scale must be a number"),
    ("rgb-string", lambda d: Inference(conv_model(), "CPU", rgb="no"),
     UnsupportedTypeError, TypeError, r"rgb must be True .* or False"),
    # -- inputs a dynamic model cannot run (these hung infer() for good: the request failed inside OpenVINO) ------
    ("raw-shape-model-rejects", lambda d: Inference(fixed_reshape_model(), "CPU").infer(raw(8, 8)),
     InvalidTensorError, ValueError, r"fixed16 cannot run on input shape\(s\) \[\(1, 3, 8, 8\)\].*input size it accepts"),
    ("raw-shape-empty", lambda d: Inference(conv_model(None, None), "CPU").infer(raw(0, 0)),
     InvalidTensorError, ValueError, "cannot run on input shape"),
    ("raw-shape-out-of-bounds", lambda d: Inference(bounded_model(), "CPU").infer(raw(8, 8)),
     InvalidTensorError, ValueError, r"wants shape \[1,3,16..64,16..64\].*convert/resize"),
    # -- waiting -----------------------------------------------------------------------------------------------
    ("wait-timeout-nan", lambda d: Inference(conv_model(), "CPU").wait_all(timeout=math.nan),
     InvalidTensorError, ValueError, r"finite number of seconds >= 0 \(None waits for ever\)"),
    ("wait-timeout-negative", lambda d: Inference(conv_model(), "CPU").wait_all(timeout=-1),
     InvalidTensorError, ValueError, "finite number of seconds"),
    ("wait-timeout-string", lambda d: Inference(conv_model(), "CPU").wait_all(timeout="1"),
     UnsupportedTypeError, TypeError, "timeout must be a number of seconds or None"),
]


@pytest.mark.parametrize(("call", "cls", "builtin", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_typed(call: Callable[[str], Any], cls: type[InteropError], builtin: type[BaseException],
                            pattern: str, tmp_path: Any) -> None:
    with pytest.raises(cls, match=pattern) as ei:
        within(60, lambda: call(str(tmp_path)))
    assert isinstance(ei.value, InteropError) and isinstance(ei.value, builtin)


def test_openvino_refusal_keeps_its_exception_as_cause() -> None:
    with pytest.raises(CompileError) as ei:
        Inference(conv_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "garbage"}).infer(raw())
    assert isinstance(ei.value.__cause__, RuntimeError)
    assert "Exception from src/" not in str(ei.value)  # OpenVINO's source locations dropped, its message kept


def test_after_a_refused_input_the_inference_still_works() -> None:
    inf = Inference(fixed_reshape_model(), "CPU")
    with pytest.raises(InvalidTensorError):
        within(60, lambda: inf.infer(raw(8, 8)))
    assert within(60, lambda: inf.infer(raw(16, 16)))  # a shape it takes: runs, results returned
    inf.wait_all(timeout=10)


def test_wait_all_timeout_error_is_an_interop_timeout() -> None:
    inf = Inference(conv_model(), "CPU")
    gate = threading.Event()
    inf.infer_async(raw(), lambda outputs, _: gate.wait(30))
    try:
        with pytest.raises(InteropTimeoutError, match="still running after 0.01 s"):
            inf.wait_all(timeout=0.01)
    finally:
        gate.set()
    inf.wait_all(timeout=30)


def test_cli_run_with_a_bogus_precision_reports_a_typed_error() -> None:
    from interop import textdet

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    p = subprocess.run([sys.executable, "-m", "interop", "run", "--precision", "bogus", "--frames", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and "unexpected" not in p.stderr  # the CLI's path for untyped errors
    assert "interop: error:" in p.stderr and "INFERENCE_PRECISION_HINT" in p.stderr and "Supported values" in p.stderr
