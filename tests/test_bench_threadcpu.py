"""The pipeline benchmark's thread CPU accounting (interop/benchmarks/_threadcpu.py): each group's CPU over a window
matches what the threads themselves measured, FFmpeg's threads are found by name, and a thread that ended inside the
window still counts."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from interop.benchmarks import _threadcpu as tc


@contextlib.contextmanager
def _sampling(every: float = 0.01) -> Iterator[tc.ThreadCPU]:
    with tc.ThreadCPU(every=every) as cpu:
        if not cpu.available:
            pytest.skip("needs per-thread CPU clocks and /proc/self/task (Linux)")
        yield cpu


def _spin(seconds: float) -> float:
    """Burn about ``seconds`` of this thread's CPU; returns the CPU it measured for itself."""
    c0 = time.thread_time()
    while time.thread_time() - c0 < seconds:
        sum(range(1000))
    return time.thread_time() - c0


def test_groups_match_what_each_thread_measured_and_an_ended_thread_counts() -> None:
    got: dict[str, float] = {}
    with _sampling(0.01) as cpu:
        time.sleep(0.05)
        t0 = time.monotonic()
        results = threading.Thread(target=lambda: got.update(results=_spin(0.3)), name="interop-run-results-0")
        other = threading.Thread(target=lambda: got.update(other=_spin(0.15)), name="somebody-else")
        results.start()
        other.start()
        got["loop"] = _spin(0.2)
        results.join()  # both end well before the window does
        other.join()
        time.sleep(0.05)
        t1 = time.monotonic()
        time.sleep(0.05)
    w = cpu.window(t0, t1)
    # a thread that ended counts in its group up to its last sample; the rest of its CPU is in ENDED. How much of it
    # was sampled while it ran depends on the sampler getting a CPU beside three spinning threads on two (a loaded
    # machine can starve it for the whole of the shorter one): never more than it ran, and the sum below is whole.
    assert w.get(tc.RESULTS, 0.0) <= got["results"] + 0.01
    assert w.get(tc.OTHER, 0.0) <= got["other"] + 0.01
    assert w.get(tc.RESULTS, 0.0) + w.get(tc.OTHER, 0.0) > 0.0  # at least one was sampled while it ran
    ended = w.get(tc.ENDED, 0.0)
    assert w[tc.RESULTS] + w[tc.OTHER] + ended == pytest.approx(got["results"] + got["other"], rel=0.1, abs=0.02)
    assert w[tc.LOOP] == pytest.approx(got["loop"], rel=0.15)
    assert sum(w.values()) == pytest.approx(sum(got.values()), rel=0.1)  # nothing else ran: the whole is there
    before = cpu.window(t0 - 100, t0 - 0.04)  # the samples before the threads started: none of their CPU
    assert before.get(tc.RESULTS, 0.0) == 0.0 and before.get(tc.OTHER, 0.0) == 0.0


def test_a_python_thread_keeps_its_group_while_it_exits() -> None:
    """Past Thread._delete a Python thread is no longer enumerated but still listed in /proc until its OS thread
    exits: sampled then, it was taken for a native thread, and its whole CPU moved to that group."""

    class SlowExit(threading.Thread):
        def _delete(self) -> None:
            super()._delete()
            time.sleep(0.2)  # the moment between threading forgetting it and the OS thread ending, made long

    got: dict[str, float] = {}
    with _sampling(0.01) as cpu:
        time.sleep(0.05)
        t0 = time.monotonic()
        t = SlowExit(target=lambda: got.update(results=_spin(0.2)), name="interop-run-results-0")
        t.start()
        t.join()
        t1 = time.monotonic()
        time.sleep(0.05)
    w = cpu.window(t0, t1)
    assert w.get(tc.RESULTS, 0.0) == pytest.approx(got["results"], rel=0.1) and w.get(tc.RUNTIME, 0.0) < 0.02


def test_ffmpeg_threads_are_the_decode_group() -> None:
    av = pytest.importorskip("av")
    from interop.clip import default_clip

    with _sampling(0.01) as cpu:
        t0 = time.monotonic()
        with av.open(default_clip()) as c:
            s = c.streams.video[0]
            s.thread_type, s.thread_count = "FRAME", 2  # decoding on FFmpeg's own (named) threads
            n = sum(1 for _ in c.decode(s))
        t1 = time.monotonic()
    w = cpu.window(t0, t1)
    assert n > 0 and w.get(tc.DECODE, 0.0) > 0.0
    assert w[tc.DECODE] > w.get(tc.RUNTIME, 0.0)  # the decoding is on FFmpeg's threads, named av:...


@pytest.mark.parametrize(("os_name", "py_name", "group"), [
    ("av:h264:df0", None, tc.DECODE), ("python3", None, tc.RUNTIME), ("python3", "MainThread", tc.LOOP),
    ("python3", "interop-run-results-1", tc.RESULTS), ("python3", "interop-postpool-reader", tc.RESULTS),
    ("python3", "Thread-3", tc.OTHER)])

def test_group_of(os_name: str, py_name: str | None, group: str) -> None:
    assert tc.group_of(os_name, py_name) == group


def test_run_window_leaves_each_compile_out() -> None:
    """Benchmark (b)'s run window is the loop less each compile (which fps leaves out): CPU spent inside a compile
    span is not counted, CPU outside it is."""
    import types

    from interop.benchmarks.pipeline import _run_window

    with _sampling(0.005) as cpu:
        started = time.monotonic()
        outside = _spin(0.1)
        c0 = time.monotonic()
        _spin(0.2)  # "compiling"
        c1 = time.monotonic()
        outside += _spin(0.1)
        ended = time.monotonic()
        time.sleep(0.02)
    r = types.SimpleNamespace(started=started, ended=ended, compile_spans=[(c0, c1)], post_cpu=0.0)
    assert _run_window(cpu, r)[tc.LOOP] == pytest.approx(outside, rel=0.15)
    assert tc.POST not in _run_window(cpu, r)
    r.post_cpu = 0.25  # boxes made in post-processing processes: their CPU, which this process's clocks miss
    assert _run_window(cpu, r)[tc.POST] == 0.25


def test_run_records_its_compile_spans() -> None:
    pytest.importorskip("openvino")
    from interop.pipeline import run

    r = run(frames=3)
    (c0, c1), = r.compile_spans
    assert r.started <= c0 < c1 <= r.ended and c1 - c0 == pytest.approx(r.compile, abs=0.01)


def test_a_window_read_as_it_ends_counts_its_last_stretch() -> None:
    import bisect

    stop = threading.Event()
    marks: list[tuple[float, float]] = []  # the busy thread's own (time.monotonic(), thread CPU) as it goes

    def busy() -> None:  # CPU steadily, across both ends of the window
        while not stop.is_set():
            sum(range(1000))
            marks.append((time.monotonic(), time.thread_time()))

    def own_cpu_at(t: float) -> float:
        return marks[bisect.bisect_left(marks, (t, -1.0))][1]

    t = threading.Thread(target=busy)
    with _sampling(0.1) as cpu:
        t.start()
        time.sleep(0.25)
        t0 = time.monotonic()
        time.sleep(0.3)
        n = len(cpu._times)
        while len(cpu._times) == n:  # just past a sample: the window ends most of a period before the next one
            time.sleep(0.002)
        time.sleep(0.07)
        t1 = time.monotonic()
        w = cpu.window(t0, t1)  # at once
        stop.set()
        t.join()
    # what the busy thread measured for itself over the window, however much of a core the machine gave it
    assert w[tc.OTHER] == pytest.approx(own_cpu_at(t1) - own_cpu_at(t0), rel=0.1, abs=0.01)
