"""Ctrl-C during a GObject call: PyGObject can report the KeyboardInterrupt as a SystemError."""

from __future__ import annotations

from typing import Any


def interrupt_of(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt that ``e`` stands for, if any. When Python's SIGINT handler runs while PyGObject returns
    a value (a pulled sample, say), the call ends with "SystemError: ... returned a result with an exception set",
    the KeyboardInterrupt as its cause: caught as an error, the user's Ctrl-C would be lost."""
    if isinstance(e, KeyboardInterrupt):
        return e
    if isinstance(e, SystemError):
        cause = e.__cause__ or e.__context__
        if isinstance(cause, KeyboardInterrupt):
            return cause
    return None


def emit(obj: Any, name: str, *args: Any) -> Any:
    """``obj.emit(name, *args)``, a Ctrl-C during it raised as the KeyboardInterrupt it is (interrupt_of)."""
    try:
        return obj.emit(name, *args)
    except SystemError as e:
        ki = interrupt_of(e)
        if ki is not None:
            raise ki from None
        raise
