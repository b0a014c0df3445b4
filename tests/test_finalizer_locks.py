"""Finalisers never wait on a lock: the collector (or a last reference going) can run one on a thread that is inside
the very critical section the finaliser needs. Before FinalizerLock, `interop.map(array, DMA)` hung for good when a
collection inside `find_mapping` finalised a DMA mapping (seen as an interpreter that never exited in CI)."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

import interop
from interop._locks import FinalizerLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _finishes(body: Callable[[], object], timeout: float = 20.0) -> object:
    """Run ``body`` on a daemon thread; fail (instead of hanging the suite) when it does not finish in time."""
    out: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(body())
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "deadlock: a finaliser waited on a lock its own thread holds"
    if errors:
        raise errors[0]
    return out[0] if out else None


# ---- the lock itself --------------------------------------------------------------------------------------------


def test_call_on_a_free_lock_runs_at_once_holding_it():
    lock = FinalizerLock()
    seen: list[bool] = []
    lock.call(lambda: seen.append(lock.locked()))
    assert seen == [True] and not lock.locked()


def test_call_from_the_holding_thread_runs_when_it_lets_go():
    lock = FinalizerLock()
    seen: list[str] = []

    def body() -> None:
        with lock:
            lock.call(seen.append, "deferred")  # what a finaliser started by the collector in here does
            seen.append("still inside")
        seen.append("after")

    _finishes(body)
    assert seen == ["still inside", "deferred", "after"]


def test_call_from_another_thread_waits_for_the_holder_then_runs_itself():
    """A thread holding no FinalizerLock waits for another thread's (short) critical section: when call() returns
    the work is done (a frame released on one thread is back in its pool when release() returns)."""
    lock = FinalizerLock()
    seen: list[str] = []
    lock.acquire()
    t = threading.Thread(target=lock.call, args=(seen.append, "from a finaliser"), daemon=True)
    t.start()
    t.join(0.2)
    assert t.is_alive() and seen == []  # waiting for the holder
    seen.append("holder done")
    lock.release()
    t.join(10)
    assert not t.is_alive() and seen == ["holder done", "from a finaliser"]


def test_call_from_a_thread_holding_another_finalizer_lock_never_waits():
    """A finaliser started inside a critical section (this thread holds a FinalizerLock) never waits for another:
    the work is queued and the other lock's holder runs it as it lets go."""
    lock, other = FinalizerLock(), FinalizerLock()
    seen: list[str] = []
    lock.acquire()

    def finaliser_inside_a_critical_section() -> None:
        with other:
            lock.call(seen.append, "queued")
            seen.append("returned")

    t = threading.Thread(target=finaliser_inside_a_critical_section, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "call() waited while its thread held another FinalizerLock"
    assert seen == ["returned"]
    lock.release()
    assert seen == ["returned", "queued"]


def test_a_reader_taking_the_lock_runs_queued_work_first():
    """Work queued by a finaliser runs before the next critical section: a copy recorded while another thread held
    the meter's lock is counted by the time the recording thread reads its meter."""
    lock, other = FinalizerLock(), FinalizerLock()
    box: list[int] = []
    done = threading.Event()
    lock.acquire()

    def recorder() -> None:
        with other:  # queued, not waited for
            lock.call(box.append, 1)
        done.set()

    threading.Thread(target=recorder, daemon=True).start()
    assert done.wait(10)
    # the holder lets go while a reader is about to take the lock: whoever takes it first runs the queue
    lock.release()
    with lock:
        assert box == [1]


def test_pool_frame_is_back_when_release_returns_while_another_thread_maps_its_buffer():
    """Review finding: with unuse() queued behind another thread's mapping() of the same buffer, release() returned
    before the slot was back and acquire(timeout=0) failed on an idle pool."""
    from interop.dma import FramePool
    from interop.types import FrameFormat

    with FramePool(FrameFormat.NV12, 64, 32, 1) as pool:
        buf = pool._buffers[0]
        stop = threading.Event()

        def mapper() -> None:
            while not stop.is_set():
                buf.mapping(True)

        t = threading.Thread(target=mapper, daemon=True)
        t.start()
        try:
            for _ in range(3000):
                f = pool.acquire(timeout=0)
                f.release()
        finally:
            stop.set()
            t.join(10)


def test_follow_up_runs_after_the_lock_is_let_go_and_errors_are_logged(caplog):
    lock = FinalizerLock()
    seen: list[object] = []

    def work() -> Callable[[], None]:
        seen.append(lock.locked())
        return lambda: seen.append(lock.locked())

    lock.call(work)
    assert seen == [True, False]
    with caplog.at_level(logging.ERROR, logger="interop"):
        lock.call(lambda: 1 / 0)
    assert "deferred clean-up" in caplog.text and not lock.locked()


def test_condition_works_over_it():
    lock = FinalizerLock()
    cond = threading.Condition(lock)  # type: ignore[arg-type]
    box: list[int] = []

    def producer() -> None:
        with cond:
            box.append(1)
            cond.notify()

    with cond:
        threading.Thread(target=producer).start()
        assert cond.wait_for(lambda: box, 10)


# ---- each lock a finaliser takes, with the finaliser run inside its critical section (what a collection does) ----


def test_dma_mapping_unmapped_inside_find_mapping():
    from interop.dma import DMABuffer
    from interop.native import dmabuf as nd

    buf = DMABuffer.allocate(4096)
    before = nd.live_mappings()
    m = nd.Mapping(buf.fd, buf.size, True, owner=buf)
    addr = m.address

    def body() -> None:
        nonlocal m
        with nd._live_lock:
            m = None  # the last reference goes: its finaliser runs here, as a collection inside find_mapping runs it
            assert nd.live_mappings() == before + 1, "unmapped inside the critical section"
        assert nd.live_mappings() == before

    _finishes(body)
    assert nd.find_mapping(addr, 1) is None
    buf.close()


def test_dma_buffer_unuse_inside_its_own_critical_section():
    from interop.dma import DMABuffer

    buf = DMABuffer.allocate(4096)
    freed: list[int] = []
    buf.on_free(lambda: freed.append(1))
    buf.use()

    def body() -> None:
        with buf._lock:  # e.g. mapping() making a Mapping, where the collector finalises a tensor over this buffer
            buf.unuse()
            assert freed == []
        assert freed == [1] and buf.users == 0

    _finishes(body)
    buf.close()


def test_copy_recorded_by_a_finaliser_inside_the_meter():
    from interop import meter

    with interop.copy_meter() as m:
        def body() -> None:
            with meter._lock:  # e.g. reading m.records, where the collector runs a write-back hook that copies
                meter.record_copy("test_mapper", 10)
            return m.copies

        assert _finishes(body) == 1
    assert m.by_mapper == {"test_mapper": (1, 10)}


def test_dlpack_capsule_dropped_inside_the_table_lock():
    from interop.native import dlpack

    a = np.arange(12, dtype=np.uint8)
    before = dlpack.live_capsules()
    cap = dlpack.make_capsule(a.ctypes.data, a.shape, a.strides, a.dtype, (1, 0), a, versioned=True)
    assert dlpack.live_capsules() == before + 1

    def body() -> None:
        nonlocal cap
        with dlpack._live_lock:
            cap = None  # the capsule's destructor runs here, as the collector would run it
        return dlpack.live_capsules()

    assert _finishes(body) == before


def test_pinned_block_given_back_inside_the_pool_lock():
    from interop.tensors.cuda import PinnedPool

    pool = PinnedPool(0)

    def body() -> None:
        with pool._lock:
            pool._give(1 << 16, 0x1000)  # kept (under KEEP): no driver call
            assert pool._free == {}
        return pool._free

    assert _finishes(body) == {1 << 16: [0x1000]}


# ---- the whole library under a collector that runs at random points --------------------------------------------

_STRESS = """
import faulthandler, gc, sys
faulthandler.dump_traceback_later(90, exit=True)
import numpy as np, interop
from interop import MemoryType
from tests.reliability import backends as B
ok, _ = B.probe_factories()
rng = np.random.default_rng(0)
n = 0
for threshold in (50, 100, 150):
    gc.set_threshold(threshold, 1, 1)  # collections land inside the library's critical sections
    for rnd in range(15):
        for kind in sorted(ok):
            m = B.make(kind, rng)
            junk = [m.obj]
            for d in B.runnable_destinations(MemoryType[ok[kind]]):
                try:
                    t = interop.map(m.obj, d, allow_copy=True)
                except interop.InteropError:
                    continue
                junk.append(t)
                n += 1
                try:
                    junk.append(np.asarray(B.planes_of(t)[0]))
                except Exception:
                    pass
            cycle = {"junk": junk}
            cycle["self"] = cycle  # only the collector frees these
            del m, junk, cycle
print("OK", n)
"""


def test_maps_with_garbage_collected_at_random_points_never_hang():
    out = subprocess.run([sys.executable, "-c", _STRESS], capture_output=True, text=True, timeout=180, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, f"exit status {out.returncode} (a hang dumps every thread's stack): {out.stderr[-3000:]}"
    assert out.stdout.startswith("OK") and int(out.stdout.split()[1]) > 1000
    gc.collect()


def test_staging_buffer_given_back_inside_the_pool_lock():
    from interop.mappers import cuda_to_opencl as m

    class Staging:  # what the pool needs of an ExportableAllocation
        device, nbytes, closed = 7, 4096, False

        def close(self) -> None:
            self.closed = True

    alloc = Staging()

    def body() -> None:
        with m._pool_lock:  # e.g. _take_staging, where the collector finalises an OpenCL tensor over a staging buffer
            m._give_back(alloc)
            assert (7, 4096) not in m._pool
        return m._pool.get((7, 4096))

    try:
        assert _finishes(body) == [alloc]
    finally:
        m._pool.pop((7, 4096), None)


def _follow_up_done_when_call_returns(lock: FinalizerLock) -> bool:
    """One round: a thread holds the lock, another call()s work whose follow-up takes a moment, the holder lets go;
    whether the follow-up was done when call() returned."""
    done, held, go = threading.Event(), threading.Event(), threading.Event()
    results: list[bool] = []

    def holder() -> None:
        with lock:
            held.set()
            go.wait(5)

    def follow_up() -> None:
        time.sleep(0.002)
        done.set()

    def caller() -> None:
        lock.call(lambda: follow_up)
        results.append(done.is_set())

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    c = threading.Thread(target=caller)
    c.start()
    time.sleep(0.001)  # the caller is waiting for the lock
    go.set()
    c.join(5)
    t.join(5)
    return results == [True]


def test_call_on_a_free_thread_returns_with_the_follow_up_done_while_another_thread_lets_go():
    """call() on a thread holding no FinalizerLock is done, follow-up included, when it returns: it queued the work
    first, so another thread letting go of the lock could run it and its follow-up after call() had returned (a pool
    frame's release() returned before its slot was back: test_pool_frame_is_back_..., seen once in a full run)."""
    lock = FinalizerLock()
    assert all(_follow_up_done_when_call_returns(lock) for _ in range(200)), "call() returned before its follow-up"


def test_work_queued_before_a_section_keeps_the_section_held_and_its_follow_up_for_the_let_go() -> None:
    """Work found queued as a thread takes the lock runs first; its follow-up (here one that takes another lock)
    runs once the holder lets go. Let go and taken back in between, the section ran as if unheld: a finaliser in it
    ran its work inside the section instead of queueing it."""
    from interop._locks import _held

    lock, other = FinalizerLock(), FinalizerLock()
    followed: list[str] = []
    lock._pending.append((lambda: (lambda: other.call(followed.append, "follow-up")), ()))  # queued by another thread
    with lock:
        assert _held() == 1
        inner: list[str] = []
        lock.call(inner.append, "a finaliser's work")  # started inside the section: queued, not run here
        assert inner == [] and followed == []
    assert inner == ["a finaliser's work"] and followed == ["follow-up"]


def test_call_from_a_thread_holding_another_lock_never_waits_for_a_follow_up() -> None:
    """call() on a thread that holds a FinalizerLock only tries the lock; when its try runs queued work whose
    follow-up lets another thread take that lock and then wait for the one held here, the try must not wait."""
    a, x = FinalizerLock(), FinalizerLock()
    t4_has_a = threading.Event()

    def t4() -> None:
        with a:  # a buffer's lock, then a registry's (DMABuffer.mapping -> nd.Mapping)
            t4_has_a.set()
            with x:
                pass

    def follow_up() -> None:  # runs with a let go: another thread takes it meanwhile
        threading.Thread(target=t4, daemon=True).start()
        t4_has_a.wait(2)

    returned = threading.Event()

    def t3() -> None:
        with x:  # a finaliser started inside x's section gives a buffer back
            a.call(lambda: follow_up)
        returned.set()

    threading.Thread(target=t3, daemon=True).start()
    assert returned.wait(5), "call() waited for a lock while this thread held another: a deadlock"
