"""Soak: map/release cycles through every zero-copy mapper that can run here, and make/release cycles of every
tensor factory, leak nothing.

After a warm-up, the process's fd count returns exactly to where it started, RSS grows by at most 2 MiB, the
library's own counters of live OpenCL/USM/DMA allocations return to their starting value (zero when nothing
else is alive), and no zero-copy mapper records a copy. ``pytest --soak`` runs 100,000 cycles per mapper; the
default run does a few hundred, so it stays within seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

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


def _source_for(cls: type[interop.MemoryMapper], allow_copy: bool = False) -> tuple[str, B.Made]:
    """A source object the mapper accepts: the first factory of its memory type whose output it maps."""
    ok, missing = B.probe_factories()
    kinds = [k for k, mt in ok.items() if mt == cls.src.name]
    if not kinds:
        of_src = [k for k, (mt, _) in B.FACTORIES.items() if mt is cls.src]
        broken = {k: v for k, v in B.broken().items() if k in of_src}
        absent = {k: v for k, v in missing.items() if k in of_src}
        if broken or not absent:
            pytest.fail(f"{cls.name}: no factory makes {cls.src.name} memory here (broken: {broken or 'none'}; "
                        f"factories of {cls.src.name}: {of_src or 'none'})")
        pytest.skip(f"{cls.name}: no factory makes {cls.src.name} memory here "
                    f"({'; '.join(f'{k}: {v}' for k, v in absent.items())})")
    why = []
    for kind in sorted(kinds, key=lambda k: k.startswith("via:")):  # native factories first
        for seed in range(4):
            made = B.make(kind, np.random.default_rng(seed))
            try:
                out = cls().map(made.obj, AccessMode.READ, allow_copy=allow_copy)
            except (UnsupportedTypeError, InteropError) as e:
                B.release(made.obj)
                B.skip_if_lacking_hardware(e, cls.name)
                why.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            B.release(out)
            return kind, made
    pytest.fail(f"{cls.name} maps none of the sources made here: {' | '.join(why)}")


def _touch(out: interop.Tensor | Frame) -> None:
    t = B.planes_of(out)[0]
    try:
        a = np.asarray(t)
        if a.size:
            a.reshape(-1)[:1].tobytes()
    except InteropError:
        _ = t.native  # not CPU-reachable: touching the native handle is the use


_quiet: list[bool] = []


def _quiesce() -> None:
    """Once per process: probe every factory, then wait until the fd count holds still. The first map to
    OpenVINO (the via:OPENVINO probe) leaves pipes that go a moment later, not on the main thread's watch, so a baseline taken right after the probe could count
    them and a soak would see fds vanish."""
    if _quiet:
        return
    B.probe_factories()
    last, stable_since, t0 = -1, time.perf_counter(), time.perf_counter()
    while time.perf_counter() - t0 < 10:
        B.settle()
        n = B.fd_count()
        if n != last:
            last, stable_since = n, time.perf_counter()
        elif time.perf_counter() - stable_since >= 0.5:
            break
        time.sleep(0.05)
    _quiet.append(True)


def _measure() -> tuple[int, int, dict[str, int]]:
    B.settle()
    return B.fd_count(), B.rss_bytes(), B.live_counts()[0]


def _copying_mappers() -> list[type[interop.MemoryMapper]]:
    """Mappers that may copy (zero_copy False), tier A, runnable here: soaked with allow_copy=True."""
    from interop.mapper import registered

    return sorted((c for c in registered().values() if not c.zero_copy and c.tier == "A" and not c.missing()),
                  key=lambda c: c.name)


def _rss_run(label: str, rss0: int, rss1: int, fd_live: tuple[Any, Any], again: Callable[[], None]) -> tuple[int, int]:
    """(RSS before, RSS after) of the run to judge: this one, or when it grew past RSS_SLACK, a second run of as many
    cycles (``again``). The heap of a process that ran hundreds of tests moves by megabytes on its own (an
    allocator arena trimmed or grown by another thread): a leak grows again over as many cycles, noise does not.
    The second run must leave fds and live allocations (``fd_live``) where the first did."""
    if rss1 - rss0 <= RSS_SLACK:
        return rss0, rss1
    stats.note(f"soak: {label} rss growth bytes, first run", rss1 - rss0)
    again()
    fd, rss2, live = _measure()
    assert (fd, live) == fd_live, f"{label}: fds or live allocations moved over the second run"
    return rss1, rss2


def _cycles(mapper: interop.MemoryMapper, obj: object, n: int, allow_copy: bool) -> None:
    for i in range(n):
        out = mapper.map(obj, AccessMode.READ, allow_copy=allow_copy)
        _touch(out)
        if i % 2:  # half released explicitly, half left to the garbage collector
            B.release(out)
        del out


def _soak(cls: type[interop.MemoryMapper], n: int, allow_copy: bool) -> None:
    """n map/release cycles of one mapper on one source: fds, RSS and live counters come back, and a zero-copy
    mapper records no copy."""
    name = cls.name
    _quiesce()
    fd_before_source, _, live_before_source = _measure()
    kind, made = _source_for(cls, allow_copy)
    mapper = cls()
    with interop.copy_meter() as one:
        for _ in range(max(WARMUP, n // 100)):
            out = mapper.map(made.obj, AccessMode.READ, allow_copy=allow_copy)
            _touch(out)
            B.release(out)
            del out
    per_cycle = one.copies / max(WARMUP, n // 100)
    fd0, rss0, live0 = _measure()
    t0 = time.perf_counter()
    # A copy meter keeps one record per copy (~140 bytes): for copying mappers it stays closed during the timed
    # cycles so that its records are not counted as the mapper's memory; the warm-up measured copies per cycle.
    with interop.copy_meter() if cls.zero_copy else contextlib.nullcontext() as meter:
        _cycles(mapper, made.obj, n, allow_copy)
    dt = time.perf_counter() - t0
    copies, first = (meter.copies, meter.records[:3]) if meter is not None else (0, [])
    del meter, one
    fd1, rss1, live1 = _measure()
    rss0, rss1 = _rss_run(name, rss0, rss1, (fd1, live1), lambda o=made.obj: _cycles(mapper, o, n, allow_copy))
    stats.add("soak: map/release cycles", n)
    stats.add(f"soak: cycles {name}", n)
    stats.note(f"soak: {name} us/cycle", round(dt / n * 1e6, 1))
    stats.note(f"soak: {name} rss growth bytes", rss1 - rss0)
    if cls.zero_copy:
        assert copies == 0, f"zero-copy mapper {name} recorded copies: {first}"
    else:
        stats.note(f"soak: {name} copies/cycle", per_cycle)
    assert fd1 == fd0, f"{name}: fd count went {fd0} -> {fd1} over {n} cycles (source {kind})"
    assert rss1 - rss0 <= RSS_SLACK, f"{name}: RSS grew {(rss1 - rss0) / 2**20:.2f} MiB over {n} cycles"
    assert live1 == live0, f"{name}: live allocations {live0} -> {live1}"
    B.release(made.obj)
    del made
    fd2, _, live2 = _measure()
    assert fd2 == fd_before_source, f"{name}: the source's fds were not closed ({fd_before_source} -> {fd2})"
    assert live2 == live_before_source, f"{name}: live allocations after the source went: {live2}"


@pytest.mark.parametrize("name", _mapper_ids())
def test_mapper_soak(name, soak):
    ok, skipped = B.zero_copy_mappers()
    by_name = {c.name: c for c in ok}
    assert name in by_name, f"no zero-copy mapper {name!r} can run here (not runnable: {skipped or 'none'})"
    _soak(by_name[name], cycles(soak, 400), allow_copy=False)


@pytest.mark.parametrize("name", [c.name for c in _copying_mappers()] or ["none-runnable"])
def test_copying_mapper_soak(name, soak):
    """Mappers that copy (for some inputs) allocate per map: the same checks, with allow_copy=True."""
    by_name = {c.name: c for c in _copying_mappers()}
    assert name in by_name, f"no copying tier-A mapper {name!r} can run here"
    _soak(by_name[name], cycles(soak, 200, 20_000), allow_copy=True)


def _make_cycles(kind: str, rng: np.random.Generator, n: int) -> None:
    for i in range(n):
        m = B.make(kind, rng)
        if i % 2:
            B.release(m.obj)
        del m


@pytest.mark.parametrize("kind", sorted(k for k in B.FACTORIES if not k.startswith("via:")))
def test_factory_soak(kind, soak):
    """Make and release (or drop) tensors of each kind: allocations, fds and mappings all come back."""
    B.require_kind(kind)
    _quiesce()
    n = cycles(soak, 200, 20_000)
    rng = np.random.default_rng(1)
    for _ in range(max(WARMUP, n)):  # random sizes: let the allocator reach its high-water mark first
        B.release(B.make(kind, rng).obj)
    fd0, rss0, live0 = _measure()
    _make_cycles(kind, rng, n)
    fd1, rss1, live1 = _measure()
    rss0, rss1 = _rss_run(kind, rss0, rss1, (fd1, live1), lambda: _make_cycles(kind, rng, n))
    stats.add("soak: make/release cycles", n)
    assert fd1 == fd0, f"{kind}: fd count went {fd0} -> {fd1} over {n} cycles"
    assert rss1 - rss0 <= RSS_SLACK, f"{kind}: RSS grew {(rss1 - rss0) / 2**20:.2f} MiB over {n} cycles"
    assert live1 == live0, f"{kind}: live allocations {live0} -> {live1}"


COUNTED = {"OPENCL": "opencl-buffer", "USM": "usm-shared", "DMA": "dma-memfd"}


@pytest.mark.parametrize("label", sorted(COUNTED))
def test_live_counters_count(label):
    """The live-allocation counter the soak relies on exists and is real: a tensor of that memory type raises it,
    releasing (or dropping) the tensor brings it back."""
    have, absent = B.live_counts()
    stats.note("soak: live counters", have)
    kind = COUNTED[label]
    B.require_kind(kind)
    assert label in have, f"the {label} backend is here but has no live-allocation counter: {absent.get(label)}"
    for drop in (False, True):
        before = B.live_counts()[0][label]
        made = B.make(kind, np.random.default_rng(0))
        assert B.live_counts()[0][label] >= before + 1, f"{label} counter did not count a new {kind}"
        if not drop:
            made.obj.release()
        del made
        B.settle()
        assert B.live_counts()[0][label] == before


# ---- faults: failures in the middle of work leak nothing ---------------------------------------------------


def _multi_step_routes() -> list[tuple[str, interop.MemoryType]]:
    ok, _ = B.probe_factories()
    out = []
    for kind, mt in sorted(ok.items()):
        if kind.startswith("via:"):
            continue
        for dst in interop.MemoryType:
            chain = B.runnable_chain(interop.MemoryType[mt], dst)
            if not isinstance(chain, str) and len(chain) > 1:
                out.append((kind, dst))
    return out


def _mappable_seeds(kind: str, dst: interop.MemoryType, want: int = 3, tries: int = 32) -> list[int]:
    """Seeds whose object of factory ``kind`` maps to ``dst`` (copies allowed): a factory's random shapes and
    dtypes are not all valid at every destination (a 1-D array is no UMat), and such a refusal is not the fault
    under test. Mapping them also warms up imports, default contexts and cached routes."""
    seeds = []
    for seed in range(tries):
        made = B.make(kind, np.random.default_rng(seed))
        try:
            B.release(interop.map(made.obj, dst, allow_copy=True))
            seeds.append(seed)
        except InteropError:
            pass
        B.release(made.obj)
        del made
        if len(seeds) == want:
            break
    return seeds


def test_fault_in_last_step_of_a_route_leaks_nothing(monkeypatch):
    """A route whose last step fails (injected) frees what the earlier steps mapped: fds and live allocations
    return to where they were once the source is gone, and the route works again once the fault is gone.

    Each object is routed itself: the route map() takes depends on the object, not only on its kind (a cv2.Mat
    of uint8 is routed to FFMPEG through cpu_to_ffmpeg, one of float32 through cpu_to_dma -> dma_to_ffmpeg), so
    patching the last step of another object's route could leave this object's route untouched."""
    routes = _multi_step_routes()
    assert routes, "no multi-step route can run here (tier A backends are all present: there must be one)"
    _quiesce()
    injected = 0
    patched: set[str] = set()

    def boom(self, *a, **k):
        raise RuntimeError("injected fault")

    B.settle()
    for kind, dst in routes:
        seeds = _mappable_seeds(kind, dst)
        assert seeds, f"{kind} -> {dst.name}: no object of 32 seeds maps (copies allowed): the route is not exercised"
        fd0, _, live0 = _measure()
        for i, seed in enumerate(seeds):
            made = B.make(kind, np.random.default_rng(seed))
            chain = interop.route(made.obj, dst, allow_copy=True)  # the route map() takes for this very object
            last = type(chain.mappers[-1])
            del chain
            with monkeypatch.context() as mp:
                mp.setattr(last, "map", boom)
                with pytest.raises(RuntimeError, match="injected fault"):
                    interop.map(made.obj, dst, allow_copy=True)
            injected += 1
            patched.add(last.name)
            if i % 2:  # half released explicitly, half left to the garbage collector
                B.release(made.obj)
            del made
        fd1, _, live1 = _measure()
        assert fd1 == fd0, f"{kind} -> {dst.name}: a failed last step leaked fds ({fd0} -> {fd1})"
        assert live1 == live0, f"{kind} -> {dst.name}: a failed last step leaked allocations ({live0} -> {live1})"
        made = B.make(kind, np.random.default_rng(seeds[0]))  # the route works again and reads the source's bytes
        out = interop.map(made.obj, dst, allow_copy=True)
        B.assert_content(out, made.expected, f"{kind} -> {dst.name} after the faults")
        B.release(out)
        B.release(made.obj)
        del out, made
    stats.add("faults: route steps failed (injected)", injected)
    stats.note("faults: last steps failed (injected)", sorted(patched))


def test_fd_exhaustion_is_survived():
    """With the fd table full (RLIMIT_NOFILE), DMA wrapping and CPU -> DMA mapping fail cleanly (an OSError
    EMFILE or an InteropError), leak nothing, and work again once fds are free."""
    import errno
    import os
    import resource

    DMATensor = B.need_attr("interop.tensors.dma", "DMATensor", "the DMA backend")
    memfd_alloc = B.need_attr("interop.native.dmabuf", "memfd_alloc", "the DMA native layer")
    info = interop.TensorInfo((16, 16), np.uint8)
    src = memfd_alloc(4096)
    a = np.arange(256, dtype=np.uint8).reshape(16, 16)
    B.release(interop.map(a, interop.MemoryType.DMA, allow_copy=True))  # warm up: imports, default context
    B.release(DMATensor.from_fd(src, info=info))
    fd0, _, live0 = _measure()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler: list[int] = []
    failures = 0
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd0 + 32, hard))
        try:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
        for attempt in (lambda: DMATensor.from_fd(src, info=info),
                        lambda: interop.map(a, interop.MemoryType.DMA, allow_copy=True)):
            for _ in range(20):
                try:
                    B.release(attempt())
                except (OSError, InteropError) as e:
                    assert not isinstance(e, OSError) or e.errno == errno.EMFILE, e
                    failures += 1
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    stats.add("faults: fd exhaustion failures survived", failures)
    assert failures, "nothing failed with a full fd table: the test did not fill it"
    fd1, _, live1 = _measure()
    assert (fd1, live1) == (fd0, live0), f"fds {fd0} -> {fd1}, live {live0} -> {live1} after EMFILE failures"
    t = DMATensor.from_fd(src, info=info)  # and it works again
    out = interop.map(a, interop.MemoryType.DMA, allow_copy=True)
    assert np.array_equal(np.asarray(interop.map(out, interop.MemoryType.CPU)), a)
    B.release(out)
    B.release(t)
    os.close(src)


def test_failing_release_hook_does_not_skip_the_others():
    """A release hook that raises (e.g. a write-back that fails) must not stop the others (unmap, close) from
    running: the error propagates, the cleanup still happens."""
    ran: list[str] = []
    t = interop.wrap(np.zeros(4, np.uint8))
    t.on_release(lambda: ran.append("close fd"))

    def bad() -> None:
        raise RuntimeError("write-back failed (injected)")

    t.on_release(bad)
    with pytest.raises(RuntimeError, match="injected"):
        t.release()
    assert ran == ["close fd"], "an older release hook was skipped after a newer one raised"


def test_wrap_umat_does_not_leak_the_umat():
    """wrap() of fresh 1080p UMats, dropped each time: RSS stays flat (each leaked UMat would be 2 MiB).

    Regression test: the layout probe once used out-of-range ROI constructors, and opencv-python 5.0 leaks the
    parent UMat, buffer and all, each time one raises."""
    try:
        B.need_module("interop.tensors.opencv", "the OpenCV backend")
        cv2 = B.need_module("cv2", "OpenCV")
    except B.Missing as e:
        pytest.skip(str(e))
    a = np.zeros((1080, 1920), np.uint8)
    for _ in range(3):
        B.release(interop.wrap(cv2.UMat(a)))
    _, rss0, _ = _measure()
    for _ in range(20):
        t = interop.wrap(cv2.UMat(a))
        assert t.info.shape == (1080, 1920)
        t.release()
        del t
    _, rss1, _ = _measure()
    assert rss1 - rss0 <= RSS_SLACK, f"20 wraps of 1080p UMats grew RSS by {(rss1 - rss0) / 2**20:.1f} MiB"
