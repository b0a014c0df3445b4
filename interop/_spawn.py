"""Child processes of a run (decode workers, post-processing processes) start with Ctrl-C ignored."""

from __future__ import annotations

import os

_SHELL = "/bin/sh"


def ignoring_ctrl_c(args: list[str]) -> list[str]:
    """``args`` run with SIGINT ignored from their first instruction. A terminal's Ctrl-C reaches the whole process
    group: a child still importing would print a KeyboardInterrupt traceback before it could set its own handler.
    Python installs no handler for a signal it inherits ignored; the parent stops its children by closing their
    sockets (and they die with it)."""
    if not os.access(_SHELL, os.X_OK):
        return args
    return [_SHELL, "-c", 'trap "" INT; exec "$0" "$@"', *args]
