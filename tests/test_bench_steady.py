"""Benchmark (b)'s steady-state throughput (interop/benchmarks/pipeline.py): the window it counts, the plain network's
results timed by its starts (no callback), the run's by its requests' completions (RunResult.completed_at), and the
rows it reports."""

from __future__ import annotations

import os
import time
import types
from typing import Any

import pytest

from interop.benchmarks import pipeline as bp


def test_the_steady_window_lies_between_the_pool_ends() -> None:
    # a slow start (the pool filling, first inferences), then one result every 10 ms, then a slow drain
    times = [0.3, 0.5, 0.7] + [0.9 + 0.01 * j for j in range(93)] + [2.0, 2.5, 3.0, 3.5]
    n = len(times)  # 100 results
    assert bp._rate(bp.steady_window(times, n, 4)) == pytest.approx(100.0)
    whole = n / times[-1]
    assert whole < 40  # what the whole call reads, start and drain included


@pytest.mark.parametrize(("times", "results", "skip"), [
    ([0.1 * j for j in range(1, 9)], 8, 4),  # no result between the pool's ends
    ([0.1 * j for j in range(1, 9)], 8, 0),  # no pool
    ([0.1 * j for j in range(1, 5)], 20, 4),  # the times stop before the window's end
    ([1.0] * 20, 20, 4),  # no time passed
])
def test_no_steady_window_is_none(times: list[float], results: int, skip: int) -> None:
    assert bp.steady_window(times, results, skip) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Queue:
    """An AsyncInferQueue of ``nreq`` requests on a clock of its own: result j (from 1) comes at ``first + (j - 1) *
    every``; start_async waits (the clock moves) while every request is busy, wait_all until all are done."""

    def __init__(self, clock: _Clock, nreq: int, first: float, every: float):
        self.clock, self.nreq, self.first, self.every = clock, nreq, first, every
        self.started = self.done = 0

    def _next_done(self) -> None:
        self.done += 1
        self.clock.now = max(self.clock.now, self.first + (self.done - 1) * self.every)

    def start_async(self, _x: Any) -> None:
        if self.started - self.done == self.nreq:
            self._next_done()
        self.started += 1

    def wait_all(self) -> None:
        while self.done < self.started:
            self._next_done()
        self.first = self.clock.now + 10 * self.every  # the next call starts cold again
        self.started = self.done = 0


def test_plain_network_steady_state_is_timed_by_its_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(bp, "time", types.SimpleNamespace(monotonic=clock))
    plain = object.__new__(bp.PlainNetwork)
    plain.nreq, plain.inputs, plain.window = 8, [object()], (0.0, 0.0)
    plain.queue = _Queue(clock, 8, first=1.0, every=0.004)  # 250 results a second once going
    fps = plain.infer_only(200)
    assert bp._rate(plain.steady_window) == pytest.approx(250.0)
    assert plain.steady_window is not None and plain.steady_window[2] == 200 - 2 * 8  # results 8 .. 192
    assert fps < bp._rate(plain.steady_window)  # the whole call counts the cold first result
    plain.infer_only(16)  # too few frames for a window
    assert plain.steady_window is None


def test_run_notes_when_each_request_completed() -> None:
    pytest.importorskip("openvino")
    pytest.importorskip("av")
    from interop.pipeline import run

    t0 = time.monotonic()
    r = run(None, frames=6, input_size=(320, 192))
    t1 = time.monotonic()
    assert r.frames == 6 and len(r.completed_at) == 6
    assert all(t0 < t < t1 for t in r.completed_at)
    assert bp.steady_window(sorted(r.completed_at), r.frames, 2) is not None


def test_steady_rows_and_their_skip_reason() -> None:
    rows = bp._steady_results("interop run", [90.0, None, 110.0], [200.0, 100.0], {"m": 1}, 300, 32, plain_row=True)
    assert [r.case for r in rows] == ["steady-state fps: interop run", "steady-state fps: plain network",
                                      "steady state: interop run / plain network (target >= 0.9)"]
    assert [r.value for r in rows] == [100.0, 150.0, pytest.approx(100.0 / 150.0)]
    assert rows[0].details["all"] == [90.0, 110.0] and "results 32 to 268" in rows[2].details["window"]
    nvdec = bp._steady_results("interop run --nvdec", [120.0], [150.0], {}, 300, 32, target=False)  # plain row once
    assert [r.case for r in nvdec] == ["steady-state fps: interop run --nvdec",
                                       "steady state: interop run --nvdec / plain network"]
    short = bp._steady_results("interop run", [None], [None], {}, 64, 32)
    assert all(r.skipped and "64 frames leave no steady window with 32 requests (needs more than 64)" in r.skipped
               for r in short)
    assert bp.steady_window([0.01 * j for j in range(65)], 65, 32) is not None  # 65 frames: a window of one result
    none = bp._steady_results("interop run", [None], [100.0], {}, 300, 32)
    assert all(r.skipped == "no repetition had a steady window" for r in none)


def test_the_run_s_steady_state_is_the_lower_of_completions_and_results_made(monkeypatch: pytest.MonkeyPatch) -> None:
    class Res:
        frames = 100
        completed_at = [0.001 * j for j in range(100)]  # the requests: 1000 a second

    def run(*args: object, on_progress: object, **kwargs: object) -> Res:
        assert callable(on_progress)
        for done in range(101):  # the results: 100 a second (the boxes are the bottleneck)
            on_progress(done, 100)
            clock[0] += 0.01
        return Res()

    clock = [0.0]
    monkeypatch.setattr(bp, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    _, window = bp._timed_run(run, 4, "clip")
    assert bp._rate(window) == pytest.approx(100.0)
    Res.completed_at = [0.5 + 0.001 * j for j in range(100)]  # completions slower than the results' times say
    clock[0] = 0.0

    def fast(*args: object, on_progress: object, **kwargs: object) -> Res:
        for done in range(101):
            on_progress(done, 100)  # a result thread that catches up: all made at one moment
            clock[0] += 1e-6
        return Res()

    _, window = bp._timed_run(fast, 4, "clip")
    assert bp._rate(window) == pytest.approx(1000.0)
    assert window is not None and window[:2] == (Res.completed_at[3], Res.completed_at[95])  # the completions' span


def test_the_steady_ceiling_compares_cpu_per_frame_over_the_steady_windows() -> None:
    (row,) = bp._steady_ceiling([{"a": 50.0, "b": 10.0}, {"a": 70.0}], [{"a": 60.0, "c": 15.0}, {"a": 80.0}], {})
    assert row.value == pytest.approx(65.0 / 77.5) and row.details["plain_ms"] == 65.0
    (none,) = bp._steady_ceiling([], [{"a": 1.0}], {})
    assert none.skipped


def test_plain_network_decoding_decodes_one_frame_before_each_start(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(bp, "time", types.SimpleNamespace(monotonic=clock))
    events: list[str] = []

    class Frames:
        def __init__(self, path: str) -> None:
            events.append(f"open {path}")

        def next(self) -> None:
            events.append("frame")

        def close(self) -> None:
            events.append("close")

    monkeypatch.setattr(bp, "_Frames", Frames)
    plain = object.__new__(bp.PlainNetwork)
    plain.nreq, plain.inputs, plain.window = 4, [object()], (0.0, 0.0)
    queue = _Queue(clock, 4, first=1.0, every=0.004)
    real_start = queue.start_async
    queue.start_async = lambda x: (events.append("start"), real_start(x))  # type: ignore[method-assign]
    plain.queue = queue
    plain.infer_only(10, decode="clip.mp4")
    # the warm-up starts decode nothing; then each timed start follows its frame; the video closes at the end
    assert events == ["start"] * 4 + ["open clip.mp4"] + ["frame", "start"] * 10 + ["close"]
    assert plain.steady_window is not None


def test_decoded_frames_start_again_at_the_clip_s_end(tmp_path: Any) -> None:
    pytest.importorskip("av")
    from interop.clip import encode
    from interop.pipeline import DECODE_THREADS

    n = 12
    path = str(encode(tmp_path / "short.mp4", n, 64, 48))  # a short clip of its own: the gradient pattern, no OpenCV
    frames = bp._Frames(path)
    first = frames.container
    try:
        pts = [frames.next().pts for _ in range(n + 2)]  # past the end: the clip is opened again
        # decoded with the threads interop run decodes with, the reopened clip too
        assert frames.stream.codec_context.thread_count == max(1, min(DECODE_THREADS, os.cpu_count() or 1))
    finally:
        frames.close()
    assert frames.container is not first
    assert pts[n:] == pts[:2] and len(set(pts[:n])) == n


def test_decoding_rows_compare_repetitions_that_have_every_window() -> None:
    rows = bp._decoding_results([80.0, 90.0, None], [100.0, 100.0, 100.0], [72.0, 81.0, 99.0], 31.5, {}, 300, 32)
    assert [r.case for r in rows] == list(bp._DECODING)
    assert [r.value for r in rows] == [85.0, pytest.approx(0.85), pytest.approx(76.5 / 85.0)]
    assert rows[0].details["cpu_ms_per_frame_process"] == 31.5 and rows[0].details["all"] == [80.0, 90.0]
    short = bp._decoding_results([None], [None], [None], 0.0, {}, 64, 32)
    assert all(r.skipped and "needs more than 64" in r.skipped for r in short)
