"""Copy accounting: every byte a mapper copies between memory types is recorded here."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from ._locks import FinalizerLock
from .errors import StateError


@dataclass(frozen=True)
class CopyRecord:
    mapper: str
    bytes: int


# record_copy() runs from write-back hooks, so from finalisers too, which the collector may start inside one of
# the meter's own critical sections: it goes through FinalizerLock.call() and never waits
_lock = FinalizerLock()
_active: list[CopyMeter] = []

#: per-copy records a meter keeps; past this it keeps exact totals per mapper only (a meter left open over a
#: long stream that copies every frame must not grow without bound)
MAX_RECORDS = 100_000


class CopyMeter:
    """Counts copies made anywhere in the process while its ``with`` block is open.

    Meters nest: a copy is recorded in every open meter. On exit the figures are frozen.
    """

    def __init__(self) -> None:
        self._records: list[CopyRecord] = []
        self._copies = 0
        self._bytes = 0
        self._by_mapper: dict[str, list[int]] = {}  # mapper -> [copies, bytes], exact
        self._open = False
        self._closed = False

    def __enter__(self) -> CopyMeter:
        with _lock:
            if self._open or self._closed:
                raise StateError("a copy meter can be entered once; call interop.copy_meter() again")
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
            return self._copies

    @property
    def bytes(self) -> int:
        with _lock:
            return self._bytes

    @property
    def records(self) -> list[CopyRecord]:
        """One (mapper, bytes) record per copy, in order; the first MAX_RECORDS only (see ``truncated``)."""
        with _lock:
            return list(self._records)

    @property
    def truncated(self) -> bool:
        """True when more copies happened than ``records`` holds; ``copies``, ``bytes`` and ``by_mapper`` stay exact."""
        with _lock:
            return self._copies > len(self._records)

    @property
    def by_mapper(self) -> dict[str, tuple[int, int]]:
        """Exact (copies, bytes) per mapper name."""
        with _lock:
            return {k: (v[0], v[1]) for k, v in self._by_mapper.items()}

    def __repr__(self) -> str:
        return f"<CopyMeter copies={self.copies} bytes={self.bytes}>"


def copy_meter() -> CopyMeter:
    """``with interop.copy_meter() as m: ...`` then ``m.copies``, ``m.bytes``, ``m.records``."""
    return CopyMeter()


def record_copy(mapper: str, nbytes: int) -> None:
    """Called by a mapper each time it copies ``nbytes`` bytes (bytes written, padding excluded)."""
    n = int(nbytes)
    if _active:  # no meter open (the common case): nothing to take the lock for
        _lock.call(_record, mapper, n)


def _record(mapper: str, n: int) -> None:
    if _active:
        rec = CopyRecord(mapper, n)
        for m in _active:
            m._copies += 1
            m._bytes += n
            agg = m._by_mapper.setdefault(mapper, [0, 0])
            agg[0] += 1
            agg[1] += n
            if len(m._records) < MAX_RECORDS:
                m._records.append(rec)
