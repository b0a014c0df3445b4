"""An Inference's lifetime: once its requests ended and the program let go of it, it is collected (the request
queue keeps each request's last job: the job must not keep the caller's objects); one dropped with requests running
is let go by a thread of the program's, never on OpenVINO's thread inside the queue's own callback; a close()
interrupted by Ctrl-C leaves it open, and close() again finishes it."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from interop import inference as inference_module
from tests.support.requirements import need_module

need_module("openvino")

from tests.test_inference import H, W, tiny_model  # noqa: E402

X = np.zeros((1, 3, H, W), np.float32)
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


def _collected(ref: weakref.ref) -> bool:
    inference_module._let_go_now()
    gc.collect()
    return ref() is None


class _App:
    """A program's object that owns its Inference and gets results through a bound method."""

    def __init__(self) -> None:
        self.inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)
        self.seen = 0

    def on_result(self, outputs: dict, i: int) -> None:
        self.seen += 1


def test_inference_with_a_bound_method_callback_is_collected_once_dropped() -> None:
    app = _App()
    for i in range(6):
        app.inf.infer_async(X, app.on_result, i)
    app.inf.wait_all()
    assert app.seen == 6
    ref = weakref.ref(app.inf)
    del app
    assert _collected(ref), "the request queue's last jobs kept the callback's object, and with it the Inference"


def test_inference_whose_callback_raised_is_collected_once_dropped() -> None:
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)

    def boom(outputs: dict, i: int) -> None:
        raise RuntimeError("a callback that fails")

    inf.infer_async(X, boom, 0)
    with pytest.raises(RuntimeError, match="a callback that fails"):
        inf.wait_all()
    ref = weakref.ref(inf)
    del inf
    assert _collected(ref), "the failed job's error (its traceback) kept the Inference"


def test_inference_dropped_with_requests_running_is_let_go_by_a_program_thread() -> None:
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    ended = threading.Event()
    where: list[str] = []
    weakref.finalize(inf, lambda: where.append(threading.current_thread().name))
    for i in range(inf.pool_size(X) * 2):
        inf.infer_async(X, lambda outputs, i: ended.set() if i == 0 else None, i)
    ref = weakref.ref(inf)
    del inf
    assert ended.wait(30)
    # the running jobs keep it; once they end it waits for a thread of the program's to let go of it
    deadline = threading.Event()
    for _ in range(300):
        if ref() is None or ref() in inference_module._ended.values():
            break
        deadline.wait(0.01)
    assert ref() is not None, "collected where its last request ended (OpenVINO's thread)"
    assert _collected(ref)
    assert where == [threading.current_thread().name]


def test_close_interrupted_by_ctrl_c_leaves_it_open_and_close_again_finishes() -> None:
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    inf.infer_async(X)
    real = inf._wait_all
    calls = []

    def interrupted(*args: object, **kw: object) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(*args, **kw)  # type: ignore[arg-type]

    inf._wait_all = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        inf.close()
    assert not inf._closed  # not closed: its requests may still run
    inf.infer_async(X)  # still usable
    inf.close()
    assert inf._closed and len(calls) == 2 and inf.pending == 0
    with pytest.raises(interop.InteropError, match="closed"):
        inf.infer_async(X)


def test_inference_used_by_infer_alone_is_collected_once_dropped() -> None:
    """infer() runs on the caller's thread, which holds the Inference: nothing is parked for a later let-go (each
    infer() parked it again, so it lived on until exit in a program that never calls infer_async/wait_all)."""
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    for _ in range(5):
        inf.infer(X)
    assert all(i is not inf for i in inference_module._ended.values())
    ref = weakref.ref(inf)
    del inf
    gc.collect()
    assert ref() is None, "infer() parked the Inference: only a later infer_async/wait_all let go of it"


def test_an_inference_fed_from_callbacks_alone_is_parked_once() -> None:
    """Submissions from another Inference's callbacks never let go of the parked ones (a callback's thread may not):
    an Inference whose requests all end again and again is parked once, not once each time."""
    a = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    b = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    done = threading.Event()
    rounds = 12

    def on_b(outputs: dict, n: int) -> None:
        if n + 1 < rounds:
            a.infer_async(X, on_a, n + 1)
        else:
            done.set()

    def on_a(outputs: dict, n: int) -> None:
        b.infer_async(X, on_b, n)  # b's requests all end before the next one: parked each time

    a.infer_async(X, on_a, 0)
    assert done.wait(60)
    for _ in range(300):  # not wait_all(): it would let go of the parked ones
        if a.pending == 0 and b.pending == 0:
            break
        threading.Event().wait(0.01)
    assert sum(i is b for i in inference_module._ended.values()) <= 1
    assert len(inference_module._ended) <= 2
    a.close()
    b.close()


def _slow_model():  # type: ignore[no-untyped-def]
    """A model whose requests last long enough that the last one often ends just as the caller stops waiting, and
    an input for it."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 3, 256, 256], ov.Type.f32, name="x")
    w = ops.constant(np.ones((16, 3, 3, 3), np.float32))
    return ov.Model([ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))], [x]), np.ones((1, 3, 256, 256),
                                                                                                  np.float32)


class _OpenVINO:
    """openvino for one Inference, but each AsyncInferQueue it makes records itself and its callback weakly."""

    def __init__(self, ov: object, seen: list[tuple[weakref.ref, weakref.ref]]) -> None:
        self._ov = ov

        class Queue(ov.AsyncInferQueue):  # type: ignore[attr-defined, name-defined, misc]
            def set_callback(self, callback: object) -> None:
                seen.append((weakref.ref(self), weakref.ref(callback)))
                super().set_callback(callback)

        self.AsyncInferQueue = Queue

    def __getattr__(self, name: str) -> object:
        return getattr(self._ov, name)


def test_close_returns_once_openvino_holds_no_callback_of_its_queues() -> None:
    """Each request keeps a copy of its queue's callback, and so does OpenVINO's thread that finishes it until a
    moment after the request's wait() returned: the last copy can go there after close() freed the queue, and letting
    go of it takes the GIL on that thread, which at interpreter exit aborts the process (std::terminate, seen now and
    then in tests/test_exit_threads.py). close() returns only once no such copy is left."""
    model, data = _slow_model()
    late = 0
    for _ in range(40):
        seen: list[tuple[weakref.ref, weakref.ref]] = []
        inf = interop.Inference(model, "CPU", config=CONFIG)
        inf._ov = _OpenVINO(inf._ov, seen)
        for _ in range(8):
            inf.infer_async(data)
        inf.wait_all()
        inf.close()
        assert seen and all(queue() is None for queue, _ in seen), "close() kept a request queue"
        late += any(callback() is not None for _, callback in seen)
        del inf
    assert late == 0, f"{late} of 40 closes returned while OpenVINO's thread still held a freed queue's callback"


def test_an_error_kept_from_a_callback_holds_no_callback_of_a_closed_queue() -> None:
    """A callback's error is kept with its traceback (for wait_all(), then by the caller): the frames it holds must not
    hold the queue's callback or the request, or close() waits its full limit for them and exit after it."""
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)

    def boom(outputs: dict, i: int) -> None:
        raise RuntimeError("a callback that fails")

    inf.infer_async(X, boom, 0)
    with pytest.raises(RuntimeError, match="a callback that fails") as kept:
        inf.wait_all()
    inf.close()
    assert kept.value.__traceback__ is not None  # still held here
    assert inference_module._held_callbacks(inf) == 0, "the kept traceback holds a closed queue's callback"


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def test_dropping_an_inference_right_after_wait_all_leaves_no_openvino_thread_stuck() -> None:
    """wait_all() returns once the last callback counted its request done, while that callback still returns: an
    Inference dropped then (no close()) must not free its queue under it (the request copy the callback was given
    became the request's last owner, and its destructor, on that request's own thread, waited for the request to end:
    that thread stuck for good, with the model's memory)."""
    model, data = _slow_model()
    inf = interop.Inference(model, "CPU", config=CONFIG)
    inf.infer_async(data)
    inf.close()  # OpenVINO's own threads made once
    before = _tasks()
    for _ in range(30):
        inf = interop.Inference(model, "CPU", config=CONFIG)
        for _ in range(8):
            inf.infer_async(data)
        inf.wait_all()
        del inf
    gc.collect()
    assert _tasks() <= before + 2, f"{_tasks() - before} more threads after 30 Inferences dropped after wait_all()"
    assert inference_module._held_callbacks(None) == 0


def _threads_in(name: str) -> int:
    """Threads now running the function ``name`` somewhere in their stack."""
    n = 0
    for f in sys._current_frames().values():
        while f is not None:
            if f.f_code.co_name == name:
                n += 1
                break
            f = f.f_back
    return n


def test_an_inference_let_go_inside_its_own_callback_frees_its_queue_off_that_thread(monkeypatch) -> None:
    """The last reference to an Inference may go inside its queue's own callback (a program thread let go of the
    parked Inference while the callback still runs): its finaliser must not wait for that queue on that thread (the
    request would wait for itself), and frees it on a thread of its own."""
    real = inference_module.Inference._on_done
    dropped = threading.Event()

    def on_done(self, request, job):  # type: ignore[no-untyped-def]
        real(self, request, job)
        dropped.wait(10)  # the program has let go of it by now
        inference_module._ended.clear()  # now only _Dispatch.__call__ holds the Inference: it lets go of it last

    monkeypatch.setattr(inference_module.Inference, "_on_done", on_done)
    freed_on: list[str] = []
    free = inference_module._wait_and_free

    def wait_and_free(pools, token):  # type: ignore[no-untyped-def]
        freed_on.append(threading.current_thread().name)
        free(pools, token)

    monkeypatch.setattr(inference_module, "_wait_and_free", wait_and_free)
    inf = interop.Inference(tiny_model(), "CPU", config=CONFIG)
    inf.compile_for(X)
    queues = [q for q, d in list(inference_module._callbacks.values()) if d() is not None and d().ref() is inf]
    assert queues
    inf.infer_async(X)
    del inf
    dropped.set()
    deadline = time.monotonic() + 10
    while any(q() is not None for q in queues) and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert all(q() is None for q in queues), "the queue was never freed (its finaliser waited on the callback's thread)"
    assert freed_on == ["interop-inference-free"]
    assert _threads_in("wait_and_free") == 0


class _Queue:
    """A request queue with no request: nothing to wait for."""

    def __len__(self) -> int:
        return 0


class _Pool:
    queue = _Queue()


def test_a_free_whose_thread_cannot_start_leaves_nothing_for_exit_to_wait_for(monkeypatch) -> None:
    """Freeing a dropped Inference's queues from inside a callback needs a thread: when it cannot start (the
    interpreter shutting down, threads exhausted), the free's token must not stay behind (exit waited its whole
    deadline for it)."""
    def refuse(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    inference_module._callbacks_here().append(0)  # as in a completion callback
    try:
        with pytest.raises(RuntimeError):
            inference_module._free_queues({"v": type("V", (), {"pool": _Pool()})()}, [])
    finally:
        inference_module._callbacks_here().pop()
    assert not inference_module._freeing


def test_a_ctrl_c_as_a_free_begins_leaves_nothing_for_exit_to_wait_for(monkeypatch) -> None:
    """A KeyboardInterrupt landing where the free waits for the queues (its entry is a point CPython raises one at)
    must not leave the free counted."""
    def interrupted(pools, token):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(inference_module, "_wait_and_free", interrupted)
    with pytest.raises(KeyboardInterrupt):
        inference_module._free_queues({}, [_Pool()])
    assert not inference_module._freeing
