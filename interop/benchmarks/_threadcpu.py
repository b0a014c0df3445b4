"""Where a benchmark's CPU goes: this process's threads, by group, over timed windows.

``interop run`` shares the cores with its own decoder threads, the inference runtime's threads, the result thread
and its loop: on a machine the network alone keeps busy, every millisecond of CPU beside the network's is
throughput lost, so the benchmark reports each group's CPU per frame over the run's timed window and the ceiling it
sets (the plain network's CPU per frame over the run's). Linux only (thread CPU clocks and /proc/self/task); a
sampler thread reads every thread's CPU time every ``every`` seconds and keeps each thread's last figure, so a
thread that ends inside a window (the decoder's, the result thread) counts in its group up to its last sample; what
it used after that is in the process's CPU clock, and is reported as a group of its own (ENDED). The sampler's
own CPU is left out.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable

#: the groups a thread falls in, by its OS name or its Python thread name
DECODE = "decode (FFmpeg threads)"
RUNTIME = "native threads (OpenVINO's inference threads, and any other native library's)"
RESULTS = "results (the boxes, on the result thread)"
LOOP = "loop (decode calls, map, requests: the main thread)"
OTHER = "other Python threads"
ENDED = "threads that ended in the window (their CPU after their last sample)"
GROUPS = (RUNTIME, DECODE, RESULTS, LOOP, OTHER, ENDED)  # in the order the benchmark lists them


def group_of(os_name: str, py_name: str | None) -> str:
    if os_name.startswith("av:"):  # FFmpeg names its frame and slice threads av:CODEC:...
        return DECODE
    if py_name is None:
        return RUNTIME
    if py_name == "MainThread":
        return LOOP
    if py_name.startswith("interop-run-results"):
        return RESULTS
    return OTHER


def _thread_clock(tid: int) -> int:
    # the CPU-time clock of a thread of this process, as glibc's pthread_getcpuclockid builds it (a kernel ABI):
    # nanosecond CPU time of threads Python did not start
    return ((~tid) << 3) | 6


class ThreadCPU:
    """``with ThreadCPU() as cpu: ...; cpu.window(t0, t1)``: CPU seconds per group between two time.monotonic()
    instants. ``available`` is False where this cannot be measured."""

    def __init__(self, every: float = 0.02, group: Callable[[str, str | None], str] = group_of):
        self.every = every
        self.group = group
        self.available = os.path.isdir("/proc/self/task")
        if self.available:
            try:
                time.clock_gettime(_thread_clock(threading.get_native_id()))
            except OSError:
                self.available = False
        self._times: list[float] = []
        self._samples: list[dict[int, tuple[str, float]]] = []
        self._process: list[float] = []  # the process's CPU clock (threads that ended included), less the sampler's
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
        names = {t.native_id: t.name for t in threading.enumerate()}
        got: dict[int, tuple[str, float]] = {}
        for entry in os.listdir("/proc/self/task"):
            tid = int(entry)
            if tid == self._me:
                continue
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    comm = f.read().strip()
                cpu = time.clock_gettime(_thread_clock(tid))
            except OSError:  # the thread ended meanwhile
                continue
            got[tid] = (self.group(comm, names.get(tid)), cpu)
        self._times.append(time.monotonic())
        self._samples.append(got)
        self._process.append(time.process_time() - time.thread_time())

    def _loop(self) -> None:
        self._me = threading.get_native_id()
        while True:
            self._sample()
            if self._stop.wait(self.every):
                self._sample()
                return

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per group from ``t0`` to ``t1`` (time.monotonic()), between the samples around them (at most
        one sampling period more on each side); {} when nothing was sampled."""
        if not self._times:
            return {}
        # the samples around the window: the last one at or before t0, the first one at or after t1
        i0 = max(0, bisect.bisect_right(self._times, t0) - 1)
        i1 = min(bisect.bisect_left(self._times, t1), len(self._times) - 1)
        start = self._samples[i0]
        last: dict[int, tuple[str, float]] = {}
        for s in self._samples[i0:i1 + 1]:
            last.update(s)  # a thread's latest figure up to t1, also of threads that ended in between
        out: dict[str, float] = {}
        for tid, (g, cpu) in last.items():
            out[g] = out.get(g, 0.0) + cpu - start.get(tid, (g, 0.0))[1]
        rest = self._process[i1] - self._process[i0] - sum(out.values())
        if rest > 0:
            out[ENDED] = rest
        return out
