"""Where a benchmark's CPU goes: this process's threads, by group, over timed windows.

``interop run`` shares the cores with its own decoder threads, the inference runtime's threads, the result thread
and its loop: on a machine the network alone keeps busy, every millisecond of CPU beside the network's is
throughput lost, so the benchmark reports each group's CPU per frame over the run's timed window and the ceiling it
sets (the plain network's CPU per frame over the run's). Linux only (thread CPU clocks and /proc/self/task); a
sampler thread reads every thread's CPU clock every ``every`` seconds; a window's edges are interpolated between the
samples around them. A thread that ends inside a window (the decoder's, the result thread) counts in its group up
to its last sample; what it used after that is in the process's CPU clock, and is reported as a group of its own
(ENDED). The sampler's own CPU is left out.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable

#: the groups a thread falls in, by its OS name or its Python thread name
DECODE = "decode (FFmpeg threads; with --nvdec, the thread that decodes and pre-processes ahead)"
RUNTIME = "native threads (OpenVINO's inference threads, and any other native library's)"
RESULTS = "results (the boxes on the result thread, or the thread that takes them from post-processing processes)"
#: not a group of this process's threads (ThreadCPU never reports it): benchmark (b) adds it from RunResult.post_cpu
POST = "post-processing processes (the boxes, made in processes of their own: their own CPU, not this process's)"
LOOP = "loop (decode calls, map, requests: the main thread)"
OTHER = "other Python threads"
ENDED = "threads that ended in the window (their CPU after their last sample)"
GROUPS = (RUNTIME, DECODE, RESULTS, POST, LOOP, OTHER, ENDED)  # in the order the benchmark lists them
_PYTHON = (LOOP, RESULTS, OTHER)  # the groups of threads Python started
_SETTLED = 20  # samples after which a thread's name (and so its group) is taken as final


def group_of(os_name: str, py_name: str | None) -> str:
    if os_name.startswith("av:"):  # FFmpeg names its frame and slice threads av:CODEC:...
        return DECODE
    if py_name is None:
        return RUNTIME
    if py_name == "MainThread":
        return LOOP
    if py_name.startswith("interop-decode"):  # interop run --nvdec's thread that decodes and pre-processes ahead
        return DECODE
    if py_name.startswith(("interop-run-results", "interop-postpool-reader")):
        return RESULTS
    return OTHER


def _thread_clock(tid: int) -> int:
    # the CPU-time clock of a thread of this process, as glibc's pthread_getcpuclockid builds it (a kernel ABI):
    # nanosecond CPU time of threads Python did not start
    return ((~tid) << 3) | 6


class ThreadCPU:
    """``with ThreadCPU() as cpu: ...; cpu.window(t0, t1)``: CPU seconds per group between two time.monotonic()
    instants. ``available`` is False where this cannot be measured."""

    def __init__(self, every: float = 0.005, group: Callable[[str, str | None], str] = group_of):
        self.every = every
        self.group = group
        self.available = os.path.isdir("/proc/self/task")
        if self.available:
            try:
                time.clock_gettime(_thread_clock(threading.get_native_id()))
            except OSError:
                self.available = False
        # each sample: the middle of its readings, every thread's (group, CPU seconds), and the process's CPU clock
        # (threads that ended included) less the sampler's
        self._times: list[float] = []
        self._samples: list[dict[int, tuple[str, float]]] = []
        self._process: list[float] = []
        # each thread's group, CPU at its latest sample, and how many samples have seen it
        self._known: dict[int, tuple[str, float, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._me = 0

    def __enter__(self) -> ThreadCPU:
        if self.available:
            self._thread = threading.Thread(target=self._loop, name="interop-bench-threadcpu", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self) -> None:
        began = time.monotonic()
        process = time.process_time() - time.thread_time()
        tids = [int(e) for e in os.listdir("/proc/self/task")]
        names: dict[int | None, str] | None = None
        got: dict[int, tuple[str, float]] = {}
        clock = time.clock_gettime
        for tid in tids:
            if tid == self._me:
                continue
            try:
                cpu = clock(_thread_clock(tid))
            except OSError:  # the thread ended meanwhile
                continue
            known = self._known.get(tid)
            if known is not None and cpu >= known[1] and (known[0] in _PYTHON or known[2] >= _SETTLED):
                # the group it had: a Python thread past its end (no longer enumerated, still listed) keeps its own
                got[tid] = (known[0], cpu)
                self._known[tid] = (known[0], cpu, known[2] + 1)
                continue
            # new (or a number reused: its CPU clock restarted), or still young: a thread is named, and enumerated
            # by Python, a moment after it starts
            if names is None:  # after the listing: its live Python threads are all enumerated
                names = {t.native_id: t.name for t in threading.enumerate()}
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            seen = known[2] + 1 if known is not None and cpu >= known[1] else 1
            group = self.group(comm, names.get(tid))
            got[tid] = (group, cpu)
            self._known[tid] = (group, cpu, seen)
        for tid in set(self._known) - set(got):
            del self._known[tid]
        self._samples.append(got)
        self._process.append(process)
        self._times.append((began + time.monotonic()) / 2)  # last: window() looks samples up by their time

    def _loop(self) -> None:
        self._me = threading.get_native_id()
        while True:
            self._sample()
            if self._stop.wait(self.every):
                self._sample()
                return

    def _at(self, t: float) -> tuple[dict[int, tuple[str, float]], float]:
        """Every thread's CPU and the process's, interpolated at ``t`` between the samples around it. A thread missing
        from the later sample (it ended) stays at its last figure; one missing from the earlier (it started) at 0."""
        n = len(self._times)  # the sampler may append meanwhile: the first n entries of each list are complete
        k = min(max(bisect.bisect_right(self._times, t, 0, n) - 1, 0), n - 1)
        a = self._samples[k]
        if k + 1 == n or t <= self._times[k]:
            return dict(a), self._process[k]
        b = self._samples[k + 1]
        f = (t - self._times[k]) / (self._times[k + 1] - self._times[k])
        out = {}
        for tid in a.keys() | b.keys():
            g, ca = a.get(tid) or (b[tid][0], 0.0)
            cb = b[tid][1] if tid in b else ca
            out[tid] = (g if tid not in b else b[tid][0], ca + f * (cb - ca))
        return out, self._process[k] + f * (self._process[k + 1] - self._process[k])

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per group from ``t0`` to ``t1`` (time.monotonic()); {} when nothing was sampled. A window read
        right after it ends waits for the sampler's next sample (a few periods at most): read before it, the window's
        last stretch would be cut short."""
        deadline = time.monotonic() + 4 * self.every + 0.5
        while (self._thread is not None and self._thread.is_alive() and (not self._times or self._times[-1] < t1)
               and time.monotonic() < deadline):
            time.sleep(self.every / 4)
        if not self._samples:
            return {}
        start, p0 = self._at(t0)
        end, p1 = self._at(t1)
        # threads that started and ended between the two: their last figure
        lo, hi = bisect.bisect_right(self._times, t0), bisect.bisect_left(self._times, t1)
        last: dict[int, tuple[str, float]] = {}
        for s in self._samples[lo:hi]:
            last.update(s)
        for tid, v in last.items():
            end.setdefault(tid, v)
        out: dict[str, float] = {}
        for tid, (g, cpu) in end.items():
            out[g] = out.get(g, 0.0) + cpu - start.get(tid, (g, 0.0))[1]
        rest = p1 - p0 - sum(out.values())
        if rest > 0:
            out[ENDED] = rest
        return out
