"""Concurrency: 8 threads mapping and releasing through the shared default contexts, a collector thread running
gc.collect() meanwhile, and Inference.infer_async fed from several threads. Results are checked against the
content recorded at creation; every join has a timeout that fails the test (a deadlock is a failure, not a hang).
"""

from __future__ import annotations

import gc
import random
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import interop
from interop import AccessMode, InteropError, MemoryType
from tests.reliability import backends as B
from tests.reliability import stats

THREADS = 8
JOIN_TIMEOUT = 90.0


def run_threads(target: Callable[[int], None], n: int = THREADS, *, collector: bool = True) -> None:
    """Start ``n`` threads on ``target(i)`` together (and a gc.collect() thread); fail on any error or on a
    thread still running after JOIN_TIMEOUT seconds."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n + (1 if collector else 0))
    done = threading.Event()

    def wrapped(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            target(i)
        except BaseException as e:  # noqa: B036 - reported by the main thread
            errors.append(e)

    def collect() -> None:
        try:
            barrier.wait(timeout=30)
            while not done.is_set():
                gc.collect()
                stats.add("concurrency: gc.collect under load")
                time.sleep(0.005)
        except BaseException as e:  # noqa: B036
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,), daemon=True, name=f"worker-{i}") for i in range(n)]
    gc_thread = threading.Thread(target=collect, daemon=True, name="collector") if collector else None
    for t in threads + ([gc_thread] if gc_thread else []):
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    done.set()
    if gc_thread:
        gc_thread.join(timeout=10)
    stuck = [t.name for t in threads + ([gc_thread] if gc_thread else []) if t.is_alive()]
    assert not stuck, f"deadlock: {stuck} still running after {JOIN_TIMEOUT} s"
    if errors:
        raise errors[0]


def _pairs() -> list[tuple[str, MemoryType]]:
    """(factory kind, destination) for every native factory here and every runnable destination from it."""
    ok, _ = B.probe_factories()
    out = []
    for kind, mt in sorted(ok.items()):
        if kind.startswith("via:"):
            continue
        for dst in B.runnable_destinations(MemoryType[mt]):
            out.append((kind, dst))
    return out


def test_threads_map_and_release_shared_sources():
    """All threads map the SAME source objects (one per kind) along every runnable route at once."""
    pairs = _pairs()
    assert pairs, f"no runnable route between memory types here (broken factories: {B.broken() or 'none'})"
    sources = {kind: B.make(kind, np.random.default_rng(11)) for kind in {k for k, _ in pairs}}
    cycles = max(2, 160 // len(pairs))

    def work(i: int) -> None:
        rng = random.Random(i)
        order = pairs * cycles
        rng.shuffle(order)
        for kind, dst in order:
            src = sources[kind]
            try:
                out = interop.map(src.obj, dst, allow_copy=True)
            except InteropError as e:  # an input a backend refuses is refused the same way on every thread
                stats.add(f"concurrency: refused {type(e).__name__}")
                continue
            B.assert_content(out, src.expected, f"{kind}->{dst.name}")
            stats.add("concurrency: maps checked")
            if rng.random() < 0.5:
                B.release(out)
            del out

    fds = B.fd_count()
    run_threads(work)
    for kind, s in sources.items():  # the shared sources are intact after all that
        B.assert_content(s.obj, s.expected, f"shared {kind} source after the threads")
        B.release(s.obj)
    sources.clear()
    B.settle()
    assert B.fd_count() <= fds, "fds leaked by concurrent mappings"


def test_threads_own_sources_zero_copy_mappers():
    """Each thread makes its own sources and maps them through every runnable zero-copy mapper; no copies."""
    mappers, skipped = B.zero_copy_mappers()
    ok, _ = B.probe_factories()
    plan = []
    for cls in mappers:
        kinds = [k for k, mt in ok.items() if mt == cls.src.name and not k.startswith("via:")]
        kinds += [k for k, mt in ok.items() if mt == cls.src.name and k.startswith("via:")]
        if kinds:
            plan.append((cls, kinds))
    assert plan, f"no zero-copy mapper can run here (not runnable: {skipped}; broken factories: {B.broken() or 'none'})"
    live0, _ = B.live_counts()

    def work(i: int) -> None:
        rng = np.random.default_rng(100 + i)
        for _ in range(3):
            for cls, kinds in plan:
                for kind in kinds:
                    made = B.make(kind, rng)
                    try:
                        out = cls().map(made.obj, AccessMode.READ)
                    except InteropError:
                        B.release(made.obj)
                        continue  # this mapper takes another shape of input (frames vs tensors)
                    B.assert_content(out, made.expected, f"{cls.name} on {kind}")
                    stats.add("concurrency: zero-copy maps checked")
                    B.release(out)
                    B.release(made.obj)
                    break

    with interop.copy_meter() as meter:
        run_threads(work)
    B.settle()
    copies = [r for r in meter.records if r.mapper in {c.name for c, _ in plan}]
    assert not copies, f"zero-copy mappers copied under concurrency: {copies[:3]}"
    live, _ = B.live_counts()
    assert live == live0, f"live allocations {live0} -> {live} after concurrent map/release"


def test_copy_meter_counts_every_thread():
    """A copying route used by 8 threads at once: the meter sees exactly threads x cycles copies."""
    ok, _ = B.probe_factories()
    for dst in MemoryType:
        chain = B.runnable_chain(MemoryType.CPU, dst)
        if not isinstance(chain, str) and not chain.zero_copy:
            break
    else:
        pytest.fail("no copying route from the CPU can run here (tier A backends are all present: there must be one)")
    a = np.arange(64 * 48, dtype=np.uint8).reshape(64, 48)
    try:
        probe = interop.map(a, dst, allow_copy=True)
    except InteropError as e:
        B.skip_if_lacking_hardware(e, f"CPU -> {dst.name}")
        pytest.fail(f"CPU -> {dst.name} refuses a plain image: {type(e).__name__}: {e}")
    with interop.copy_meter() as one:
        B.release(interop.map(a, dst, allow_copy=True))
    B.release(probe)
    per = one.copies
    n = 20

    def work(i: int) -> None:
        for _ in range(n):
            B.release(interop.map(a, dst, allow_copy=True))

    with interop.copy_meter() as meter:
        run_threads(work, collector=False)
    assert meter.copies == per * n * THREADS and meter.bytes == one.bytes * n * THREADS


# ---- inference ----------------------------------------------------------------------------------------------


@pytest.fixture
def relu_inference():
    """An Inference of a 1x3x8x8 relu model on OpenVINO's CPU device, closed after the test; skips without OpenVINO."""
    try:
        B.need_attr("interop.inference", "Inference", "interop/inference.py")
        ov = B.need_module("openvino", "OpenVINO")
    except B.Missing as e:
        pytest.skip(str(e))
    from openvino import opset13 as ops  # type: ignore[import-not-found]

    x = ops.parameter([1, 3, 8, 8], np.float32, name="x")
    inf = interop.Inference(ov.Model([ops.relu(x)], [x], "relu"), "CPU")
    try:
        yield inf
    finally:
        inf.close()


def test_infer_async_from_several_threads(relu_inference):
    """4 threads x 25 infer_async calls on one Inference: every callback gets its own input's result."""
    inf = relu_inference
    results: dict[tuple[int, int], np.ndarray] = {}
    lock = threading.Lock()
    per = 25

    def cb(outputs, userdata) -> None:
        (out,) = outputs.values()
        with lock:
            results[userdata] = out

    def work(i: int) -> None:
        for j in range(per):
            x = np.full((1, 3, 8, 8), float(i * 100 + j) - 50.0, np.float32)
            x[0, 0, 0, 0] = -1.0
            inf.infer_async(x, cb, (i, j))

    run_threads(work, 4)
    inf.wait_all(timeout=JOIN_TIMEOUT)
    assert len(results) == 4 * per
    for (i, j), out in results.items():
        want = np.full((1, 3, 8, 8), max(float(i * 100 + j) - 50.0, 0.0), np.float32)
        want[0, 0, 0, 0] = 0.0
        np.testing.assert_array_equal(out, want)
    stats.add("concurrency: async inferences checked", len(results))
    # infer() from several threads at once on the same Inference
    got: dict[int, np.ndarray] = {}

    def sync(i: int) -> None:
        for _ in range(5):
            out = inf.infer(np.full((1, 3, 8, 8), float(i), np.float32))
            got[i] = next(iter(out.values()))

    run_threads(sync, 4, collector=False)
    for i, out in got.items():
        assert np.all(out == float(i))


def test_infer_async_callback_error_reraised_by_wait_all(relu_inference):
    """A callback that raises on OpenVINO's thread does not hang anything: wait_all() re-raises it."""
    inf = relu_inference

    def bad(outputs, userdata) -> None:
        raise RuntimeError(f"callback {userdata} failed")

    for k in range(6):
        inf.infer_async(np.zeros((1, 3, 8, 8), np.float32), bad, k)
    with pytest.raises(RuntimeError, match="callback .* failed"):
        inf.wait_all(timeout=JOIN_TIMEOUT)
    inf.wait_all(timeout=JOIN_TIMEOUT)  # errors are reported once
    stats.add("faults: callback exceptions injected", 6)


def test_release_races_with_maps():
    """One thread releases a source while others map it and read the mappings: each map either gives a mapping
    that reads the source's content or refuses with an InteropError (InvalidTensorError once released); nothing
    else is raised, nothing hangs, nothing leaks."""
    pairs = _pairs()
    assert pairs, f"no runnable route between memory types here (broken factories: {B.broken() or 'none'})"
    kinds = sorted({k for k, _ in pairs})
    outcomes: dict[str, int] = {"mapped": 0, "refused": 0}
    lock = threading.Lock()
    B.settle()
    fds = B.fd_count()
    live0, _ = B.live_counts()
    for r in range(12):
        kind = kinds[r % len(kinds)]
        dests = [d for k, d in pairs if k == kind]
        src = B.make(kind, np.random.default_rng(r))

        def work(i: int, src: B.Made = src, dests: list[MemoryType] = dests, r: int = r, kind: str = kind) -> None:
            if i == 0:
                time.sleep(0.001 * (r % 4))
                src.obj.release()
                return
            for j in range(4):
                dst = dests[(i + j) % len(dests)]
                try:
                    out = interop.map(src.obj, dst, allow_copy=True)
                    ok = B.content_matches(out, src.expected)
                except InteropError:
                    with lock:
                        outcomes["refused"] += 1
                    continue
                assert ok is True or (ok is None and not B.cpu_readable(dst)), \
                    f"{kind}->{dst.name} read {ok} (not the source's data) while its source was being released"
                with lock:
                    outcomes["mapped"] += 1
                B.release(out)

        run_threads(work, 5, collector=False)
        del src
    B.settle()
    stats.add("concurrency: release races", 12)
    stats.add("concurrency: maps during release races", outcomes["mapped"] + outcomes["refused"])
    assert outcomes["mapped"] and outcomes["refused"], outcomes  # both sides of the race were hit
    assert B.fd_count() <= fds and B.live_counts()[0] == live0, "leak after release races"


def test_infer_async_frames_of_several_layouts_from_threads():
    """4 threads feed FFmpeg frames of 3 layouts (I420/NV12, two sizes) to one Inference at once, so the per-layout
    pre-processing variants are compiled concurrently: every result equals the single-threaded one."""
    try:
        B.need_attr("interop.inference", "Inference", "interop/inference.py")
        ov = B.need_module("openvino", "OpenVINO")
        av = B.need_module("av", "PyAV")
        B.need_module("interop.tensors.ffmpeg", "the FFmpeg backend")
    except B.Missing as e:
        pytest.skip(str(e))
    from openvino import opset13 as ops  # type: ignore[import-not-found]

    x = ops.parameter([1, 3, 16, 16], np.float32, name="image")
    model = ov.Model([ops.reduce_mean(x, np.array([2, 3], np.int64), False)], [x], "mean")
    layouts = [("yuv420p", 64, 48), ("nv12", 64, 48), ("yuv420p", 40, 30)]
    frames = []
    for k in range(12):
        fmt, w, h = layouts[k % len(layouts)]
        img = np.zeros((h, w, 3), np.uint8)
        img[..., 0], img[..., 1], img[..., 2] = 10 * k % 256, 255 - 7 * k, (3 * k * k) % 256
        vf = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format=fmt)
        vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user-made frames are not)
        frames.append(interop.wrap(vf))
    with interop.Inference(model, "CPU") as ref_inf:
        want = [next(iter(ref_inf.infer(f).values())).copy() for f in frames]
    assert len({np.round(w, 1).tobytes() for w in want}) == len(frames), "the frames must give distinct results"
    inf = interop.Inference(model, "CPU")
    got: dict[tuple[int, int], np.ndarray] = {}
    lock = threading.Lock()

    def cb(outputs, userdata) -> None:
        with lock:
            got[userdata] = next(iter(outputs.values()))

    def work(i: int) -> None:
        for r in range(3):
            for k in range(len(frames)):
                inf.infer_async(frames[(k + i) % len(frames)], cb, (i, r * 100 + (k + i) % len(frames)))

    try:
        run_threads(work, 4)
        inf.wait_all(timeout=JOIN_TIMEOUT)
    finally:
        inf.close()
    assert len(got) == 4 * 3 * len(frames)
    for (_, key), out in got.items():
        np.testing.assert_allclose(out, want[key % 100], rtol=1e-5, atol=1e-4)
    stats.add("concurrency: async frame inferences checked", len(got))
