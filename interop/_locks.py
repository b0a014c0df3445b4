"""A lock that finalisers can use without ever waiting on themselves.

The cyclic garbage collector runs at almost any allocation, and reference counting runs a finaliser wherever the
last reference goes: both can happen on a thread that is inside a critical section of the very lock the finaliser
needs. With a plain ``threading.Lock`` that thread then waits on itself for good (an interpreter seen hung in
``find_mapping`` this way); with an ``RLock`` the finaliser would change the state under the holder's feet (a
dict resized while the holder iterates it). :class:`FinalizerLock` gives finalisers :meth:`call`:

- on a thread that holds no FinalizerLock, it takes the lock (waiting for another thread's critical section to end,
  which is short and waits on nothing but other FinalizerLocks) and runs the work: done when ``call`` returns;
- on a thread that holds one (a finaliser started inside a critical section), it never waits: the work is queued
  and runs as soon as the lock is free, by whichever thread takes or lets go of it first.

Queued work runs before anyone else's critical section: a reader taking the lock sees it done.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("interop")


class _Here(threading.local):
    held = 0  # how many FinalizerLocks this thread holds


_here = _Here()


def _held() -> int:
    return _here.held


class FinalizerLock:
    """A non-reentrant lock (``with lock:``, ``acquire``/``release``, usable by ``threading.Condition``) plus
    :meth:`call` for finalisers and GC callbacks (see the module's doc)."""

    __slots__ = ("_lock", "_pending", "_after")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._after: list[Callable[[], Any]] = []  # follow-ups of work run under the lock: run once it is let go

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        _here.held += 1
        if self._pending:
            self._run_pending()
        return True

    def release(self) -> None:
        while True:
            after = self._after
            if after:
                self._after = []
            _here.held -= 1
            self._lock.release()
            for then in after:
                _run(then)
            # work queued while we held it (by a finaliser on this or another thread): run it now
            if not self._pending or not self.acquire(blocking=False):
                return

    def locked(self) -> bool:
        return self._lock.locked()

    # acquire() and release() written out: the lock is on per-frame paths (a DMA buffer's use count)
    def __enter__(self) -> FinalizerLock:
        self._lock.acquire()
        _here.held += 1
        if self._pending:
            self._run_pending()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._after or self._pending:
            self.release()
            return
        _here.held -= 1
        self._lock.release()
        if self._pending:  # queued between the check above and letting go
            if self.acquire(blocking=False):
                self.release()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` holding the lock (see the module's doc for when it waits and when it queues). When
        ``fn`` returns a callable, that runs right after the lock is let go (work that takes other locks:
        callbacks). An exception from either is logged, never raised (a finaliser has nobody to raise it to)."""
        if _held() == 0:
            # This thread may wait: it runs the work itself, and the follow-up once it lets go, so both are done when
            # call returns (queued, the work could be run by another thread letting go, its follow-up after we return)
            self.acquire()
            try:
                then = _run(fn, *args)
                if callable(then):
                    self._after.append(then)
            finally:
                self.release()
            return
        # Never wait here: queue first, then try; a holder that lets go after our failed try finds the work queued
        self._pending.append((fn, args))
        if self.acquire(blocking=False):
            self.release()

    def _run_pending(self) -> None:
        while self._pending:
            fn, args = self._pending.popleft()
            then = _run(fn, *args)
            if callable(then):
                self._after.append(then)


def _run(fn: Callable[..., Any], *args: Any, _log: logging.Logger = _log) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - finaliser work: nobody to raise to
        _log.exception("deferred clean-up %r failed", fn)
        return None
