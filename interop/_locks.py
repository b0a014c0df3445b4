"""A lock that finalisers can use without ever blocking.

The cyclic garbage collector runs at almost any allocation, and reference counting runs a finaliser wherever the
last reference goes: both can happen on a thread that is inside a critical section of the very lock the finaliser
needs. With a plain ``threading.Lock`` that thread then waits on itself for good (an interpreter seen hung in
``find_mapping`` this way); with an ``RLock`` the finaliser would change the state under the holder's feet (a
dict resized while the holder iterates it). :class:`FinalizerLock` gives finalisers a third way: :meth:`call`
runs the work under the lock at once when the lock is free, and otherwise queues it for whoever holds the lock,
which runs it right after letting go. A finaliser never waits and never sees a half-updated state.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("interop")


class FinalizerLock:
    """A non-reentrant lock (``with lock:``, ``acquire``/``release``, usable by ``threading.Condition``) plus
    :meth:`call` for finalisers and GC callbacks: never blocks, never runs inside another holder's critical section."""

    __slots__ = ("_lock", "_pending")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()
        if self._pending:
            self._drain()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> FinalizerLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` holding the lock: now if it is free, else as soon as its holder lets go (which may be
        this very thread, further up its stack). For finalisers: returns without waiting either way. When ``fn``
        returns a callable, that runs right after the lock is let go (work that takes other locks: callbacks).
        An exception from either is logged, never raised (a finaliser has nobody to raise it to)."""
        # Queue first, then try: a holder that lets go after our failed try finds the work queued and runs it.
        self._pending.append((fn, args))
        self._drain()

    def _drain(self) -> None:
        while self._pending:
            if not self._lock.acquire(blocking=False):
                return  # held (maybe by this thread, further up): the holder runs the queue when it lets go
            after: list[Callable[[], Any]] = []
            try:
                while self._pending:
                    fn, args = self._pending.popleft()
                    try:
                        then = fn(*args)
                    except Exception:  # noqa: BLE001 - finaliser work: nobody to raise to
                        _log.exception("deferred clean-up %r failed", fn)
                        continue
                    if callable(then):
                        after.append(then)
            finally:
                self._lock.release()
            for then in after:
                try:
                    then()
                except Exception:  # noqa: BLE001 - as above
                    _log.exception("deferred clean-up %r failed", then)
