"""Ctrl-C never leaves a FinalizerLock held, a thread's held locks miscounted, or a use count wrong.

CPython 3.11 raises a pending KeyboardInterrupt at three kinds of points: the entry of a Python function, a backward
jump taken, and the return of a call of anything but a Python function it runs itself (a C function, a class, a
``functools.partial``). :func:`_sweep` runs an operation once through, counting such points in the lock's module
and the functions named, then once per point with :class:`_Interrupt` raising there; after each run the lock must be
free for another thread, this thread must hold nothing, and a use is counted exactly when ``use()`` returned. A real
SIGINT, delivered by the OS at random moments, checks the same in a subprocess.

Before the fix a with statement hung the next user when the interrupt came right after the raw ``acquire`` returned
in ``__enter__`` or at the entry of ``__exit__`` (a Jupyter cell interrupted, then run again with the same pool).
"""

from __future__ import annotations

import dis
import functools
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from interop import _locks
from interop._locks import FinalizerLock, _held
from interop.dma import DMABuffer

_CALLS = {"CALL", "CALL_FUNCTION_EX"}
_BACK = {"JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE",
         "POP_JUMP_BACKWARD_IF_NOT_NONE"}
_OPS: dict[types.CodeType, dict[int, str]] = {}

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")


def _opname(code: types.CodeType, offset: int) -> str:
    ops = _OPS.get(code)
    if ops is None:
        ops = _OPS[code] = {i.offset: i.opname for i in dis.get_instructions(code)}
    return ops.get(offset, "")


def _run_by_c(code: types.CodeType) -> bool:
    """Whether a Python function with this code, started by a CALL, was started by a C callable in between (a
    class's ``__init__``, a ``__call__``, the partial that lets go of a FinalizerLock): then the CALL checks for an
    interrupt as it returns."""
    slow = getattr(_locks, "_exit_slow", None)
    return code.co_name.startswith("__") or (slow is not None and code is slow.__code__)


class _Interrupt:
    """Raises KeyboardInterrupt at the ``at``-th interrupt point of the watched code (see the module's doc)."""

    def __init__(self, at: int, watched: set[types.CodeType]):
        self.at = at
        self.watched = watched
        self.seen = 0
        self.where: str | None = None
        self.last: dict[types.FrameType, tuple[int, str]] = {}
        self.checks_after_call: dict[types.FrameType, bool] = {}

    def _watched(self, code: types.CodeType) -> bool:
        return code in self.watched or code.co_filename == _locks.__file__

    def _point(self, frame: types.FrameType, what: str) -> None:
        self.seen += 1
        if self.seen == self.at:
            self.where = f"{frame.f_code.co_qualname} line {frame.f_lineno}: {what}"
            raise KeyboardInterrupt

    def trace(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        caller = frame.f_back
        if caller is not None and self.last.get(caller, (0, ""))[1] == "CALL" and not _run_by_c(frame.f_code):
            self.checks_after_call[caller] = False  # a Python function the CALL runs itself: no check as it returns
        if not self._watched(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        self._point(frame, "function entry")
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            offset = frame.f_lasti
            op = _opname(frame.f_code, offset)
            prev = self.last.get(frame)
            self.last[frame] = (offset, op)
            if prev is not None:
                prev_offset, prev_op = prev
                if prev_op in _CALLS and self.checks_after_call.pop(frame, True):
                    self._point(frame, f"return of the call before {op}")
                elif prev_op in _BACK and offset < prev_offset:
                    self._point(frame, "backward jump")
            if op in _CALLS:
                self.checks_after_call[frame] = True
        elif event == "return":
            self.last.pop(frame, None)
            self.checks_after_call.pop(frame, None)
        return self._local


def _sweep(op: Callable[[], object], check: Callable[[bool, str | None], None], *watch: Callable[..., Any]) -> int:
    """Run ``op`` once through, counting its interrupt points (see the module's doc), then once per point with an
    interrupt there; ``check(interrupted, where)`` after each run. Returns the number of points."""
    watched = {getattr(f, "__func__", f).__code__ for f in watch}
    outer = sys.gettrace()

    def run(at: int) -> tuple[_Interrupt, bool]:
        _held()  # the same start each time: no entry this thread let go of left in its list of held locks
        inj = _Interrupt(at, watched)
        sys.settrace(inj.trace)
        try:
            op()
        except KeyboardInterrupt:
            return inj, True
        finally:
            sys.settrace(outer)
        return inj, False

    inj, interrupted = run(0)
    assert not interrupted
    check(False, None)
    points = inj.seen
    for at in range(1, points + 1):
        inj, interrupted = run(at)
        assert inj.where is not None, f"point {at} of {points} not reached: the runs took different paths"
        check(interrupted, inj.where)
    return points


def _free_for_another_thread(lock: FinalizerLock) -> bool:
    got: list[bool] = []

    def probe() -> None:
        ok = lock.acquire(timeout=2)
        got.append(ok)
        if ok:
            lock.release()

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(10)
    return got == [True]


def _lock_is_clean(lock: FinalizerLock, where: str | None) -> None:
    assert _free_for_another_thread(lock), f"interrupted at {where}: the lock stayed held"
    assert _held() == 0, f"interrupted at {where}: this thread still counts {_held()} held lock(s)"
    assert lock.acquire(blocking=False), f"interrupted at {where}: this thread cannot take the lock again"
    lock.release()


def _bounded(test: Callable[..., None]) -> Callable[..., None]:
    """Run the test on a thread of its own: a lock left held makes the next use of it hang, which must fail the test,
    not the run."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        errors: list[BaseException] = []

        def body() -> None:
            try:
                test(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
                errors.append(e)

        t = threading.Thread(target=body, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "hung: a lock was left held"
        if errors:
            raise errors[0]

    return run


# ---- the lock ---------------------------------------------------------------------------------------------------


@_bounded
def test_interrupt_right_after_the_raw_acquire_in_enter():
    """The raw acquire has returned, nothing after it in __enter__ ran: the lock stayed held for good."""
    lock = FinalizerLock()
    raw = lock._lock

    def hook(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and getattr(arg, "__self__", None) is raw and arg.__name__ == "acquire":
            raise KeyboardInterrupt

    def body() -> None:
        with lock:
            pass

    sys.setprofile(hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            body()
    finally:
        sys.setprofile(None)
    _lock_is_clean(lock, "c_return of acquire")


@_bounded
def test_interrupt_at_the_entry_of_what_the_with_statements_exit_runs():
    """The with statement's exit starting: before, a Python __exit__ whose entry left the lock held; now a C call."""
    lock = FinalizerLock()
    armed: list[bool] = []

    def hook(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and armed:
            raise KeyboardInterrupt

    def body() -> None:
        with lock:
            armed.append(True)

    sys.setprofile(hook)
    try:
        try:
            body()
        except KeyboardInterrupt:
            pass
    finally:
        sys.setprofile(None)
    _lock_is_clean(lock, "the exit's entry")


_REAL_SIGINT = """
import os, random, signal, sys, threading, time
from interop._locks import FinalizerLock, _held
lock = FinalizerLock()
go, sent = threading.Event(), threading.Event()
def sender():
    rng = random.Random(0)
    while True:
        go.wait(); go.clear()
        time.sleep(rng.random() * 2e-4)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()
threading.Thread(target=sender, daemon=True).start()
def work():
    pass
for i in range(300):
    sent.clear()
    go.set()
    try:
        while True:
            with lock:
                pass
            lock.call(work)
    except KeyboardInterrupt:
        pass
    sent.wait()
    if not lock.acquire(blocking=False):
        print("HELD", i); sys.exit(1)
    lock.release()
    if _held():
        print("COUNTED", i, _held()); sys.exit(1)
print("OK")
"""


def test_real_sigints_at_random_points_never_leave_the_lock_held():
    """The OS delivers SIGINT and the default handler raises: 300 interrupts of a thread taking the lock in a loop,
    each followed by a check that the lock is free and the thread holds nothing."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _REAL_SIGINT], capture_output=True, text=True, timeout=120,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.stdout.strip() == "OK", (out.stdout, out.stderr[-2000:])


@_bounded
def test_with_statement_at_every_point():
    lock = FinalizerLock()
    box: list[int] = []

    def op() -> None:
        with lock:
            box.append(1)
        box.append(2)

    points = _sweep(op, lambda interrupted, where: _lock_is_clean(lock, where), op)
    assert points >= 3  # enter's entry, the raw acquire's return, the exit's return at least


@_bounded
def test_with_statement_of_a_thread_holding_another_lock_at_every_point():
    lock, other = FinalizerLock(), FinalizerLock()

    def op() -> None:
        with other:
            with lock:
                pass

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(lock, where)
        _lock_is_clean(other, where)

    _sweep(op, check, op)


@_bounded
def test_acquire_and_release_at_every_point():
    lock = FinalizerLock()

    def op() -> None:
        lock.acquire()
        try:
            pass
        finally:
            lock.release()

    _sweep(op, lambda interrupted, where: _lock_is_clean(lock, where), op)


@_bounded
def test_call_at_every_point_runs_the_work_at_most_once():
    lock = FinalizerLock()
    ran: list[str] = []

    def work() -> Callable[[], None]:
        ran.append("work")
        return lambda: ran.append("follow-up")

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(lock, where)
        assert ran.count("work") <= 1 and ran.count("follow-up") <= ran.count("work"), (where, ran)
        if not interrupted:
            assert ran == ["work", "follow-up"]
        ran.clear()

    _sweep(lambda: lock.call(work), check, work)


@_bounded
def test_work_queued_during_the_section_at_every_point_but_the_slow_exits_entry():
    """A finaliser queues work during the section: the lock's exit is then the Python one. An interrupt at that
    function's very entry is the one point left (see the module's doc): every other one lets go."""
    lock = FinalizerLock()
    ran: list[int] = []

    def op() -> None:
        with lock:
            lock.call(ran.append, 1)  # what a finaliser run in here does

    def check(interrupted: bool, where: str | None) -> None:
        if where is not None and where.startswith("FinalizerLock._exit_slow") and "function entry" in where:
            assert lock._lock._is_owned()  # the documented point left: do what the exit would have done
            lock._exit_slow()
        _lock_is_clean(lock, where)
        assert ran.count(1) <= 1, (where, ran)
        if not interrupted:
            assert ran == [1]
        ran.clear()

    _sweep(op, check, op)


@_bounded
def test_reentry_raises_instead_of_hanging():
    """The raw lock is an RLock now; taking a FinalizerLock again on its thread still never succeeds."""
    lock = FinalizerLock()
    with lock:
        with pytest.raises(RuntimeError, match="not reentrant"):
            lock.__enter__()
        assert not lock.acquire(blocking=False)
        assert not lock.acquire(timeout=0.01)
        assert _held() == 1
    assert _held() == 0 and not lock.locked()


# ---- use counts ---------------------------------------------------------------------------------------------------


def _counting(cls: type) -> list[Callable[..., Any]]:
    """The functions of ``cls`` that count its users (watched for interrupts besides the lock's own module)."""
    names = ("use", "unuse", "_unuse_locked", "_give_back_use", "_usable", "_last_gone")
    return [getattr(cls, n) for n in names if hasattr(cls, n)]


@_bounded
def test_dma_buffer_use_is_counted_exactly_when_it_returns():
    buf = DMABuffer.allocate(4096)
    freed: list[int] = []
    buf.on_free(lambda: freed.append(1))

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(buf._lock, where)
        if interrupted:
            assert buf.users == 0, f"interrupted at {where}: use() raised but counted"
        else:
            assert buf.users == 1, f"interrupted at {where}: use() returned but did not count"
            buf.unuse()
            assert buf.users == 0
        assert freed == ([] if interrupted else [1]), f"interrupted at {where}: on-free callbacks {freed}"
        freed.clear()

    try:
        _sweep(buf.use, check, *_counting(DMABuffer))
    finally:
        buf.close()


@_bounded
def test_dma_buffer_use_by_a_second_user_gives_the_count_back():
    """Interrupted with another user holding the buffer: the count goes back, and the buffer is still in use."""
    buf = DMABuffer.allocate(4096)
    freed: list[int] = []
    buf.on_free(lambda: freed.append(1))
    buf.use()

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(buf._lock, where)
        assert buf.users == (1 if interrupted else 2), f"interrupted at {where}: {buf.users} users"
        if not interrupted:
            buf.unuse()
        assert freed == []

    try:
        _sweep(buf.use, check, *_counting(DMABuffer))
        buf.unuse()
        assert freed == [1]
    finally:
        buf.close()


class _InterruptAfterAnotherUser(_Interrupt):
    """Raises at the ``at``-th point as :class:`_Interrupt` does; just before, where the lock is free, another thread
    uses the buffer and lets go of it (a transport's consumer and a tensor of the same frame, say)."""

    def __init__(self, at: int, watched: set[types.CodeType], buf: DMABuffer):
        super().__init__(at, watched)
        self.buf = buf
        self.other = False

    def _point(self, frame: types.FrameType, what: str) -> None:
        if self.seen + 1 == self.at and _free_for_another_thread(self.buf._lock):
            t = threading.Thread(target=lambda: (self.buf.use(), self.buf.unuse()), daemon=True)
            t.start()
            t.join(10)
            self.other = not t.is_alive()
        super()._point(frame, what)


@_bounded
def test_dma_buffer_use_interrupted_while_another_user_comes_and_goes_runs_on_free_once():
    """The count an interrupted use() gives back is the last one when another user let go meanwhile (that user's
    unuse() saw it still counted): the on-free callbacks (pool return, DONE to the producer) run then, exactly once.
    Before, they were skipped whenever the buffer had no user as use() began."""
    buf = DMABuffer.allocate(4096)
    freed: list[int] = []
    buf.on_free(lambda: freed.append(1))
    watched = {f.__code__ for f in _counting(DMABuffer)}
    outer = sys.gettrace()
    others = 0
    try:
        for at in range(1, 200):
            inj = _InterruptAfterAnotherUser(at, watched, buf)
            sys.settrace(inj.trace)
            try:
                buf.use()
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(outer)
            if inj.where is None:  # past the last point: use() returned
                buf.unuse()
                break
            _lock_is_clean(buf._lock, inj.where)
            assert buf.users == 0, f"interrupted at {inj.where}: {buf.users} users"
            assert freed == ([1] if inj.other else []), f"interrupted at {inj.where}: on-free ran {len(freed)} times"
            others += inj.other
            freed.clear()
        else:
            raise AssertionError("use() never returned")
        assert others > 0, "no point with the lock free: the test checked nothing"
    finally:
        buf.close()


@_bounded
def test_dma_buffer_unuse_never_leaves_the_lock_held():
    buf = DMABuffer.allocate(4096)

    def op() -> None:
        buf.use()
        buf.unuse()

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(buf._lock, where)
        assert buf.users in (0, 1), (where, buf.users)  # an unuse cut short before its work ran is not done
        while buf.users:
            buf.unuse()

    try:
        _sweep(op, check, *_counting(DMABuffer))
    finally:
        buf.close()


@_bounded
def test_pool_acquire_interrupted_anywhere_in_the_buffer_or_its_lock_gives_the_frame_again():
    """The Jupyter case: a cell taking frames from a pool is interrupted, then run again with the same pool."""
    from interop.dma import FramePool
    from interop.types import FrameFormat

    with FramePool(FrameFormat.NV12, 64, 32, 1) as pool:
        frames: list[Any] = []

        def check(interrupted: bool, where: str | None) -> None:
            _lock_is_clean(pool._buffers[0]._lock, where)
            if interrupted:
                assert pool.free_count == 1 and pool._buffers[0].users == 0, where
            else:
                assert pool.free_count == 0 and pool._buffers[0].users == 1, where
                frames.pop().release()
            f = pool.acquire(timeout=2)  # neither hangs nor times out
            f.release()
            assert pool.free_count == 1 and pool._buffers[0].users == 0, where

        _sweep(lambda: frames.append(pool.acquire(timeout=0)), check, *_counting(DMABuffer))


def _va_surface() -> Any:
    """A VASurface on a context with no display behind it (it owns nothing: nothing to destroy)."""
    from interop.tensors.vaapi import VAContext, VASurface
    from interop.types import FrameFormat

    ctx = object.__new__(VAContext)
    ctx._native = types.SimpleNamespace(closed=True, device="none")
    return VASurface(ctx, 1, FrameFormat.NV12, 2, 2, own=False)


@pytest.mark.parametrize("others", [0, 1])
@_bounded
def test_va_surface_use_is_counted_exactly_when_it_returns(others: int):
    from interop.tensors.vaapi import VASurface

    s = _va_surface()
    for _ in range(others):
        s.use()

    def check(interrupted: bool, where: str | None) -> None:
        _lock_is_clean(s._lock, where)
        assert s._users == others + (0 if interrupted else 1), f"interrupted at {where}: {s._users} users"
        assert not s.released, f"interrupted at {where}: the surface was destroyed"
        if not interrupted:
            s._users -= 1

    _sweep(s.use, check, *_counting(VASurface))
