"""Completion callbacks that submit more requests than the pool holds, so that the drainer starts the rest: the
load of the child processes of tests/test_inference.py (no deadlock) and tests/test_inference_exit.py (exit while
the drainer is inside OpenVINO)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def fan_out_past_the_pool(get: Callable[[], Any], x: Any, nreq: int, extra: int, timeout: float = 20) -> dict[str, Any]:
    """Start ``nreq`` requests on the Inference ``get()`` returns (looked up at every submission, so that the caller
    may hold it weakly), each of whose callbacks submits ``extra`` more, and wait for them all. Returns how many
    completed (``done``), how many should have (``want``) and the callbacks' errors (``errors``)."""
    done: list[Any] = []
    errors: list[str] = []
    lock = threading.Lock()

    def leaf(outputs: Any, i: Any) -> None:
        with lock:
            done.append(i)

    def fan_out(outputs: Any, i: Any) -> None:
        with lock:
            done.append(i)
        try:
            for j in range(extra):
                get().infer_async(x, leaf, (i, j))
        except BaseException as e:  # noqa: B036 - reported to the parent process
            with lock:
                errors.append(repr(e))

    inf = get()
    for i in range(nreq):
        inf.infer_async(x, fan_out, i)
    inf.wait_all(timeout=timeout)
    return {"done": len(done), "want": nreq * (1 + extra), "errors": errors}
