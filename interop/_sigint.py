"""Ctrl-C that a C extension swallowed: remembered, and raised at the run's next check.

Python's SIGINT handler raises KeyboardInterrupt in whatever the main thread runs when the signal lands; a C
extension that clears the errors of a call it makes (PyGObject resolving ``Gst.parse_launch``) can drop it, and the
run goes on as if no Ctrl-C came. ``interop run`` installs this handler; the run's loops call check()."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

_requested = threading.Event()


def _handler(signum: int, frame: Any) -> None:
    _requested.set()
    raise KeyboardInterrupt


def install() -> bool:
    """On the main thread, where Python's own handler is in place: Ctrl-C raises KeyboardInterrupt as it does, and
    is remembered for check(); True. Elsewhere, or with another handler (the program's), nothing changes; False.
    This handler left in place counts as Python's: a Ctrl-C that landed in installed()'s clean-up kept it there,
    and what it remembered is forgotten here."""
    current = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is threading.main_thread() and \
            (current is signal.default_int_handler or current is _handler):
        _requested.clear()
        signal.signal(signal.SIGINT, _handler)
        return True
    return False


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """install() for the block, then Python's own handler again and nothing remembered: a program that runs the CLI
    in its own process and goes on after a Ctrl-C gets no second KeyboardInterrupt from a later run."""
    mine = install()
    try:
        yield
    finally:
        if mine:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _requested.clear()


def handled() -> None:
    """Say that a Ctrl-C was handled: the process then exits with the status the program returns (130), not by SIGINT.

    CPython marks a KeyboardInterrupt raised inside code that exec() or eval() runs from a string (dataclasses and
    namedtuple make their methods so while a module imports) as unhandled, even when a caller catches it later, and
    a process so marked ends itself with SIGINT at exit, whatever status the program returned. Every exec() of a
    string starts by clearing that mark (CPython does so for embedders that call it after an earlier interrupt):
    an empty one clears it and runs nothing."""
    exec("")


def check() -> None:
    """On the main thread: KeyboardInterrupt if a Ctrl-C came since install() (raised once)."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        _requested.clear()
        raise KeyboardInterrupt
