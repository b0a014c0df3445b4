"""Soak: map/release cycles through every zero-copy mapper that can run here, and make/release cycles of every
tensor factory, leak nothing.

After a warm-up, the process's fd count returns exactly to where it started, RSS grows by at most 2 MiB, the
library's own counters of live OpenCL/USM/DMA allocations return to their starting value (zero when nothing
else is alive), and no zero-copy mapper records a copy. ``pytest --soak`` runs 100,000 cycles per mapper; the
default run does a few hundred, so it stays within seconds.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import interop
from interop import AccessMode, Frame, InteropError, UnsupportedTypeError
from tests.conftest import cycles
from tests.reliability import backends as B
from tests.reliability import stats

pytestmark = pytest.mark.soak

WARMUP = 50
RSS_SLACK = 2 * 1024 * 1024


def _mapper_ids() -> list[str]:
    ok, skipped = B.zero_copy_mappers()
    return [c.name for c in ok] or ["none-runnable"]


def _source_for(cls: type[interop.MemoryMapper]) -> tuple[str, B.Made]:
    """A source object the mapper accepts: the first factory of its memory type whose output it maps."""
    ok, missing = B.probe_factories()
    kinds = [k for k, mt in ok.items() if mt == cls.src.name]
    if not kinds:
        pytest.skip(f"{cls.name}: no factory makes {cls.src.name} memory here "
                    f"({'; '.join(f'{k}: {v}' for k, v in missing.items() if B.FACTORIES[k][0] is cls.src) or 'none'})")
    why = []
    for kind in sorted(kinds, key=lambda k: k.startswith("via:")):  # native factories first
        for seed in range(4):
            made = B.make(kind, np.random.default_rng(seed))
            try:
                out = cls().map(made.obj, AccessMode.READ)
            except (UnsupportedTypeError, InteropError) as e:
                why.append(f"{kind}: {type(e).__name__}: {e}")
                B.release(made.obj)
                continue
            B.release(out)
            return kind, made
    pytest.skip(f"{cls.name} maps none of the sources made here: {' | '.join(why[:3])}")


def _touch(out: interop.Tensor | Frame) -> None:
    t = B.planes_of(out)[0]
    try:
        a = np.asarray(t)
        if a.size:
            a.reshape(-1)[:1].tobytes()
    except InteropError:
        _ = t.native  # not CPU-reachable: touching the native handle is the use


def _measure() -> tuple[int, int, dict[str, int]]:
    B.settle()
    return B.fd_count(), B.rss_bytes(), B.live_counts()[0]


@pytest.mark.parametrize("name", _mapper_ids())
def test_mapper_soak(name, soak):
    ok, skipped = B.zero_copy_mappers()
    by_name = {c.name: c for c in ok}
    if name not in by_name:
        pytest.skip(f"no zero-copy mapper can run here yet (registered: {skipped or 'none'})")
    cls = by_name[name]
    fd_before_source, _, live_before_source = _measure()
    kind, made = _source_for(cls)
    n = cycles(soak, 400)
    mapper = cls()
    for _ in range(WARMUP):
        out = mapper.map(made.obj, AccessMode.READ)
        _touch(out)
        B.release(out)
        del out
    fd0, rss0, live0 = _measure()
    t0 = time.perf_counter()
    with interop.copy_meter() as meter:
        for i in range(n):
            out = mapper.map(made.obj, AccessMode.READ)
            _touch(out)
            if i % 2:  # half released explicitly, half left to the garbage collector
                B.release(out)
            del out
    dt = time.perf_counter() - t0
    fd1, rss1, live1 = _measure()
    stats.add("soak: map/release cycles", n)
    stats.add(f"soak: cycles {name}", n)
    stats.note(f"soak: {name} us/cycle", round(dt / n * 1e6, 1))
    stats.note(f"soak: {name} rss growth bytes", rss1 - rss0)
    assert meter.copies == 0, f"zero-copy mapper {name} recorded copies: {meter.records[:3]}"
    assert fd1 == fd0, f"{name}: fd count went {fd0} -> {fd1} over {n} cycles (source {kind})"
    assert rss1 - rss0 <= RSS_SLACK, f"{name}: RSS grew {(rss1 - rss0) / 2**20:.2f} MiB over {n} cycles"
    assert live1 == live0, f"{name}: live allocations {live0} -> {live1}"
    B.release(made.obj)
    del made
    fd2, _, live2 = _measure()
    assert fd2 == fd_before_source, f"{name}: the source's fds were not closed ({fd_before_source} -> {fd2})"
    assert live2 == live_before_source, f"{name}: live allocations after the source went: {live2}"


@pytest.mark.parametrize("kind", sorted(k for k in B.FACTORIES if not k.startswith("via:")))
def test_factory_soak(kind, soak):
    """Make and release (or drop) tensors of each kind: allocations, fds and mappings all come back."""
    ok, missing = B.probe_factories()
    if kind not in ok:
        pytest.skip(f"{kind}: {missing.get(kind)}")
    n = cycles(soak, 200, 20_000)
    rng = np.random.default_rng(1)
    for _ in range(WARMUP):
        B.release(B.make(kind, rng).obj)
    fd0, rss0, live0 = _measure()
    for i in range(n):
        m = B.make(kind, rng)
        if i % 2:
            B.release(m.obj)
        del m
    fd1, rss1, live1 = _measure()
    stats.add("soak: make/release cycles", n)
    assert fd1 == fd0, f"{kind}: fd count went {fd0} -> {fd1} over {n} cycles"
    assert rss1 - rss0 <= RSS_SLACK, f"{kind}: RSS grew {(rss1 - rss0) / 2**20:.2f} MiB over {n} cycles"
    assert live1 == live0, f"{kind}: live allocations {live0} -> {live1}"


def test_live_counters_present():
    """The live-allocation counters the soak relies on exist for every backend that has landed."""
    have, absent = B.live_counts()
    stats.note("soak: live counters", have)
    stats.note("soak: live counters absent", absent)
    landed_without = {k: v for k, v in absent.items() if "does not exist" in v}
    if landed_without:
        pytest.xfail(f"backends without a live-allocation counter yet: {landed_without}")
    assert all(v >= 0 for v in have.values()), have
