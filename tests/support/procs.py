"""Processes of a run, found through /proc (decode workers, post-processing processes)."""

from __future__ import annotations

import os


def children(pid: int, name: str = "interop.streams", *, python_only: bool = False) -> list[int]:
    """Live processes whose parent is ``pid`` and whose command line names ``name``; ``python_only``: not the shell
    that starts a worker (interop._spawn) before it becomes Python."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z" and name in cmd and \
                not (python_only and raw.startswith(b"/bin/sh")):
            out.append(int(d))
    return out
