"""A single-stream `interop run` with its text boxes made in post-processing processes (`post_processes`, the default
with --nvdec on a machine of 8 CPUs or more): the same results as on a thread, the caller's callbacks, the
processes' own failures typed and stopping the run, and when each request completed."""

from __future__ import annotations

import gc
import os
import signal
from typing import Any

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from interop import pipeline  # noqa: E402
from interop.pipeline import RunArgumentError, run  # noqa: E402
from interop.postpool import PostPool, PostPoolError  # noqa: E402
from tests import test_streams  # noqa: E402

clip = test_streams.clip  # the bundled clip (skipped without the detector model)
SIZE = (320, 192)


def _boxes(r: Any) -> list[list[tuple[list[list[float]], float]]]:
    return [[(b.points.tolist(), b.score) for b in r.boxes[i]] for i in range(r.frames)]


def _fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def test_boxes_in_processes_are_those_made_on_a_thread(clip: str) -> None:
    fds = _fds()
    progress: list[tuple[int, int | None]] = []
    results: list[Any] = []
    a = run(clip, frames=10, input_size=SIZE, post_processes=0)
    b = run(clip, frames=10, input_size=SIZE, post_processes=2, on_progress=lambda d, t: progress.append((d, t)),
            on_result=results.append)
    assert (a.post_processes, b.post_processes) == (0, 2)
    assert a.frames == b.frames == 10 and b.copies == 0
    assert _boxes(a) == _boxes(b) and any(_boxes(b))
    assert b.output_bytes == a.output_bytes == 10 * SIZE[0] * SIZE[1] * 4  # each map read once out of its request
    assert progress == [(d, 10) for d in range(11)]
    assert sorted(r.index for r in results) == list(range(10))
    assert all([(p.points.tolist(), p.score) for p in r.boxes] == _boxes(b)[r.index] for r in results)
    assert b.post_cpu > 0 and len(b.completed_at) == len(a.completed_at) == 10
    assert b.to_json()["post_processes"] == 2
    assert _fds() == fds  # the processes' sockets and the shared block closed


def test_the_default_puts_the_boxes_in_processes_only_with_nvdec_on_many_cpus(monkeypatch: pytest.MonkeyPatch,
                                                                               clip: str) -> None:
    from interop.postpool import default_processes

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert pipeline._post_processes(None, nvdec=True) == default_processes() == 2
    assert pipeline._post_processes(None, nvdec=False) == 0
    assert pipeline._post_processes(3, nvdec=False) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert pipeline._post_processes(None, nvdec=True) == 0
    monkeypatch.undo()
    assert run(clip, frames=3, input_size=SIZE).post_processes == 0  # the CPU path: a thread
    assert run(clip, frames=3, input_size=SIZE, post_processes=1, postprocess=False).post_processes == 0  # no boxes


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", (os.cpu_count() or 1) + 1])
def test_a_bad_post_processes_is_refused_before_anything_opens(bad: Any) -> None:
    with pytest.raises(RunArgumentError, match="post_processes is a number of processes from 0"):
        run("/nonexistent/clip.mp4", post_processes=bad)
    with pytest.raises(RunArgumentError, match="post_processes is a number of processes from 0"):
        run("/nonexistent/clip.mp4", post_processes=bad, postprocess=False)  # checked whatever the run


def _capture_pools(monkeypatch: pytest.MonkeyPatch) -> list[PostPool]:
    pools: list[PostPool] = []

    class Recorded(PostPool):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            pools.append(self)

    monkeypatch.setattr("interop.run_boxes.PostPool", Recorded)
    return pools


def test_a_killed_post_processing_process_stops_the_run_with_a_typed_error(monkeypatch: pytest.MonkeyPatch,
                                                                           clip: str) -> None:
    pools = _capture_pools(monkeypatch)
    fds = _fds()

    def kill_after_the_third(done: int, total: int | None) -> None:
        if done == 3:
            os.kill(pools[0]._children[0].proc.pid, signal.SIGKILL)

    with pytest.raises(PostPoolError, match="post-processing process"):
        run(clip, input_size=SIZE, post_processes=1, on_progress=kill_after_the_third)
    assert all(c.proc.poll() is not None for c in pools[0]._children)
    assert _fds() == fds


def test_an_on_result_error_fails_the_run_as_it_is(clip: str) -> None:
    class Mine(Exception):
        pass

    def on_result(r: Any) -> None:
        if r.index == 2:
            raise Mine("the caller's own")

    with pytest.raises(Mine, match="the caller's own"):
        run(clip, frames=8, input_size=SIZE, post_processes=1, on_result=on_result)


def test_a_request_s_completion_is_noted_before_its_boxes(clip: str) -> None:
    import time

    made: list[float] = []

    def slow(fr: Any) -> None:  # a caller's callback slower than the network: results come long after the requests
        time.sleep(0.05)
        made.append(time.monotonic())

    r = run(clip, frames=8, input_size=SIZE, post_processes=1, on_result=slow)
    assert len(r.completed_at) == 8 and len(made) == 8
    done, got = sorted(r.completed_at), sorted(made)
    assert all(c < m for c, m in zip(done, got))  # the k-th completion before the k-th result
    assert done[-1] < got[-1] - 0.2  # noted when the requests completed, not when their results were made


def test_an_interrupt_raised_in_a_callback_stops_the_run_and_its_processes(monkeypatch: pytest.MonkeyPatch,
                                                                          clip: str) -> None:
    pools = _capture_pools(monkeypatch)
    fds = _fds()

    def interrupt(done: int, total: int | None) -> None:  # on the thread that takes the boxes back
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(clip, input_size=SIZE, post_processes=1, on_progress=interrupt)
    assert all(c.proc.poll() is not None for c in pools[0]._children)
    assert _fds() == fds


def test_ctrl_c_during_a_run_with_its_boxes_in_processes(monkeypatch: pytest.MonkeyPatch, clip: str) -> None:
    import threading
    import time

    pools = _capture_pools(monkeypatch)
    fds = _fds()

    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))

    def progress(done: int, total: int | None) -> None:
        if done == 2:  # the run is going: Ctrl-C lands on the main thread a moment later
            timer.start()
        time.sleep(0.03)  # slow results: the run is still going when it lands

    try:
        with pytest.raises(KeyboardInterrupt):
            run(clip, input_size=SIZE, post_processes=1, on_progress=progress)
    finally:
        timer.cancel()  # never a stray Ctrl-C into the rest of the session
    assert all(c.proc.poll() is not None for c in pools[0]._children)
    assert _fds() == fds
