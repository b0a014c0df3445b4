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

Ctrl-C. CPython raises a pending KeyboardInterrupt at the entry of a Python function, at a backward jump and right
after a call of anything but a Python function returns. A lock whose ``__enter__`` and ``__exit__`` are Python
functions has such a point between taking the raw lock and the start of the with statement's protected range, and
one at the entry of ``__exit__``: an interrupt at either left the raw lock held for good (the next user hung, a
Jupyter cell run again after Ctrl-C for one). So:

- The raw lock is a C ``RLock`` used non-reentrantly (taking it again on the thread that holds it raises instead of
  hanging; ``acquire(blocking=False)`` says no; ``call`` never does). ``__enter__`` and ``acquire`` take it inside
  ``try``, and on any exception ask it whether this thread owns it and let go: a plain Lock cannot tell whether an
  interrupted ``acquire`` had returned.
- Letting go starts no Python frame: ``__exit__`` and ``release`` are one C callable per lock kept in an instance
  slot (the with statement finds it as it finds a method), a ``functools.partial`` over the raw lock's ``__exit__``.
  An interrupt can only come once the lock is free.
- Which FinalizerLocks a thread holds (``call`` must not wait while it holds one) is asked of the raw locks, not
  counted: each thread lists the raw locks it took, and drops an entry it no longer owns when it next looks. Nothing
  has to be undone on the way out, so a way out cut short leaves nothing wrong.
- Work that must run as the lock is let go (queued during the section by a finaliser or by another thread, and the
  follow-ups of queued work) points the partial at the Python exit that runs it (``__setstate__``, the partial's
  pickle support, retargets it at call time: the with statement looked it up before the section began), and that
  exit points it back. Only then does letting go start a Python frame; an interrupt at that frame's very entry
  would still leave the lock held (work queued during this very section, and a Ctrl-C within the few bytecodes
  before its exit).

One interrupt at a time: the clean-up that runs while an interrupt propagates has points of its own, where a second
one could land.

:class:`UseCounted` puts a use count on top (DMA buffers, VA surfaces): ``use()`` counts a user and returns, or
counts none and raises. The with statement's return is still a point where an interrupt lands, after the count: it
is given back before the interrupt goes on.
"""

from __future__ import annotations

import _thread
import collections
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("interop")


class _Here(threading.local):
    def __init__(self) -> None:
        # the raw locks this thread took, innermost last; one let go (in C, by the with statement) stays listed
        # until this thread next looks: an entry counts only while its raw lock says this thread owns it
        self.held: list[Any] = []


_here = _Here()


def _held() -> int:
    """How many FinalizerLocks this thread holds."""
    held = _here.held
    while held and not held[-1]._is_owned():
        held.pop()
    if len(held) < 2:
        return len(held)
    return sum(1 for lock in held if lock._is_owned())  # taken and let go out of order: rare


def _reentered() -> RuntimeError:
    return RuntimeError("this thread already holds this FinalizerLock, which is not reentrant: a finaliser that "
                        "needs it goes through call() (or a Ctrl-C cut short the end of a section that had work queued "
                        "for it: see interop._locks)")


class FinalizerLock:
    """A non-reentrant lock (``with lock:``, ``acquire``/``release``, usable by ``threading.Condition``) plus
    :meth:`call` for finalisers and GC callbacks (see the module's doc)."""

    __slots__ = ("_lock", "_pending", "_after", "__exit__", "release")

    # the with statement's exit and release(): the raw lock's, in C, unless work waits for the let-go (_slow)
    __exit__: functools.partial[None]
    release: functools.partial[None]

    def __init__(self) -> None:
        self._lock: Any = _thread.RLock()
        self._pending: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._after: list[Callable[[], Any]] = []  # follow-ups of work run under the lock: run once it is let go
        self.__exit__ = self.release = functools.partial(self._lock.__exit__)

    # acquire() written out: the lock is on per-frame paths (a DMA buffer's use count)
    def __enter__(self) -> FinalizerLock:
        lock = self._lock
        held = _here.held
        while held and not held[-1]._is_owned():
            held.pop()
        if held and lock in held and lock._is_owned():
            raise _reentered()
        try:
            lock.acquire()
            held.append(lock)
            if self._pending:
                self._catch_up()
        except BaseException:  # an interrupt, anywhere from the raw acquire's return on
            if lock._is_owned():
                self._let_go()
            raise
        return self

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        lock = self._lock
        held = _here.held
        while held and not held[-1]._is_owned():
            held.pop()
        if held and lock in held and lock._is_owned():
            if blocking and timeout < 0:
                raise _reentered()
            return False  # what waiting on itself would have come to
        try:
            if not lock.acquire(blocking, timeout):
                return False
            held.append(lock)
            if self._pending:
                self._catch_up()
        except BaseException:
            if lock._is_owned():
                self._let_go()
            raise
        return True

    def locked(self) -> bool:
        lock = self._lock
        if lock._is_owned():
            return True
        try:
            if not lock.acquire(False):
                return True
        except BaseException:
            if lock._is_owned():
                self._let_go()
            raise
        self.__exit__()  # not the raw release: work queued by a caller that tried the lock meanwhile runs
        return False

    def _is_owned(self) -> bool:
        """Whether this thread holds the lock (what ``threading.Condition`` asks)."""
        return bool(self._lock._is_owned())

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` holding the lock (see the module's doc for when it waits and when it queues). When
        ``fn`` returns a callable, that runs right after the lock is let go (work that takes other locks:
        callbacks). An exception from either is logged, never raised (a finaliser has nobody to raise it to)."""
        if _held() == 0:
            # This thread may wait: it runs the work itself, and the follow-up once it lets go, so both are done when
            # call returns (queued, the work could be run by another thread letting go, its follow-up after we return)
            with self:
                then = _run(fn, *args)
            if callable(then):
                _run(then)
            return
        # Never wait here: queue first, then try; a holder that lets go after our failed try finds the work queued
        self._pending.append((fn, args))
        self._slow()
        if self.acquire(blocking=False):
            self.__exit__()

    # ---- work waiting for the lock to be let go ---------------------------------------------------------------

    def _slow(self) -> None:
        """Make letting go run :meth:`_exit_slow`: work or follow-ups wait for it."""
        if self.__exit__.func is not _exit_slow:
            _retarget(self.__exit__, _exit_slow, (self,))

    def _let_go(self) -> None:
        """Let go of the lock taken by an acquire an interrupt cut short: what waits for the let-go runs."""
        if self._pending or self._after:
            self._slow()
        self.__exit__()

    def _exit_slow(self, *exc: object) -> None:
        """Letting go while work waits for it: run the work queued during the section, let go, run follow-ups."""
        lock = self._lock
        try:
            if not lock._is_owned():
                raise RuntimeError("cannot release un-acquired lock")
            # pointed back first: work queued from here on points it here again, and finds us before we let go or
            # the next holder
            _retarget(self.__exit__, lock.__exit__, ())
            self._run_pending()
            after, self._after = self._after, []
        except BaseException:
            if lock._is_owned():
                lock.release()  # first; what is left runs now if the lock is free, else at the next let-go
            if self._pending or self._after:
                self._slow()
                if self.acquire(blocking=False):
                    self.__exit__()
            raise
        lock.release()
        for then in after:
            _run(then)
        # work queued after our last look (by a finaliser on this or another thread): run it now
        if self._pending and self.acquire(blocking=False):
            self.__exit__()

    def _catch_up(self) -> None:
        """Holding the lock, before our own section: run queued work; its follow-ups run as this holder lets go
        (_exit_slow). Never let go and take it back here: a follow-up run in between could take this thread's other
        locks or drop this lock from its held list, and the blocking re-take could wait while the caller holds
        another FinalizerLock (acquire(blocking=False) from call() would then wait)."""
        self._run_pending()
        if self._after:
            self._slow()

    def _run_pending(self) -> None:
        while self._pending:
            fn, args = self._pending.popleft()
            then = _run(fn, *args)
            if callable(then):
                self._after.append(then)


_exit_slow = FinalizerLock._exit_slow


def _retarget(exit: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    exit.__setstate__((fn, args, None, None))


class UseCounted:
    """Users counted under a FinalizerLock (``_lock``, ``_users``) of something a finaliser lets go of: DMA buffers,
    VA surfaces. ``use()`` counts a user and returns, or counts none and raises, never both: after an interrupt right
    past its critical section (the one point where CPython can still raise one) it gives the count back first."""

    _lock: FinalizerLock
    _users: int
    _lets_go = 0  # users that have let go, ever: an interrupted use() giving its count back asks whether one did since

    def _usable(self) -> bool:
        """Holding the lock: whether a new user may come."""
        raise NotImplementedError

    def _refusal(self) -> Exception:
        """What use() raises when :meth:`_usable` says no."""
        raise NotImplementedError

    def _last_gone(self, freed: bool) -> Callable[[], Any] | None:
        """Holding the lock, the count just down to zero: what runs once the lock is let go. ``freed`` is False when
        it is the count of an interrupted use() given back with no other user let go since it counted: nobody let go
        of anything."""
        raise NotImplementedError

    def use(self) -> None:
        """Count a user, or raise :meth:`_refusal` (closed, destroyed) and count none."""
        lets_go, counted = 0, False
        try:
            with self._lock:
                if self._usable():
                    lets_go = self._lets_go
                    self._users += 1
                    counted = True  # no interrupt can land between the count and this
        except BaseException:
            if counted:  # the with statement let go, then the interrupt: its caller never learns of the count
                self._lock.call(self._give_back_use, lets_go)
            raise
        if not counted:
            raise self._refusal()

    def unuse(self) -> None:
        # A release hook, so often run by a finaliser: it never waits on the lock (a collection inside one of its
        # critical sections, on this very thread, would wait for ever); the holder runs it instead.
        self._lock.call(self._unuse_locked)

    def _unuse_locked(self) -> Callable[[], Any] | None:
        self._users -= 1
        self._lets_go += 1
        return self._last_gone(True) if self._users == 0 else None

    def _give_back_use(self, lets_go: int) -> Callable[[], Any] | None:
        # The count of an interrupted use(). Down to zero, it is the last one only if another user let go meanwhile
        # (that user's unuse() found this count still there, so it ran nothing): else nobody let go of anything.
        self._users -= 1
        return self._last_gone(self._lets_go != lets_go) if self._users == 0 else None


def _run(fn: Callable[..., Any], *args: Any, _log: logging.Logger = _log) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - finaliser work: nobody to raise to
        _log.exception("deferred clean-up %r failed", fn)
        return None
