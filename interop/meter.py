"""Copy accounting: every byte a mapper copies between memory types is recorded here."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class CopyRecord:
    mapper: str
    bytes: int


_lock = threading.Lock()
_active: list[CopyMeter] = []


class CopyMeter:
    """Counts copies made anywhere in the process while its ``with`` block is open.

    Meters nest: a copy is recorded in every open meter. On exit the figures are frozen.
    """

    def __init__(self) -> None:
        self._records: list[CopyRecord] = []
        self._open = False
        self._closed = False

    def __enter__(self) -> CopyMeter:
        with _lock:
            if self._open or self._closed:
                raise RuntimeError("a copy meter can be entered once; call interop.copy_meter() again")
            self._open = True
            _active.append(self)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        with _lock:
            self._open = False
            self._closed = True
            if self in _active:
                _active.remove(self)
            self._records = list(self._records)

    @property
    def copies(self) -> int:
        with _lock:
            return len(self._records)

    @property
    def bytes(self) -> int:
        with _lock:
            return sum(r.bytes for r in self._records)

    @property
    def records(self) -> list[CopyRecord]:
        with _lock:
            return list(self._records)

    def __repr__(self) -> str:
        return f"<CopyMeter copies={self.copies} bytes={self.bytes}>"


def copy_meter() -> CopyMeter:
    """``with interop.copy_meter() as m: ...`` then ``m.copies``, ``m.bytes``, ``m.records``."""
    return CopyMeter()


def record_copy(mapper: str, nbytes: int) -> None:
    """Called by a mapper each time it copies ``nbytes`` bytes (bytes written, padding excluded)."""
    with _lock:
        for m in _active:
            m._records.append(CopyRecord(mapper, int(nbytes)))
