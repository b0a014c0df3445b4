"""route(obj, dst) predicts what map(obj, dst) does (issue 16, point 4): for every registered edge that can run
here, every input kind this machine can make for its source type and every access mode, with and without
allow_copy: the same error class, or a zero-copy map (nothing on the copy meter), or a counted copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InteropError
from interop.mapper import Cost, registered
from tests.support.requirements import need_module

U8 = np.uint8


def _cpu_kinds() -> dict[str, Callable[[], Any]]:
    def read_only() -> Any:
        a = np.zeros((16, 32), U8)
        a.flags.writeable = False
        return interop.wrap(a)

    return {
        "cpu tensor": lambda: interop.wrap(np.zeros((16, 32), U8)),
        "cpu rgb tensor": lambda: interop.wrap(np.zeros((16, 32, 3), U8)),
        "cpu column-strided tensor": lambda: interop.wrap(np.zeros((16, 64, 3), U8)[:, ::2]),
        "cpu read-only tensor": read_only,
        "cpu nv12 frame": lambda: interop.wrap(np.zeros((24, 32), U8), format=FrameFormat.NV12),
        "cpu i420 frame": lambda: interop.wrap(np.zeros((24, 32), U8), format=FrameFormat.I420),
    }


def _ffmpeg_kinds() -> dict[str, Callable[[], Any]]:
    av = need_module("av")

    def decoded(fmt: str) -> Callable[[], Any]:
        return lambda: interop.wrap(av.VideoFrame(32, 24, fmt))  # a frame interop does not own: read-only

    return {"ffmpeg yuv420p frame": decoded("yuv420p"), "ffmpeg nv12 frame": decoded("nv12"),
            "ffmpeg rgb24 frame": decoded("rgb24")}


def _dma_kinds() -> dict[str, Callable[[], Any]]:
    from interop.tensors.dma import FramePool

    pools: dict[str, Any] = {}

    def frame(fmt: FrameFormat) -> Callable[[], Any]:
        def make() -> Any:
            pool = pools.get(fmt.name)
            if pool is None:
                pool = pools[fmt.name] = FramePool(fmt, 32, 24, 4)
            return pool.acquire(timeout=5)
        return make

    return {"dma nv12 frame": frame(FrameFormat.NV12), "dma i420 frame": frame(FrameFormat.I420)}


def _opencv_kinds() -> dict[str, Callable[[], Any]]:
    cv2 = need_module("cv2")
    return {"opencv mat": lambda: interop.wrap(cv2.Mat(np.zeros((16, 32), U8)))}


def _gst_kinds() -> dict[str, Callable[[], Any]]:
    need_module("gi")
    from interop.tensors.gst import gst

    Gst = gst()
    samples: dict[str, Any] = {}

    def sample(caps: str) -> Callable[[], Any]:
        def make() -> Any:
            s = samples.get(caps)
            if s is None:  # one pipeline run per caps: a sample wraps into a new frame every time
                pipe = Gst.parse_launch(f"videotestsrc num-buffers=1 ! {caps} ! appsink name=sink")
                pipe.set_state(Gst.State.PLAYING)
                s = samples[caps] = pipe.get_by_name("sink").emit("try-pull-sample", 5 * Gst.SECOND)
                pipe.set_state(Gst.State.NULL)
                assert s is not None, f"videotestsrc made no {caps} sample"
            return interop.wrap(s)
        return make

    # NV12 64x48: rows packed; RGB 50x48: rows padded to 152 bytes, not a whole number of pixels
    return {"gst nv12 sample": sample("video/x-raw,format=NV12,width=64,height=48"),
            "gst rgb sample": sample("video/x-raw,format=RGB,width=50,height=48")}


KINDS: dict[MemoryType, Callable[[], dict[str, Callable[[], Any]]]] = {
    MemoryType.CPU: _cpu_kinds, MemoryType.FFMPEG: _ffmpeg_kinds, MemoryType.DMA: _dma_kinds,
    MemoryType.OPENCV: _opencv_kinds, MemoryType.GST: _gst_kinds,
}


def _cases() -> list[tuple[str, MemoryType, MemoryType]]:
    out = []
    for (src, dst), cls in sorted(registered().items(), key=lambda kv: kv[1].name):
        if src in KINDS and cls.tier == "A" and cls.missing() is None:
            out.append((cls.name, src, dst))
    return out


CASES = _cases()


def _tier_a(mt: MemoryType) -> bool:
    """A destination every machine has: some tier-A edge leads into it."""
    return any(cls.tier == "A" for (_, dst), cls in registered().items() if dst is mt)


def _routes() -> list[tuple[str, MemoryType, MemoryType]]:
    """Every (source, destination) pair with a route but no edge of its own: routes of several steps."""
    out = []
    edges = registered()
    for src in KINDS:
        for dst in MemoryType:
            if dst is not src and (src, dst) not in edges and interop.routing._ranked(src, dst) and \
                    _tier_a(dst):
                out.append((f"{src.value}->{dst.value}", src, dst))
    return out


ROUTES = _routes()

# Steps of a predicted chain (consecutive step names) -> why route() and map() disagree on it today, and what removes
# it. Delete an entry with its fix.
KNOWN_DISAGREEMENTS: dict[tuple[str, ...], str] = {
}


def _known(chain: Any) -> bool:
    names = tuple(m.name for m in chain.mappers) if chain is not None else ()
    return any(names[i:i + len(k)] == k for k in KNOWN_DISAGREEMENTS for i in range(len(names)))


def _predict(obj: Any, dst: MemoryType, mode: AccessMode, allow_copy: bool) -> tuple[str, Any]:
    try:
        chain = interop.route(obj, dst, mode=mode, allow_copy=allow_copy)
        return ("copy" if chain.cost(obj, mode) is Cost.COPY else "zero-copy"), chain
    except InteropError as e:
        return type(e).__name__, None


def _run(obj: Any, dst: MemoryType, mode: AccessMode, allow_copy: bool) -> str:
    try:
        with interop.copy_meter() as m:
            out = interop.map(obj, dst, mode=mode, allow_copy=allow_copy)
            if out is not obj:
                out.release()  # WRITE mappings copy back at release: counted here
    except InteropError as e:
        return type(e).__name__
    return "copy" if m.copies else "zero-copy"


@pytest.mark.parametrize("name,src,dst", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_route_predicts_map(name: str, src: MemoryType, dst: MemoryType, data: st.DataObject) -> None:
    kinds = KINDS[src]()
    kind = data.draw(st.sampled_from(sorted(kinds)), label="input kind")
    mode = data.draw(st.sampled_from(list(AccessMode)), label="mode")
    allow_copy = data.draw(st.booleans(), label="allow_copy")
    predicted, chain = _predict(kinds[kind](), dst, mode, allow_copy)
    got = _run(kinds[kind](), dst, mode, allow_copy)
    if got != predicted and _known(chain):
        return  # named in KNOWN_DISAGREEMENTS, with its reason
    assert got == predicted, f"{kind} -> {dst.name} mode={mode.name} allow_copy={allow_copy}: route said " \
                             f"{predicted} ({chain!r}), map did {got}"


@pytest.mark.parametrize("name,src,dst", ROUTES, ids=[c[0] for c in ROUTES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_route_predicts_map_over_several_steps(name: str, src: MemoryType, dst: MemoryType,
                                               data: st.DataObject) -> None:
    """The later steps of a route are costed for the input they really get (GST -> CPU -> OPENVINO is zero-copy
    for a packed NV12 sample, and a copy for an RGB one whose rows are not whole pixels)."""
    test_route_predicts_map.hypothesis.inner_test(name, src, dst, data)  # type: ignore[attr-defined]


def test_gst_sample_to_openvino_is_zero_copy() -> None:
    sample = _gst_kinds()["gst nv12 sample"]
    chain = interop.route(sample(), MemoryType.OPENVINO)
    assert [m.name for m in chain.mappers] == ["gst_to_cpu", "cpu_to_openvino"]
    assert chain.cost(sample()) is Cost.ZERO_COPY
    with interop.copy_meter() as m:
        out = interop.map(sample(), MemoryType.OPENVINO)
    assert m.copies == 0 and out.memory_type is MemoryType.OPENVINO and len(out) == 2
    with pytest.raises(interop.CopyRequiredError, match="cpu_to_openvino"):
        interop.map(_gst_kinds()["gst rgb sample"](), MemoryType.OPENVINO)  # rows of 152 bytes: 50.67 pixels


def test_every_kind_maker_makes_its_type() -> None:
    for src, make in KINDS.items():
        try:
            kinds = make()
        except pytest.skip.Exception:
            continue
        for name, fn in kinds.items():
            assert fn().memory_type is src, name
