"""The interop CLI's error lines and argument checks, below every module that has a command line of its own (the
CLI, ``python -m interop.clip``, the examples): they import this, never the CLI's module (which imports them all)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any


def _err(*a: Any) -> None:
    print(*a, file=sys.stderr)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class UsageError(Exception):
    """A command line argparse refuses (an unknown option, a value of the wrong type)."""


def error_line(prog: str, error: BaseException | str, message: str | None = None) -> int:
    """One error line on stderr in the interop CLI's style, ``PROG: error: Type: message``, for a program of the
    user's (the examples use it); returns 1, an exit status. ``error``: the exception (its type names the line and,
    without ``message``, its text is the message: interop's say what to do; an OSError's strerror, without the
    "[Errno N]") or a type name."""
    if message is None:
        message = str(getattr(error, "strerror", None) or error)
    kind = error if isinstance(error, str) else type(error).__name__
    _err(f"{prog}: error: {kind}: {_one_line(message)}")
    return 1


def at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1 (argparse reports anything else as a usage error)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


#: whether this process's command line wrote its JSON line on stdout already (the error path then writes none)
_json_written = [False]


def json_line(doc: Any, **dumps: Any) -> None:
    """``doc`` as one JSON line on stdout. Written in one piece with SIGINT held back (on the main thread): print()
    writes the text and its newline apart, and a Ctrl-C between them, followed by the error object, left a line
    json.loads refuses. The Ctrl-C comes right after, and the error path then adds no second line (see
    json_written)."""
    text = json.dumps(doc, **dumps) + "\n"
    _json_written[0] = True
    main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if main else None
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def json_written() -> bool:
    """Whether json_line() wrote (or began to write) this process's JSON line."""
    return _json_written[0]


def json_reset() -> None:
    """A new command line starts (cli.main): no JSON line written yet."""
    _json_written[0] = False
