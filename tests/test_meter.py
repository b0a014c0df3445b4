"""copy_meter(): counts, bytes, records; thread-safe; nestable; frozen at exit."""

from __future__ import annotations

import threading

import pytest

import interop
from interop.meter import record_copy


def test_counts_and_freezes():
    with interop.copy_meter() as m:
        record_copy("a_to_b", 100)
        record_copy("b_to_c", 20)
    record_copy("after", 5)
    assert m.copies == 2 and m.bytes == 120
    assert [(r.mapper, r.bytes) for r in m.records] == [("a_to_b", 100), ("b_to_c", 20)]


def test_nesting():
    with interop.copy_meter() as outer:
        record_copy("x", 1)
        with interop.copy_meter() as inner:
            record_copy("y", 2)
        record_copy("z", 4)
    assert (outer.copies, outer.bytes) == (3, 7)
    assert (inner.copies, inner.bytes) == (1, 2)


def test_thread_safe():
    n, per = 8, 2000
    with interop.copy_meter() as m:
        def work():
            for _ in range(per):
                record_copy("t", 3)
        threads = [threading.Thread(target=work) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert m.copies == n * per and m.bytes == 3 * n * per


def test_meter_enters_once():
    m = interop.copy_meter()
    with m:
        pass
    assert issubclass(interop.StateError, RuntimeError) and issubclass(interop.StateError, interop.InteropError)
    with pytest.raises(interop.StateError, match="once"):
        with m:
            pass


def test_records_are_capped_but_totals_stay_exact(monkeypatch):
    import interop.meter as meter

    monkeypatch.setattr(meter, "MAX_RECORDS", 10)
    with interop.copy_meter() as m:
        for i in range(25):
            record_copy("a" if i % 2 else "b", 4)
    assert m.copies == 25 and m.bytes == 100 and len(m.records) == 10 and m.truncated
    assert m.by_mapper == {"a": (12, 48), "b": (13, 52)}
