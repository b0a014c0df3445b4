"""Tensor factories per memory type, and the probes the reliability tests share.

A factory makes a Tensor or Frame of one memory type from random content and returns it with the content it
must read back (``expected``, one array per plane, taken from the generated data, not through interop) and a
fingerprint of that content. A factory raises ``Missing`` only when tier B/C hardware (CUDA, VA-API, Level Zero,
NPU) is absent here, or a third-party module whose absence the skip policy (tests/support/requirements.py) lets
skip, so the tests skip naming it (or, in the state machine, pick another kind). Anything else a factory raises (an ImportError inside interop, an InteropError of a tier A
backend, a bug) is a failure: ``probe_factories`` files it under ``broken`` and ``require_kind`` fails on it.

Native factories build the framework's own object (av.VideoFrame, cv2.Mat, cv2.UMat, pyopencl Buffer, dpctl
USM memory, a memfd) and hand it to ``interop.wrap`` (or ``DMATensor.from_fd``); ``via:<TYPE>`` factories
reach every other memory type that has a runnable route from the CPU (``interop.map(..., allow_copy=True)``).
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import interop
from interop import (
    Frame,
    FrameFormat,
    InteropError,
    MemoryType,
    NoRouteError,
    Tensor,
    TensorInfo,
)
from tests.support import requirements


class Missing(Exception):
    """A third-party module or tier B/C hardware a factory needs is absent here; the message names it."""


# which errors mean absent tier B/C hardware: the one skip policy's answer (tests/support/requirements.py)
lacking_hardware = requirements.lacking_hardware


def skip_if_lacking_hardware(e: BaseException, what: str) -> None:
    """Skip naming the absent tier B/C hardware when ``e`` reports it; otherwise return (the caller fails)."""
    hw = lacking_hardware(e)
    if hw is not None:
        pytest.skip(f"{what}: this machine has no {hw} ({type(e).__name__}: {e})")


@dataclass
class Made:
    kind: str
    obj: Tensor | Frame
    expected: list[np.ndarray]
    fingerprint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fingerprint = fingerprint(self.expected)


def fingerprint(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(repr((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


# ---- which backends are here ------------------------------------------------------------------------------


def _ours(name: str) -> bool:
    return name == "interop" or name.startswith("interop.")


def need_module(name: str, what: str) -> Any:
    """Import ``name``. Raise Missing naming ``what`` only when a third-party module is not installed; every
    other import error (a module of interop missing or failing to import) propagates: it is a failure."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and not _ours(e.name) and not _tier_a_required(e.name):
            raise Missing(f"{what} is not here (the third-party module {e.name} is not installed)") from e
        raise


def _tier_a_required(module: str) -> bool:
    """Whether ``module`` belongs to a tier A backend that the skip policy requires here (then its absence is a
    failure: the factory is broken, not missing)."""
    backend = requirements.MODULE_BACKEND.get(module.split(".")[0])
    return backend is not None and requirements.backend(backend).tier == "A" and requirements.strict()


def need_attr(modname: str, attr: str, what: str) -> Any:
    """``modname.attr``; an attribute missing from a module of interop is a failure (AttributeError)."""
    mod = need_module(modname, what)
    if not hasattr(mod, attr) and not _ours(modname):
        raise Missing(f"{what}: this {modname} has no {attr}")
    return getattr(mod, attr)


# ---- content ----------------------------------------------------------------------------------------------

AV_FORMATS = {FrameFormat.I420: "yuv420p", FrameFormat.NV12: "nv12", FrameFormat.RGB: "rgb24",
              FrameFormat.BGR: "bgr24", FrameFormat.GRAY8: "gray"}
FRAME_FORMATS = list(AV_FORMATS)
TENSOR_DTYPES = [np.uint8, np.int16, np.uint16, np.int32, np.float32, np.float64]


def random_image(rng: np.random.Generator, fmt: FrameFormat, w: int, h: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """A packed buffer as av/interop take it ((H*3/2, W) for YUV 4:2:0, (H, W[, C]) else) and its planes."""
    if fmt in (FrameFormat.I420, FrameFormat.NV12):
        packed = rng.integers(0, 256, (h * 3 // 2, w), dtype=np.uint8)
        flat = packed.ravel()
        y = flat[: w * h].reshape(h, w)
        if fmt is FrameFormat.I420:
            q = (w // 2) * (h // 2)
            u = flat[w * h: w * h + q].reshape(h // 2, w // 2)
            v = flat[w * h + q: w * h + 2 * q].reshape(h // 2, w // 2)
            return packed, [y.copy(), u.copy(), v.copy()]
        return packed, [y.copy(), flat[w * h:].reshape(h // 2, w // 2, 2).copy()]
    c = {FrameFormat.RGB: 3, FrameFormat.BGR: 3, FrameFormat.GRAY8: 0}[fmt]
    shape = (h, w, c) if c else (h, w)
    packed = rng.integers(0, 256, shape, dtype=np.uint8)
    return packed, [packed.copy()]


def random_array(rng: np.random.Generator, dtypes: list[Any] | None = None, max_side: int = 24) -> np.ndarray:
    dt = np.dtype(dtypes[int(rng.integers(len(dtypes)))] if dtypes else TENSOR_DTYPES[int(rng.integers(len(TENSOR_DTYPES)))])
    nd = int(rng.integers(1, 4))
    shape = tuple(int(x) for x in rng.integers(1, max_side, nd))
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=dt)


def even_size(rng: np.random.Generator, lo: int = 2, hi: int = 40) -> tuple[int, int]:
    return 2 * int(rng.integers(lo // 2, hi // 2 + 1)), 2 * int(rng.integers(lo // 2, hi // 2 + 1))


# ---- factories --------------------------------------------------------------------------------------------

Factory = Callable[[np.random.Generator], Made]
FACTORIES: dict[str, tuple[MemoryType, Factory]] = {}


def factory(name: str, memory_type: MemoryType) -> Callable[[Factory], Factory]:
    def deco(fn: Factory) -> Factory:
        FACTORIES[name] = (memory_type, fn)
        return fn

    return deco


@factory("cpu-tensor", MemoryType.CPU)
def _cpu_tensor(rng: np.random.Generator) -> Made:
    a = random_array(rng)
    return Made("cpu-tensor", interop.wrap(a), [a.copy()])


@factory("cpu-frame", MemoryType.CPU)
def _cpu_frame(rng: np.random.Generator) -> Made:
    fmt = FRAME_FORMATS[int(rng.integers(len(FRAME_FORMATS)))]
    w, h = even_size(rng)
    packed, planes = random_image(rng, fmt, w, h)
    return Made("cpu-frame", interop.wrap(packed, format=fmt), planes)


@factory("ffmpeg-frame", MemoryType.FFMPEG)
def _ffmpeg_frame(rng: np.random.Generator) -> Made:
    need_module("interop.tensors.ffmpeg", "the FFmpeg backend (interop/tensors/ffmpeg.py)")
    av = need_module("av", "PyAV")
    fmt = FRAME_FORMATS[int(rng.integers(len(FRAME_FORMATS)))]
    w, h = even_size(rng, 4, 48)
    packed, planes = random_image(rng, fmt, w, h)
    vf = av.VideoFrame.from_ndarray(packed, format=AV_FORMATS[fmt])
    f = interop.wrap(vf)
    return Made("ffmpeg-frame", f, planes)


@factory("opencv-mat", MemoryType.OPENCV)
def _opencv_mat(rng: np.random.Generator) -> Made:
    need_module("interop.tensors.opencv", "the OpenCV backend (interop/tensors/opencv.py)")
    cv2 = need_module("cv2", "OpenCV")
    if not hasattr(cv2, "Mat"):
        raise Missing("this OpenCV has no cv2.Mat")
    a = random_array(rng, [np.uint8, np.float32], 32)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    return Made("opencv-mat", interop.wrap(cv2.Mat(a)), [a.copy()])


@factory("opencv-umat", MemoryType.OPENCV_UMAT)
def _opencv_umat(rng: np.random.Generator) -> Made:
    need_module("interop.tensors.opencv", "the OpenCV backend (interop/tensors/opencv.py)")
    cv2 = need_module("cv2", "OpenCV")
    w, h = even_size(rng, 2, 48)
    a = rng.integers(0, 256, (h, w, 3) if rng.integers(2) else (h, w), dtype=np.uint8)
    u = cv2.UMat(a)
    return Made("opencv-umat", interop.wrap(u), [a.copy()])


@factory("opencl-buffer", MemoryType.OPENCL)
def _opencl_buffer(rng: np.random.Generator) -> Made:
    need_module("interop.tensors.opencl", "the OpenCL backend (interop/tensors/opencl.py)")
    cl = need_module("pyopencl", "pyopencl")
    ctx = default_context(MemoryType.OPENCL)
    clctx = ctx.native
    if not isinstance(clctx, cl.Context):
        clctx = getattr(ctx, "cl_context", None)
    if not isinstance(clctx, cl.Context):
        raise AssertionError(f"cannot find the pyopencl Context of {ctx!r} (.native is {type(ctx.native).__name__})")
    a = random_array(rng, [np.uint8, np.float32, np.int32])
    buf = cl.Buffer(clctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
    t = interop.wrap(buf, info=TensorInfo(a.shape, a.dtype), context=ctx)
    return Made("opencl-buffer", t, [a.copy()])


@factory("usm-shared", MemoryType.USM)
def _usm_shared(rng: np.random.Generator) -> Made:
    need_module("interop.tensors.usm", "the USM backend (interop/tensors/usm.py)")
    dpm = need_module("dpctl.memory", "dpctl")
    ctx = default_context(MemoryType.USM)
    a = random_array(rng, [np.uint8, np.float32, np.int16])
    q = ctx.native if type(ctx.native).__name__ == "SyclQueue" else getattr(ctx, "queue", None)
    mem = dpm.MemoryUSMShared(max(a.nbytes, 1), queue=q) if q is not None else dpm.MemoryUSMShared(max(a.nbytes, 1))
    host = np.frombuffer(mem, np.uint8, a.nbytes) if a.nbytes else np.empty(0, np.uint8)
    host[:] = np.ascontiguousarray(a).view(np.uint8).ravel()
    del host
    t = interop.wrap(mem, info=TensorInfo(a.shape, a.dtype), context=ctx)
    return Made("usm-shared", t, [a.copy()])


@factory("dma-memfd", MemoryType.DMA)
def _dma_memfd(rng: np.random.Generator) -> Made:
    DMATensor = need_attr("interop.tensors.dma", "DMATensor", "the DMA backend (interop/tensors/dma.py)")
    memfd_alloc = need_attr("interop.native.dmabuf", "memfd_alloc", "the DMA native layer (interop/native/dmabuf.py)")
    a = random_array(rng, [np.uint8, np.uint16, np.float32])
    offset = 64 * int(rng.integers(0, 4))
    size = offset + a.nbytes
    fd = memfd_alloc(size)
    try:
        os.pwrite(fd, np.ascontiguousarray(a).tobytes(), offset)
        t = DMATensor.from_fd(fd, info=TensorInfo(a.shape, a.dtype), offset=offset, size=size, take_ownership=True)
    except BaseException:
        os.close(fd)
        raise
    return Made("dma-memfd", t, [a.copy()])


# ---- GStreamer memory backed by an fd (what GST -> DMA takes; via:GST makes system memory) ---------------------


def _gst(what: str) -> Any:
    """``Gst``, initialised through interop (which orders the native libraries first)."""
    need_module("interop.tensors.gst", "the GStreamer backend (interop/tensors/gst.py)")
    need_module("gi", what)
    from interop.tensors.gst import gst

    return gst()


def gst_fd_memory(payload: bytes) -> Any:
    """A ``Gst.Memory`` made by GStreamer's own fd allocator (GstFdMemory) over a new memfd holding ``payload``;
    GStreamer owns the fd and closes it when it frees the memory."""
    _gst("GStreamer fd memory")
    import gi

    gi.require_version("GstAllocators", "1.0")
    from gi.repository import GstAllocators  # type: ignore[import-not-found]

    fd = os.memfd_create("interop-test-gst")
    try:
        os.ftruncate(fd, max(len(payload), 1))
        if payload:
            os.pwrite(fd, payload, 0)
        mem = GstAllocators.FdAllocator.alloc(GstAllocators.FdAllocator.new(), fd, max(len(payload), 1),
                                              GstAllocators.FdMemoryFlags.NONE)
    except BaseException:
        os.close(fd)
        raise
    if mem is None:
        os.close(fd)
        raise AssertionError("GStreamer's fd allocator refused a memfd")
    return mem


def gst_fd_frame(fmt: FrameFormat, w: int, h: int, planes: list[np.ndarray]) -> Frame:
    """A ``Gst.Buffer`` of one GstFdMemory holding ``planes`` at the layout GStreamer gives ``fmt`` (its default
    strides), wrapped with its caps. The caller owns the buffer (nobody else holds it), so it is writable in place:
    an appsink's sample would be shared, and WRITE mappings of it copy."""
    Gst = _gst("GStreamer fd memory")
    import gi

    gi.require_version("GstVideo", "1.0")
    from gi.repository import GstVideo  # type: ignore[import-not-found]

    from interop.tensors.gst import GST_FORMAT_NAMES, wrap_buffer

    caps = Gst.Caps.from_string(f"video/x-raw,format={GST_FORMAT_NAMES[fmt]},width={w},height={h}")
    vi = GstVideo.VideoInfo.new_from_caps(caps)
    data = bytearray(vi.size)
    for plane, off, stride in zip(planes, vi.offset, vi.stride):
        rows = np.ascontiguousarray(plane).reshape(plane.shape[0], -1).view(np.uint8)
        for r in range(rows.shape[0]):
            data[off + r * stride: off + r * stride + rows.shape[1]] = rows[r].tobytes()
    buf = Gst.Buffer.new()
    buf.append_memory(gst_fd_memory(bytes(data)))
    return wrap_buffer(buf, caps)


def gst_fd_tensor(a: np.ndarray) -> Tensor:
    """``a``'s bytes in a GstFdMemory, wrapped as a Tensor of ``a``'s shape and dtype."""
    t = interop.wrap(gst_fd_memory(np.ascontiguousarray(a).tobytes()), info=TensorInfo(a.shape, a.dtype))
    assert isinstance(t, Tensor)
    return t


@factory("gst-fd", MemoryType.GST)
def _gst_fd(rng: np.random.Generator) -> Made:
    # frames, as GStreamer's fd producers (v4l2src, decoders with dma-buf pools) give them; a lone memory as a
    # tensor is gst_fd_tensor(). Widths are multiples of 8, so GStreamer's default strides are the rows themselves
    # and every frame of this kind takes the same routes (tests route one frame of a kind and map others); padded
    # and odd sizes come from via:GST and the GStreamer tests
    fmt = FRAME_FORMATS[int(rng.integers(len(FRAME_FORMATS)))]
    w, h = even_size(rng, 2, 40)
    w = 8 * max(1, w // 8)
    _, planes = random_image(rng, fmt, w, h)
    return Made("gst-fd", gst_fd_frame(fmt, w, h, planes), planes)


def _via(dst: MemoryType) -> Factory:
    def make(rng: np.random.Generator) -> Made:
        interop.route(MemoryType.CPU, dst, allow_copy=True)  # no route from the CPU: NoRouteError, a failure
        chain_or_why = runnable_chain(MemoryType.CPU, dst)
        if isinstance(chain_or_why, str):  # a tier B/C step, or a third-party module a step needs is absent
            raise Missing(chain_or_why)
        # frames for memory types whose mappers take frames; plain uint8 images else (the widest support)
        if rng.integers(2):
            src = _cpu_frame(rng)
        else:
            w, h = even_size(rng, 2, 32)
            a = rng.integers(0, 256, (h, w, 3) if rng.integers(2) else (h, w), dtype=np.uint8)
            src = Made("cpu-tensor", interop.wrap(a), [a.copy()])
        out = interop.map(src.obj, dst, allow_copy=True)
        return Made(f"via:{dst.name}", out, src.expected)

    return make


for _mt in MemoryType:
    if _mt is not MemoryType.CPU:
        FACTORIES[f"via:{_mt.name}"] = (_mt, _via(_mt))


def make(name: str, rng: np.random.Generator) -> Made:
    """Run factory ``name``; an absent third-party module or tier B/C hardware raises Missing."""
    return FACTORIES[name][1](rng)


def default_context(mt: MemoryType) -> interop.Context:
    try:
        return interop.Context.default(mt)
    except InteropError as e:
        hw = lacking_hardware(e)
        if hw is None:
            raise  # a tier A backend without its default context: a failure
        raise Missing(f"no default {mt.name} context here: this machine has no {hw} ({e})") from e


def probe_factories(seed: int = 0) -> tuple[dict[str, str], dict[str, str]]:
    """(working factory -> memory type name, missing factory -> why). Tried once per process. Only ``Missing``
    (an absent third-party module or tier B/C hardware) counts as missing; a factory that raises anything else
    is in ``broken()``, and ``require_kind`` fails on it."""
    global _probed
    if _probed is None:
        ok, missing = {}, {}
        for name, (mt, fn) in FACTORIES.items():
            try:
                m = fn(np.random.default_rng(seed))
                ok[name] = mt.name
                release(m.obj)
            except Missing as e:
                missing[name] = str(e)
            except Exception as e:  # an InteropError of a present backend, an ImportError inside interop, a bug
                _broken[name] = f"{type(e).__name__}: {e}"
        _probed = (ok, missing)
    return _probed


def broken() -> dict[str, str]:
    """Factory -> the error it raised in probe_factories that was not Missing (each is a failure)."""
    probe_factories()
    return dict(_broken)


def require_kind(kind: str) -> str:
    """The memory type name of factory ``kind``; skip naming what is absent when it is Missing here, fail with
    its error when it is broken."""
    ok, missing = probe_factories()
    if kind in ok:
        return ok[kind]
    if kind in _broken:
        pytest.fail(f"factory {kind} is broken on this machine: {_broken[kind]}")
    pytest.skip(f"{kind}: {missing.get(kind, 'not probed')}")


_probed: tuple[dict[str, str], dict[str, str]] | None = None
_broken: dict[str, str] = {}


# ---- routes and mappers that can run here -----------------------------------------------------------------


def runnable_chain(src: MemoryType, dst: MemoryType, allow_copy: bool = True) -> Any:
    """The route src -> dst when every step can run on this machine (tier A, modules present), else why not."""
    try:
        chain = interop.route(src, dst, allow_copy=allow_copy)
    except NoRouteError as e:
        return f"no route {src.name} -> {dst.name}: {e}"
    for m in chain.mappers:
        if m.tier != "A":
            return f"step {m.name} needs tier {m.tier} hardware"
        why = m.missing()
        if why:
            return f"step {m.name}: {why}"
    return chain


def runnable_destinations(src: MemoryType) -> list[MemoryType]:
    return [d for d in MemoryType if d is not src and not isinstance(runnable_chain(src, d), str)]


def zero_copy_mappers() -> tuple[list[type[interop.MemoryMapper]], dict[str, str]]:
    """(zero-copy mappers runnable here, mapper name -> why not) over interop.mapper.registered()."""
    from interop.mapper import registered

    ok, skipped = [], {}
    for cls in sorted(registered().values(), key=lambda c: c.name):
        if not cls.zero_copy:
            skipped[cls.name] = "not zero-copy"
        elif cls.tier != "A":
            skipped[cls.name] = f"tier {cls.tier} hardware"
        elif cls.missing():
            skipped[cls.name] = cls.missing() or ""
        else:
            ok.append(cls)
    return ok, skipped


# ---- reading back -----------------------------------------------------------------------------------------


def planes_of(obj: Tensor | Frame) -> list[Tensor]:
    return obj.tensors if isinstance(obj, Frame) else [obj]


def host_arrays(obj: Tensor | Frame) -> list[np.ndarray] | None:
    """The content of every plane as numpy arrays (zero-copy where the CPU reaches it, else mapped to CPU
    with copies allowed); None when no route to the CPU can run here."""
    try:
        return [np.asarray(t) for t in planes_of(obj)]
    except InteropError:
        pass
    chain = runnable_chain(obj.memory_type, MemoryType.CPU)
    if isinstance(chain, str):
        return None
    cpu = interop.map(obj, MemoryType.CPU, allow_copy=True)
    return [np.array(t, copy=True) for t in planes_of(cpu)]


def normalise(arr: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Bring a device-shaped plane (e.g. OpenVINO's (1, rows, pitch, C)) to the visible shape of ``want``."""
    a = arr
    while a.ndim > want.ndim and a.shape[0] == 1:
        a = a[0]
    if a.ndim == want.ndim + 1 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim == want.ndim and a.shape != want.shape and all(x >= y for x, y in zip(a.shape, want.shape)):
        a = a[tuple(slice(0, n) for n in want.shape)]
    if a.dtype != want.dtype and a.dtype.itemsize == want.dtype.itemsize:
        a = a.view(want.dtype)
    return a


def content_matches(obj: Tensor | Frame, expected: list[np.ndarray]) -> bool | None:
    """True/False when the content could be read, None when it cannot be read here."""
    arrays = host_arrays(obj)
    if arrays is None:
        return None
    if len(arrays) != len(expected):
        return False
    got = [normalise(a, e) for a, e in zip(arrays, expected)]
    return fingerprint(got) == fingerprint(expected)


def cpu_readable(mt: MemoryType) -> bool:
    """Whether memory of type ``mt`` can be read on this machine: CPU memory, or a runnable route to the CPU."""
    return mt is MemoryType.CPU or not isinstance(runnable_chain(mt, MemoryType.CPU), str)


def assert_content(obj: Tensor | Frame, expected: list[np.ndarray], label: str) -> bool | None:
    """Assert that ``obj`` reads ``expected``: ``content_matches`` must be True where its memory type is
    CPU-readable here, and may be None (unreadable) only where it is not. Returns what content_matches gave."""
    got = content_matches(obj, expected)
    if cpu_readable(obj.memory_type):
        assert got is True, f"{label}: content_matches gave {got} for CPU-readable {obj.memory_type.name} memory"
    else:
        assert got is not False, f"{label}: reads other data than expected"
    return got


def release(obj: Any) -> None:
    if isinstance(obj, (Tensor, Frame)):
        obj.release()


# ---- process resources ------------------------------------------------------------------------------------


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


#: counter label -> (module, accepted function names); the first name is the one asked for in the report
LIVE_COUNTERS = {
    "OPENCL": ("interop.tensors.opencl", ("live_count",)),
    "USM": ("interop.tensors.usm", ("live_count",)),
    "DMA": ("interop.tensors.dma", ("live_count", "live_buffers")),
    "DMA mappings": ("interop.native.dmabuf", ("live_mappings",)),
}


def live_counts() -> tuple[dict[str, int], dict[str, str]]:
    """(counter -> live allocations now, counter -> why it is absent)."""
    have, absent = {}, {}
    for label, (modname, names) in LIVE_COUNTERS.items():
        mod = importlib.import_module(modname)  # every module of interop exists: an ImportError is a failure
        f = next((getattr(mod, n) for n in names if callable(getattr(mod, n, None))), None)
        if f is None:
            absent[label] = f"{modname}.{names[0]}() does not exist"
        else:
            have[label] = int(f())
    return have, absent


def settle() -> None:
    for _ in range(3):
        gc.collect()
