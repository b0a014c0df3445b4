"""Lifetimes: views outlive their sources, in any order of wrap, map, crop, export, release, drop and gc.

A hypothesis state machine builds tensors and frames of every memory type whose backend is here (CPU, FFmpeg,
OpenCV Mat/UMat, OpenCL, USM, DMA, and whatever else a runnable route from the CPU reaches), maps them along
random routes (copies allowed where a route needs them), takes crops and numpy/DLPack exports, then drops
references, releases and collects in random orders. Every object still held must read exactly the content
recorded when its source was made (a fingerprint of the generated data, not read through interop); numpy and
DLPack exports must do so even after their tensor was released and dropped.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import interop
from interop import AccessMode, Frame, InteropError, InvalidTensorError, MemoryType, Tensor
from interop.info import plane_layout
from tests.reliability import backends as B
from tests.reliability import stats
from tests.support.ocl_support import umat_context
from tests.support.requirements import need_module


def _single_row_repro() -> None:
    """Minimal repro: a one-row plane whose pitch is wider than the row (a crop of a wider frame)."""
    interop.map(interop.wrap(np.zeros((1, 9), np.uint8)[:, :2]), MemoryType.OPENVINO)


@dataclass
class Entry:
    obj: Tensor | Frame
    expected: list[np.ndarray]
    kind: str
    lineage: list[Entry] = field(default_factory=list)  # the entries this one was derived from
    released: bool = False

    @property
    def source_released(self) -> bool:
        return any(e.released for e in self.lineage)


def _crop_expected(obj: Tensor | Frame, expected: list[np.ndarray], x: int, y: int, w: int, h: int) -> list[np.ndarray]:
    if isinstance(obj, Frame):
        out = []
        for spec, e in zip(plane_layout(obj.format), expected):
            out.append(e[y // spec.sub_y: y // spec.sub_y + -(-h // spec.sub_y),
                         x // spec.sub_x: x // spec.sub_x + -(-w // spec.sub_x)])
        return out
    return [expected[0][y:y + h, x:x + w]]


def check_entry(e: Entry) -> None:
    """The content of a held, unreleased object is the recorded one. A mapping whose source was released
    explicitly may refuse with InvalidTensorError, but must never read other data or crash."""
    try:
        ok = B.content_matches(e.obj, e.expected)
    except InvalidTensorError:
        if e.source_released:
            stats.add("lifetimes: reads refused after a source release")
            return
        raise
    stats.add("lifetimes: content checks")
    if ok is None and not B.cpu_readable(e.obj.memory_type):
        stats.add("lifetimes: unreadable here (no route to CPU)")
        return
    assert ok is True, f"{e.kind} {e.obj!r} does not read the content recorded at creation (got {ok})"


class Lifetimes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kinds = sorted(B.probe_factories()[0])
        self.entries: list[Entry] = []
        self.exports: list[tuple[np.ndarray, np.ndarray, str]] = []  # (view, expected, what)

    def _pick(self, i: int) -> Entry | None:
        live = [e for e in self.entries if not e.released]
        return live[i % len(live)] if live else None

    @rule(kind=st.sampled_from(sorted(B.FACTORIES)), seed=st.integers(0, 2**32 - 1))
    def create(self, kind: str, seed: int) -> None:
        if kind not in self.kinds:  # its backend is absent here: stand in with a present kind, chosen by name
            kind = self.kinds[sum(map(ord, kind)) % len(self.kinds)]
        try:
            made = B.make(kind, np.random.default_rng(seed))
        except B.Missing:  # a backend vanished mid-run (cannot happen in one process): nothing to check
            return
        stats.add(f"lifetimes: created {kind}")
        self.entries.append(Entry(made.obj, made.expected, kind))

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16), d=st.integers(0, 1 << 16), write=st.booleans())
    def map_somewhere(self, i: int, d: int, write: bool) -> None:
        e = self._pick(i)
        if e is None:
            return
        dests = B.runnable_destinations(e.obj.memory_type)
        if not dests:
            return
        dst = dests[d % len(dests)]
        # WRITE mappings of memory we do not change write back the same bytes: content must be unchanged
        mode = AccessMode.READ_WRITE if write and e.obj.memory_type is MemoryType.CPU else AccessMode.READ
        try:
            out = interop.map(e.obj, dst, mode=mode, allow_copy=True)
        except InteropError as err:  # e.g. a dtype or shape a backend cannot take: typed, never a crash
            stats.add(f"lifetimes: map refused ({type(err).__name__})")
            return
        stats.add("lifetimes: maps")
        self.entries.append(Entry(out, e.expected, f"{e.kind}->{dst.name}", e.lineage + [e]))

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16), fx=st.floats(0, 1), fy=st.floats(0, 1), fw=st.floats(0, 1), fh=st.floats(0, 1))
    def crop(self, i: int, fx: float, fy: float, fw: float, fh: float) -> None:
        e = self._pick(i)
        if e is None:
            return
        obj = e.obj
        if isinstance(obj, Frame):
            W, H, step = obj.width, obj.height, 2
        elif obj.info.ndim in (2, 3):
            H, W = obj.info.shape[:2]
            step = 1
        else:
            return
        if W < step or H < step:
            return
        x = int(fx * (W - step)) // step * step
        y = int(fy * (H - step)) // step * step
        w = max(step, int(fw * (W - x)) // step * step)
        h = max(step, int(fh * (H - y)) // step * step)
        try:
            view = obj.crop(x, y, w, h) if isinstance(obj, Frame) else obj.region(x, y, w, h)
        except InteropError as err:  # a tensor type without regions says so
            stats.add(f"lifetimes: crop refused ({type(err).__name__})")
            return
        stats.add("lifetimes: crops")
        self.entries.append(Entry(view, _crop_expected(obj, e.expected, x, y, w, h), f"{e.kind}.crop",
                                  e.lineage + [e]))

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16), dlpack=st.booleans())
    def export(self, i: int, dlpack: bool) -> None:
        e = self._pick(i)
        if e is None:
            return
        for t, want in zip(B.planes_of(e.obj), e.expected):
            try:
                arr = np.from_dlpack(t) if dlpack else np.asarray(t)
            except (InteropError, BufferError, TypeError):
                continue  # not CPU-reachable: nothing to export zero-copy
            stats.add("lifetimes: exports")
            self.exports.append((arr, want, f"{e.kind} {'dlpack' if dlpack else 'numpy'}"))

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16))
    def drop(self, i: int) -> None:
        del self.entries[i % len(self.entries)]
        stats.add("lifetimes: drops")

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16))
    def release(self, i: int) -> None:
        e = self.entries[i % len(self.entries)]
        e.obj.release()
        e.released = True
        stats.add("lifetimes: releases")
        with pytest.raises(InvalidTensorError, match="released"):
            np.asarray(B.planes_of(e.obj)[0]) if isinstance(e.obj, Tensor) else e.obj.tensors
        if isinstance(e.obj, Tensor):
            with pytest.raises(InvalidTensorError, match="map or wrap"):
                _ = e.obj.info
        e.obj.release()  # idempotent

    @rule()
    def collect(self) -> None:
        gc.collect()
        stats.add("lifetimes: gc.collect")

    @precondition(lambda self: self.entries)
    @rule(i=st.integers(0, 1 << 16))
    def check_one(self, i: int) -> None:
        e = self._pick(i)
        if e is not None:
            check_entry(e)

    @invariant()
    def exports_read_right(self) -> None:
        for arr, want, what in self.exports:
            assert np.array_equal(B.normalise(arr, want), want), f"{what} export changed content"

    def teardown(self) -> None:
        for e in self.entries:
            if not e.released:
                check_entry(e)
        self.entries.clear()
        gc.collect()
        self.exports_read_right()
        self.exports.clear()
        stats.add("lifetimes: machines run")


def machine_settings(soak: bool) -> settings:
    """25 runs of 30 steps by default, the same ones every time (derandomized: the default run must not
    depend on luck); with --soak (or INTEROP_LIFETIMES_EXAMPLES=N) many more, freshly random."""
    n = int(os.environ.get("INTEROP_LIFETIMES_EXAMPLES", 400 if soak else 25))
    long_run = soak or "INTEROP_LIFETIMES_EXAMPLES" in os.environ
    return settings(max_examples=n, stateful_step_count=30, deadline=None, derandomize=not long_run,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def kinds():
    ok, missing = B.probe_factories()
    stats.note("lifetimes: kinds exercised", sorted(ok))
    stats.note("lifetimes: kinds missing", missing)
    return ok


def test_state_machine(kinds, soak):
    """Random interleavings; the fd count is back where it started once everything is dropped."""
    B.settle()
    fds = B.fd_count()
    live0, _ = B.live_counts()
    before = dict(stats.COUNTS)
    run_state_machine_as_test(Lifetimes, settings=machine_settings(soak))
    done = {k: stats.COUNTS[k] - before.get(k, 0) for k in stats.COUNTS}
    for op in ("maps", "crops", "exports", "releases", "drops", "content checks"):
        assert done.get(f"lifetimes: {op}", 0) > 0, f"the state machine never did any {op}: {done}"
    B.settle()
    assert B.fd_count() <= fds, "file descriptors leaked by dropped tensors"
    live, _ = B.live_counts()
    assert live == live0, f"live allocations after every object was dropped: {live} (before: {live0})"


#: memory types whose tensors live at a host address (DESIGN: CPU-reachable, so numpy.asarray views them); DMA,
#: GST, OpenCL and UMat memory must be mapped to the CPU first
HOST_POINTER = {MemoryType.CPU, MemoryType.FFMPEG, MemoryType.OPENCV, MemoryType.OPENVINO, MemoryType.USM}


def host_pointer(t: interop.Tensor) -> bool:
    """Whether ``t`` must export ``__array_interface__``: its memory type lives at a host address (device USM
    does not)."""
    return t.memory_type in HOST_POINTER and getattr(t, "usm_type", None) != "device"


def test_host_pointer_kinds_give_numpy_views():
    """Each host-pointer kind made here gives a numpy view of its content (what test_view_outlives_source relies
    on when it refuses to skip its view check)."""
    ok, _ = B.probe_factories()
    seen = set()
    for kind in sorted(ok):
        made = B.make(kind, np.random.default_rng(3))
        for t, want in zip(B.planes_of(made.obj), made.expected):
            if host_pointer(t):
                assert np.array_equal(B.normalise(np.asarray(t), want), want), kind
                seen.add(t.memory_type)
        B.release(made.obj)
    assert MemoryType.CPU in seen, seen


@pytest.mark.parametrize("kind", sorted(B.FACTORIES))
def test_view_outlives_source(kind):
    """Each kind: crop + numpy view + CPU mapping of a source that is then dropped and collected read right."""
    B.require_kind(kind)
    made = B.make(kind, np.random.default_rng(7))
    held: list[Entry] = [Entry(made.obj, made.expected, kind)]
    planes = B.planes_of(made.obj)
    views = []
    t = None
    for t, want in zip(planes, made.expected):
        try:
            views.append((np.asarray(t), want))
        except InteropError:
            if host_pointer(t):  # its memory has a host address: numpy must see it (no silent loss of coverage)
                raise
    cpu_route = B.runnable_chain(made.obj.memory_type, MemoryType.CPU)
    if not isinstance(cpu_route, str):
        held.append(Entry(interop.map(made.obj, MemoryType.CPU, allow_copy=True), made.expected, kind + "->CPU"))
    del made, planes, t
    held.pop(0)
    B.settle()
    for arr, want in views:
        assert np.array_equal(B.normalise(arr, want), want)
    for e in held:
        check_entry(e)
    if not views and not held:
        pytest.skip(f"{kind}: no numpy view and no runnable route to the CPU to read it ({cpu_route})")


@pytest.mark.parametrize("kind", sorted(k for k in B.FACTORIES if not k.startswith("via:")))
def test_write_back_reaches_source(kind):
    """READ_WRITE mappings along every runnable route: what is written through a CPU-reachable view is what the
    source reads after release (no write-back lost or torn), even once the mapping was dropped first. A read-only
    source (an FFmpeg reference frame) is mapped as a writable copy: it must keep its own content."""
    mt = MemoryType[B.require_kind(kind)]
    tried = 0
    why: list[str] = []
    for dst in B.runnable_destinations(mt):
        made = B.make(kind, np.random.default_rng(5))
        try:
            out = interop.map(made.obj, dst, mode=AccessMode.READ_WRITE, allow_copy=True)
        except InteropError as err:  # an input this route refuses (typed): nothing to write through
            B.release(made.obj)
            B.skip_if_lacking_hardware(err, f"{kind} -> {dst.name}")
            why.append(f"{dst.name}: map refused ({type(err).__name__}: {err})")
            continue
        try:
            views = [np.asarray(t) for t in B.planes_of(out)]
        except InteropError as err:
            out.release()
            why.append(f"{dst.name}: not CPU-reachable ({type(err).__name__})")
            continue
        if not all(v.flags.writeable for v in views):
            out.release()
            why.append(f"{dst.name}: read-only views")
            continue
        new = []
        for v, want in zip(views, made.expected):
            nv = B.normalise(v, want)
            nv[...] = ((np.arange(nv.size) * 7 + 3) % 97).reshape(nv.shape).astype(nv.dtype)
            new.append(nv.copy())
        del views, v, nv
        out.release()
        del out
        gc.collect()
        if all(t.writable for t in B.planes_of(made.obj)):
            B.assert_content(made.obj, new, f"{kind} -> {dst.name}: write-back")
        else:  # a read-only source (a decoder's reference frame) is written through a copy and stays unchanged
            B.assert_content(made.obj, made.expected, f"{kind} -> {dst.name}: read-only source after a write to its copy")
        tried += 1
        stats.add("lifetimes: write-backs checked")
    assert tried, f"{kind}: no route gives a writable CPU-reachable mapping here: {'; '.join(why) or 'no destination'}"


def test_single_row_plane_maps_to_openvino():
    """A one-row plane with a pitch wider than its row (a 2x2 crop of an I420 frame has 1-row U/V planes) maps to
    OpenVINO and reads its own content (regression test: the state machine found cpu_to_openvino reshaping such
    a plane to its full pitch, a raw ValueError)."""
    need_module("openvino")
    row = np.arange(9, dtype=np.uint8).reshape(1, 9)[:, :2]
    assert B.content_matches(interop.map(interop.wrap(row), MemoryType.OPENVINO), [row.copy()]) is True
    f = interop.wrap(np.arange(12 * 18, dtype=np.uint8).reshape(12, 18), format=interop.FrameFormat.I420)
    crop = f.crop(0, 0, 2, 2)
    out = interop.map(crop, MemoryType.OPENVINO)
    assert isinstance(out, Frame) and out.memory_type is MemoryType.OPENVINO and len(out.tensors) == 3
    assert B.content_matches(out, [np.asarray(t).copy() for t in crop.tensors]) is True


def test_no_fd_closed_twice():
    """DMA tensors, their crops and CPU mappings released and collected in every order never close an fd twice:
    fds opened afterwards (which reuse the numbers just freed) stay open through more releases and collections."""
    DMATensor = B.need_attr("interop.tensors.dma", "DMATensor", "the DMA backend")
    memfd_alloc = B.need_attr("interop.native.dmabuf", "memfd_alloc", "the DMA native layer")
    import random

    rng = random.Random(0)
    for round_ in range(8):
        fd = memfd_alloc(64 * 64)
        objs: list[object] = []
        base = DMATensor.from_fd(fd, info=interop.TensorInfo((64, 64), np.uint8), take_ownership=bool(round_ % 2))
        objs += [base, base.region(8, 8, 16, 16)]
        if not isinstance(B.runnable_chain(MemoryType.DMA, MemoryType.CPU), str):
            objs.append(interop.map(base, MemoryType.CPU))
            objs.append(interop.map(objs[1], MemoryType.CPU))
        if round_ % 2 == 0:
            os.close(fd)  # ours: the tensor holds its own dup
        del base
        rng.shuffle(objs)
        victims = []
        while objs:
            o = objs.pop()
            if rng.random() < 0.5:
                o.release()  # type: ignore[attr-defined]
                victims.append(o)  # released but still referenced: released again below
            del o
            sentinels = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]  # reuse any fd number just freed
            for v in victims:
                v.release()  # type: ignore[attr-defined]
            gc.collect()
            for s in sentinels:
                try:
                    os.fstat(s)
                except OSError as err:
                    pytest.fail(f"round {round_}: sentinel fd {s} was closed by a release or collection "
                                f"(an fd closed twice): {err}")
                os.close(s)
        victims.clear()
        gc.collect()
    stats.add("lifetimes: fd double-close rounds", 8)


def test_views_of_decoded_frames_outlive_the_decoder_pool():
    """Views of decoder frames (CPU and OpenVINO mappings, crops, numpy exports) are kept while the av.VideoFrame
    and its interop Frame are dropped and decoding goes on: the decoder's buffer pool must not reuse memory a
    view still reads. Each view reads the frame it was taken from (plane bytes read through PyAV at decode)."""
    try:
        B.need_module("interop.tensors.ffmpeg", "the FFmpeg backend")
        av = B.need_module("av", "PyAV")
    except B.Missing as e:
        pytest.skip(str(e))
    from interop.clip import default_clip

    dests = [d for d in (MemoryType.CPU, MemoryType.OPENVINO, MemoryType.OPENCV)
             if not isinstance(B.runnable_chain(MemoryType.FFMPEG, d), str)]
    kept: list[tuple[object, list[np.ndarray], str]] = []
    import random

    rng = random.Random(1)
    with av.open(default_clip()) as container:
        for i, vf in enumerate(container.decode(video=0)):
            if i >= 60:
                break
            planes = []
            for p in vf.planes:  # what this frame holds, read through PyAV alone
                rows = np.frombuffer(p, np.uint8).reshape(-1, p.line_size)
                planes.append(rows[: p.height, : p.width].copy())
            f = interop.wrap(vf)
            what = rng.choice(["frame", "crop"] + [d.name for d in dests] + ["numpy"])
            if what == "frame":
                kept.append((f, planes, f"frame {i}"))
            elif what == "crop":
                kept.append((f.crop(16, 8, 64, 32), [p[4:20, 8:40] if k else p[8:40, 16:80] for k, p in enumerate(planes)],
                             f"crop of frame {i}"))
            elif what == "numpy":
                kept.append((np.asarray(f[0]), planes[:1], f"numpy Y of frame {i}"))
            else:
                kept.append((interop.map(f, MemoryType[what], allow_copy=True), planes, f"{what} of frame {i}"))
            del f, vf
            if i % 7 == 0:
                gc.collect()
            if len(kept) > 12:  # drop some views as we go, in random order
                kept.pop(rng.randrange(len(kept)))
            for obj, want, label in kept:  # every kept view still reads its own frame
                if isinstance(obj, np.ndarray):
                    assert np.array_equal(obj, want[0]), f"{label} changed after more frames were decoded"
                else:
                    B.assert_content(obj, want, f"{label} after more frames were decoded")
            stats.add("lifetimes: decoded frames checked")


def test_pool_buffer_not_reused_while_a_numpy_view_reads_it():
    """A numpy view of a pool frame's CPU mapping keeps reading that frame after the mapping and the frame are
    released: the pool must not hand the buffer out again (acquire waits or times out instead)."""
    try:
        FramePool = B.need_attr("interop.tensors.dma", "FramePool", "the DMA backend")
    except B.Missing as e:
        pytest.skip(str(e))
    pool = FramePool(interop.FrameFormat.GRAY8, 16, 8, count=1)
    try:
        f = pool.acquire(timeout=5)
        w = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE)
        np.asarray(w[0])[...] = 7
        w.release()
        pool.commit(f)
        cpu = interop.map(f, MemoryType.CPU)
        view = np.asarray(cpu[0])
        f.release()
        cpu.release()
        del cpu, f, w
        gc.collect()
        try:
            f2 = pool.acquire(timeout=0.2)
        except TimeoutError:
            f2 = None  # the right outcome: the buffer is still in use by the view
        if f2 is not None:
            w2 = interop.map(f2, MemoryType.CPU, mode=AccessMode.WRITE)
            np.asarray(w2[0])[...] = 99
            w2.release()
            f2.release()
        assert np.all(view == 7), f"a live numpy view now reads another frame's data: {view[0, :4]}"
    finally:
        pool.close()


def _scribble(obj: Tensor | Frame) -> None:
    """Overwrite an object's content with 0x5A through a READ_WRITE CPU mapping (written back at release)."""
    cpu = interop.map(obj, MemoryType.CPU, mode=AccessMode.READ_WRITE, allow_copy=True)
    for t in B.planes_of(cpu):
        a = np.asarray(t)
        if a.flags.writeable:
            a.view(np.uint8)[...] = 0x5A if a.dtype.itemsize == 1 or a.flags.c_contiguous else 0
    cpu.release()


@pytest.mark.parametrize("kind", sorted(k for k in B.FACTORIES if not k.startswith("via:")))
def test_mappings_survive_source_release_and_reuse(kind):
    """Map a source everywhere it can go, release and drop the source, then allocate and scribble over many new
    objects of the same kind and size (so pools and allocators hand the freed memory out again). Each mapping
    still reads the source's content, or refuses with InvalidTensorError; it never reads the new objects' bytes."""
    mt = MemoryType[B.require_kind(kind)]
    route = B.runnable_chain(mt, MemoryType.CPU)
    assert not isinstance(route, str), f"{kind}: no runnable route to the CPU to scribble through: {route}"
    kept = []
    for seed, dst in enumerate(B.runnable_destinations(mt) + [None]):
        made = B.make(kind, np.random.default_rng(seed))
        try:
            out = made.obj if dst is None else interop.map(made.obj, dst, allow_copy=True)
            views = [np.asarray(t) for t in B.planes_of(out)] if dst is None else []
        except InteropError:
            B.release(made.obj)
            continue
        if dst is not None:
            made.obj.release()
            kept.append((out, made.expected, f"{kind}->{dst.name}"))
        else:
            kept += [(v, [e], f"numpy view of a released {kind}") for v, e in zip(views, made.expected)]
            made.obj.release()
        del made, out, views
        gc.collect()
        for _ in range(6):  # same kind, same size: what an allocator or pool reuses first
            churn = B.make(kind, np.random.default_rng(seed))
            _scribble(churn.obj)
            churn.obj.release()
            del churn
    assert kept, f"{kind}: nothing could be mapped"
    for obj, want, label in kept:
        if isinstance(obj, np.ndarray):
            assert np.array_equal(obj, want[0]), f"{label} reads other data after its memory was reused"
            continue
        try:
            B.assert_content(obj, want, f"{label} after its source was released and memory reused")
        except InvalidTensorError:
            stats.add("lifetimes: reads refused after a source release")
            continue
        stats.add("lifetimes: mappings checked after source release + reuse")


_EXIT_PROBE = """
import faulthandler
faulthandler.dump_traceback_later(100, exit=True)  # a hang at exit prints every thread's stack, then fails
import sys, threading, numpy as np, interop
from interop import MemoryType
from tests.reliability import backends as B
ok, _ = B.probe_factories()
KEEP = []
for kind in sorted(ok):
    m = B.make(kind, np.random.default_rng(0))
    KEEP.append(m.obj)
    for d in B.runnable_destinations(MemoryType[ok[kind]]):
        try:
            KEEP.append(interop.map(m.obj, d, allow_copy=True))
        except interop.InteropError:
            pass
    try:
        KEEP.append(np.asarray(B.planes_of(m.obj)[0]))
    except interop.InteropError:
        pass
cycle = {"objs": KEEP}
cycle["self"] = cycle  # only the collector at exit can free these
try:
    import openvino as ov
    from openvino import opset13 as ops
    x = ops.parameter([1, 3, 64, 64], np.float32, name="x")
    inf = interop.Inference(ov.Model([ops.relu(x)], [x], "relu"), "CPU")
    for _ in range(8):  # still running at exit
        inf.infer_async(np.ones((1, 3, 64, 64), np.float32), lambda o, u: None)
except ImportError:
    pass
# OPENCV_UMAT is left out: OpenCV's own UMat calls in a daemon thread at exit abort the process
# ("terminate called without an active exception") even without interop (see docs/reliability.md)
DESTS = [d for d in B.runnable_destinations(MemoryType.CPU) if d is not MemoryType.OPENCV_UMAT]
def churn():
    a = np.zeros((32, 32), np.uint8)
    while True:
        for d in DESTS:
            try:
                interop.map(a, d, allow_copy=True)
            except interop.InteropError:
                pass
threading.Thread(target=churn, daemon=True).start()  # mapping while the interpreter shuts down
print("LIVE", len(KEEP), flush=True)
"""


# The child dumps every thread's stack if it hangs. It once hung before exiting: a collection inside find_mapping
# finalised a DMA mapping whose finaliser waited on the lock its own thread held (tests/test_finalizer_locks.py).
def test_interpreter_exit_with_everything_alive():
    """A process that exits while tensors of every kind, their mappings, numpy views, reference cycles, pending
    async inferences and a thread that is mapping are all alive exits cleanly: status 0, no crash, nothing
    printed on stderr (no 'Exception ignored', no traceback, no abort)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _attempt in range(3):
        out = subprocess.run([sys.executable, "-c", _EXIT_PROBE], capture_output=True, text=True, timeout=150,
                             cwd=root, env={**os.environ, "PYTHONPATH": root})
        assert out.returncode == 0, f"exit status {out.returncode}; stderr: {out.stderr[-2000:]}"
        assert "LIVE" in out.stdout
        noise = [ln for ln in out.stderr.splitlines() if ln.strip() and "Warning" not in ln]
        assert not noise, f"stderr at exit: {noise[:10]}"
        stats.add("lifetimes: interpreter exits with live objects")


# ---- OpenCV UMat -> CPU: views outlive release() -----------------------------------------------------------


def test_umat_view_outlives_release():
    """A CPU view of a UMat mapping outlives release() and the UMat: unmapped when the last view is gone."""
    from interop.tensors.opencl import mapped_count

    umat_context()
    import cv2

    src = np.arange(64 * 48, dtype=np.uint8).reshape(48, 64)
    u = cv2.UMat(src)
    gc.collect()
    before = mapped_count()
    c = interop.map(interop.wrap(u), MemoryType.CPU)
    v = c.numpy()
    c.release()
    del u
    gc.collect()
    assert mapped_count() == before + 1
    np.testing.assert_array_equal(v, src)
    del v
    assert mapped_count() == before
