"""Inference follows each frame's own size and format (a bounded cache of compiled layouts, a per-frame input size)
and never hangs on a request that fails inside OpenVINO while it runs (issue 17 point 3; the failing request)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading

import numpy as np
import pytest

import interop
from interop import FrameFormat, RequestFailedError
from tests.support.requirements import need_module

ov = need_module("openvino")
import openvino.opset13 as ops  # noqa: E402

WATCHDOG_S = 60  # a hang fails the test instead of blocking the run


def _watchdog(fn, *args):
    ex = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return ex.submit(fn, *args).result(timeout=WATCHDOG_S)
    finally:
        ex.shutdown(wait=False)


def dyn_model() -> ov.Model:
    """NCHW f32 image of any size -> (1, 3, h, w) (identity-like: x * 1), so the output shape is the model input's."""
    x = ops.parameter([1, 3, -1, -1], np.float32, name="image")
    y = ops.multiply(x, ops.constant(np.float32(1.0)))
    y.output(0).get_tensor().set_names({"out"})
    return ov.Model([y], [x], "dyn")


def bgr_frame(w: int, h: int, value: int = 50) -> interop.Frame:
    arr = np.full((h, w, 3), value, np.uint8)
    return interop.wrap(arr, format=FrameFormat.BGR)


def test_each_size_runs_at_its_own_size_and_the_cache_is_bounded() -> None:
    inf = interop.Inference(dyn_model(), "CPU", rgb=False)
    inf.VARIANTS_LIMIT = 2
    sizes = [(32, 24), (48, 32), (64, 40), (32, 24)]
    for w, h in sizes:
        out = _watchdog(inf.infer, bgr_frame(w, h))["out"]
        assert out.shape == (1, 3, h, w)
        assert np.allclose(out, 50)
        assert len(inf._variants) <= 2
    inf.close()


def test_requests_in_flight_finish_on_the_model_they_started_with() -> None:
    inf = interop.Inference(dyn_model(), "CPU", rgb=False)
    inf.VARIANTS_LIMIT = 1  # every new size drops the model the previous frames are running on
    got: dict[int, tuple[int, ...]] = {}
    sizes = [(32, 24), (48, 32), (64, 40)] * 4
    for i, (w, h) in enumerate(sizes):
        inf.infer_async(bgr_frame(w, h, i), lambda o, i: got.__setitem__(i, o["out"].shape), i)
    _watchdog(inf.wait_all)
    assert got == {i: (1, 3, h, w) for i, (w, h) in enumerate(sizes)}
    assert len(inf._variants) == 1
    inf.close()
    assert not inf._retired  # dropped pools are let go once idle


def test_input_size_callable_sizes_the_model_per_frame() -> None:
    calls = []

    def half(w: int, h: int) -> tuple[int, int]:
        calls.append((w, h))
        return w // 2, h // 2

    inf = interop.Inference(dyn_model(), "CPU", rgb=False, input_size=half)
    assert inf.infer(bgr_frame(64, 48))["out"].shape == (1, 3, 24, 32)
    assert inf.infer(bgr_frame(64, 48))["out"].shape == (1, 3, 24, 32)
    assert inf.infer(bgr_frame(32, 64))["out"].shape == (1, 3, 32, 16)
    assert calls == [(64, 48), (32, 64)]  # asked once per layout, not per frame
    inf.close()


@pytest.mark.parametrize("ret, err", [(None, interop.UnsupportedTypeError), ("big", interop.UnsupportedTypeError),
                                      ((0, 10), interop.InvalidTensorError)])
def test_input_size_callable_returning_garbage_is_a_typed_error(ret, err) -> None:
    inf = interop.Inference(dyn_model(), "CPU", input_size=lambda w, h: ret)
    with pytest.raises(err, match="input_size"):
        inf.infer(bgr_frame(32, 24))
    inf.close()


def test_a_size_change_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    inf = interop.Inference(dyn_model(), "CPU", rgb=False)
    with caplog.at_level(logging.INFO, logger="interop"):
        for w, h in [(32, 24), (48, 32), (64, 40), (32, 24), (48, 32)]:
            inf.infer(bgr_frame(w, h))
    changes = [r for r in caplog.records if "frames changed" in r.getMessage()]
    assert len(changes) == 1 and "32x24" in changes[0].getMessage() and "48x32" in changes[0].getMessage()
    inf.close()


# -- a request that fails inside OpenVINO while it runs ---------------------------------------------------------
def failing_model() -> ov.Model:
    """x (any length) reshaped to the shape given by the second input: shape inference accepts any (n,) and (2,)
    input, and the run fails when the product of ``s`` is not n. OpenVINO never calls back for such a request."""
    x = ops.parameter([-1], np.float32, name="x")
    s = ops.parameter([2], np.int64, name="s")
    y = ops.relu(ops.reshape(x, s, False))
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [x, s], "reshape_by_value")


GOOD = [np.ones(10, np.float32), np.array([2, 5], np.int64)]
BAD = [np.ones(10, np.float32), np.array([7, 7], np.int64)]


def test_infer_of_a_request_failing_at_run_time_raises() -> None:
    inf = interop.Inference(failing_model(), "CPU")
    assert _watchdog(inf.infer, GOOD)["y"].shape == (2, 5)
    with pytest.raises(RequestFailedError, match="failed inside OpenVINO") as e:
        _watchdog(inf.infer, BAD)
    assert isinstance(e.value, RuntimeError) and e.value.__cause__ is not None
    assert _watchdog(inf.infer, GOOD)["y"].shape == (2, 5)  # the Inference still works
    assert inf.pending == 0
    inf.close()


def test_wait_all_reports_an_async_request_failing_at_run_time() -> None:
    inf = interop.Inference(failing_model(), "CPU")
    got: list[int] = []
    lock = threading.Lock()

    def cb(outputs, i):
        with lock:
            got.append(i)

    for i, x in enumerate([GOOD, BAD, GOOD, GOOD]):
        inf.infer_async(x, cb, i)
    with pytest.raises(RequestFailedError, match="failed inside OpenVINO"):
        _watchdog(inf.wait_all, 30)
    assert sorted(got) == [0, 2, 3] and inf.pending == 0
    # the pool whose request failed was replaced: later submissions run (the old queue would raise for ever)
    for i in range(8):
        inf.infer_async(GOOD, cb, 10 + i)
    _watchdog(inf.wait_all, 30)
    assert sorted(got)[3:] == list(range(10, 18))
    inf.close()
