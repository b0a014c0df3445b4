"""Counters for docs/reliability.md: cycles soaked, inputs tried, faults injected, what was lost.

Set INTEROP_RELIABILITY_STATS=<path> when running the suite and the totals are written there as JSON at exit.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import threading

_lock = threading.Lock()
COUNTS: collections.Counter[str] = collections.Counter()
NOTES: dict[str, object] = {}


def add(key: str, n: int = 1) -> None:
    with _lock:
        COUNTS[key] += n


def note(key: str, value: object) -> None:
    with _lock:
        NOTES[key] = value


def _dump() -> None:
    path = os.environ.get("INTEROP_RELIABILITY_STATS")
    if not path:
        return
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {"counts": {}, "notes": {}}
    counts = collections.Counter(old.get("counts", {}))
    counts.update(COUNTS)
    notes = dict(old.get("notes", {}))
    notes.update({k: v for k, v in NOTES.items()})
    with open(path, "w") as f:
        json.dump({"counts": dict(sorted(counts.items())), "notes": notes}, f, indent=1, default=str)


atexit.register(_dump)
