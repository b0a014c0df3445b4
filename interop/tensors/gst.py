"""GStreamer buffers: a ``Gst.Sample`` (or a ``Gst.Buffer`` with its caps) as a Frame of plane tensors over the
buffer's own memories, and a single ``Gst.Memory`` as a Tensor.

Plane offsets and strides come from the buffer's ``GstVideoMeta`` when it has one (the producer's true layout,
padded pitches included), else from the caps' ``GstVideoInfo``. Each plane is a GstTensor over the one memory
that holds it (a plane spread over several memories is refused: joining them is a copy). Nothing is mapped
here: the GST -> CPU mapper maps each memory with ``gst_memory_map`` (interop.native.gst), for READ or WRITE.
"""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .._dist import pip_hint
from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    lazy_module,
    module_available,
    register_backend,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import (
    BackendUnavailableError,
    CopyRequiredError,
    InteropError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo, contiguous_strides, plane_layout
from ..native import gst as ng
from ..tensor import Tensor
from ..types import ColorRange, ColorSpace, FrameFormat, MemoryType

#: GStreamer video format name -> FrameFormat
GST_FORMATS: dict[str, FrameFormat] = {
    "I420": FrameFormat.I420, "YV12": FrameFormat.YV12, "NV12": FrameFormat.NV12, "NV21": FrameFormat.NV21,
    "P010_10LE": FrameFormat.P010, "RGB": FrameFormat.RGB, "BGR": FrameFormat.BGR, "RGBx": FrameFormat.RGBX,
    "BGRx": FrameFormat.BGRX, "RGBA": FrameFormat.RGBA, "BGRA": FrameFormat.BGRA, "GRAY8": FrameFormat.GRAY8,
    "GRAY16_LE": FrameFormat.GRAY16,
}
#: FrameFormat -> GStreamer video format name
GST_FORMAT_NAMES: dict[FrameFormat, str] = {v: k for k, v in GST_FORMATS.items()}
#: the end of a pipeline that converts to a format interop maps: videoconvert alone negotiates with appsink's ANY caps
#: and may keep a format interop does not map, so the caps filter names one
CONVERT_CAPS = "videoconvert ! video/x-raw,format=I420"
#: how the error for a buffer without caps or video meta (not raw video, e.g. fakesrc's) begins
NO_LAYOUT = "this Gst.Buffer has no GstVideoMeta"


def supported_names() -> str:
    """The GStreamer formats interop maps, sorted, for messages."""
    return ", ".join(sorted(GST_FORMATS))


#: memory types the CPU maps in place (system memory, and fd/dma-buf memory through mmap)
CPU_MEMORY_TYPES = ("SystemMemory", "fd", "dmabuf")

_MATRICES = {1: ColorSpace.SRGB, 3: ColorSpace.BT709, 4: ColorSpace.BT601, 6: ColorSpace.BT2020}
_RANGES = {1: ColorRange.FULL, 2: ColorRange.LIMITED}
NANOSECONDS = Fraction(1, 1_000_000_000)

_import_gi = lazy_module("gi", "gst", "gst")
_gst: list[Any] = []


def gst() -> Any:
    """``gi.repository.Gst``, initialised, on first use (BackendUnavailableError naming the extra if missing)."""
    if _gst:
        return _gst[0]
    gi = _import_gi()
    try:
        gi.require_version("Gst", "1.0")
        from gi.repository import Gst  # type: ignore[import-not-found]
    except (ImportError, ValueError) as e:
        from ..errors import missing_backend

        err = missing_backend("gst", "gi.repository.Gst", "gst")
        err.args = (f"{err.args[0]}; GStreamer's introspection data is missing too ({e}): install gir1.2-gstreamer-1.0 "
                    f"(tests/prepare.d/gstreamer.sh prints the apt command)",)
        raise err from e
    if not Gst.is_initialized():
        Gst.init(None)
    # their introspection data loaded before any of their elements is wrapped: PyGObject gives an element wrapped
    # earlier (an appsink found in a pipeline) a class without those libraries' methods (get_latency, ...) for good
    for ns in ("GstBase", "GstApp"):
        try:
            gi.require_version(ns, "1.0")
            importlib.import_module(f"gi.repository.{ns}")
        except (ImportError, ValueError):
            pass  # gir1.2-gst-plugins-base-1.0 missing: the doctor names it; interop itself needs neither
    ng.libs()
    _gst.append(Gst)
    return Gst


def gst_video() -> Any:
    """``gi.repository.GstVideo`` (GStreamer initialised first); BackendUnavailableError naming the package when its
    introspection data is missing."""
    gst()
    try:
        gi = _import_gi()
        gi.require_version("GstVideo", "1.0")
        from gi.repository import GstVideo
    except (ImportError, ValueError) as e:
        raise BackendUnavailableError(
            f"GStreamer's video introspection data is missing ({e}): install gir1.2-gst-plugins-base-1.0 "
            f"(tests/prepare.d/gstreamer.sh prints the apt command)", backend="gst", extra="gst") from e
    return GstVideo


class NotWritableError(CopyRequiredError, BufferError):
    """A WRITE mapping of a GStreamer buffer or memory that others share (appsink's buffers always are)."""


class GstContext(Context):
    """GStreamer system memory (the memories of ``Gst.Buffer``s the CPU can map)."""

    memory_type = MemoryType.GST

    def __init__(self) -> None:
        super().__init__(native=None, device="cpu")

    def key(self) -> Any:
        return "cpu"


GST_CPU = GstContext()
register_default_context(MemoryType.GST, lambda: GST_CPU)


class GstTensor(Tensor):
    """Bytes of one ``GstMemory``: ``native`` is the ``Gst.Memory``; ``offset`` is from the start of its mapped data.

    ``buffer`` is the ``Gst.Buffer`` the memory belongs to (None for a memory wrapped on its own): a mapping holds
    a reference on both, so views outlive the sample, the buffer and the pipeline.
    """

    memory_type = MemoryType.GST
    HANDLE_KEYS = {"gst_memory": "memory_ptr", "offset": "offset"}

    def __init__(self, memory: Any, info: TensorInfo, *, offset: int = 0, buffer: Any = None,
                 memory_index: int = -1, context: Context | None = None, parent: Any = None):
        if not class_in(type(memory), "gi.repository.Gst", "Memory") and \
                not class_in(type(memory), "gi.overrides.Gst", "Memory"):
            raise UnsupportedTypeError(f"GstTensor wraps a Gst.Memory, not {type(memory).__name__}")
        if not isinstance(info, TensorInfo):
            raise InvalidTensorError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
        mem = ng.pointer_of(memory, "Gst.Memory")
        size = ng.memory_sizes(mem)[0]
        if offset < 0 or offset + info.extent > size:
            raise InvalidTensorError(f"layout {info} at offset {offset} does not fit the memory's {size} bytes")
        super().__init__(memory, info, context=context or GST_CPU, parent=parent, writable=True)
        self._mem = mem
        self._offset = offset
        self._buffer = buffer
        self._index = memory_index

    @property
    def memory_ptr(self) -> int:
        """The ``GstMemory*`` (a 64-bit address)."""
        self._check()
        return self._mem

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def buffer(self) -> Any:
        """The ``Gst.Buffer`` holding this memory, or None."""
        return self._buffer

    @property
    def memory_index(self) -> int:
        """Index of the memory in its buffer (-1 for a memory wrapped on its own)."""
        return self._index

    def writable_now(self) -> bool:
        """Whether a WRITE mapping would be allowed: the buffer has one owner and the memory is not shared or
        read-only."""
        if self._buffer is not None and not ng.is_writable(ng.pointer_of(self._buffer, "Gst.Buffer")):
            return False
        # gst_mini_object_is_writable counts the buffers sharing the memory; the READONLY flag is separate
        return ng.is_writable(self._mem) and not ng.memory_flags(self._mem) & ng.GST_MEMORY_FLAG_READONLY

    def check_cpu_memory(self) -> None:
        """Refuse memory the CPU cannot map in place (VA, GL, CUDA, NVMM… memories: their map is a download)."""
        mem = self._mem
        if ng.memory_flags(mem) & ng.GST_MEMORY_FLAG_NOT_MAPPABLE or \
                not any(ng.memory_is_type(mem, t) for t in CPU_MEMORY_TYPES):
            alloc = getattr(self._native, "allocator", None)
            kind = getattr(alloc, "mem_type", None) or "unknown"
            raise UnsupportedFormatError(
                f"this GstMemory is {kind} memory, which the CPU cannot map without a copy; interop maps "
                f"{', '.join(CPU_MEMORY_TYPES)} memory. Put a download element (e.g. vapostproc/glcolorconvert/"
                f"nvvideoconvert to video/x-raw) before the appsink")

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        return GstTensor(self._native, info, offset=self._offset + offset, buffer=self._buffer,
                         memory_index=self._index, context=self._context, parent=self)

    def __repr__(self) -> str:
        if self._released:
            return "<GstTensor released>"
        return f"<GstTensor GST shape={self._info.shape} dtype={self._info.dtype} offset={self._offset}>"


class GstFrame(Frame):
    """A Frame over a ``Gst.Buffer``'s memories; ``native`` is the ``Gst.Sample`` or ``Gst.Buffer`` wrapped."""

    _buffer: Any
    _caps: Any

    @property
    def buffer(self) -> Any:
        """The ``Gst.Buffer`` whose memories the planes are."""
        return self._buffer

    @property
    def caps(self) -> Any:
        """The ``Gst.Caps`` describing the buffer (made from the format for frames built by interop)."""
        return self._caps


def caps_for(format: FrameFormat, width: int, height: int, fps: Fraction | None = None) -> Any:
    """``Gst.Caps`` for raw video of ``format`` (what an appsrc carrying interop's buffers announces)."""
    Gst = gst()
    name = GST_FORMAT_NAMES.get(format)
    if name is None:
        raise UnsupportedFormatError(f"GStreamer has no format for {format.name}; supported: "
                                     f"{', '.join(f.name for f in GST_FORMAT_NAMES)}")
    s = f"video/x-raw,format={name},width={width},height={height}"
    if fps is not None:
        s += f",framerate={fps.numerator}/{fps.denominator}"
    return Gst.Caps.from_string(s)


def _is(obj: Any, name: str) -> bool:
    cls = type(obj)
    return class_in(cls, "gi.repository.Gst", name) or class_in(cls, "gi.overrides.Gst", name)


def _check_caps(caps: Any) -> None:
    s = caps.get_structure(0) if caps is not None and caps.get_size() else None
    if s is None:
        raise UnsupportedFormatError("these caps are empty or not fixed; wrap a buffer with its negotiated caps "
                                     "(appsink's samples carry them)")
    if s.get_name() != "video/x-raw":
        raise UnsupportedFormatError(
            f"caps {caps.to_string()!r} are not raw video; decode first (e.g. '... ! decodebin ! {CONVERT_CAPS} ! "
            f"appsink'): interop maps video/x-raw in {supported_names()}")
    if not _host_caps(caps) and not caps.get_features(0).contains("memory:VAMemory"):
        raise UnsupportedFormatError(
            f"caps {caps.to_string()!r} carry {caps.get_features(0).to_string()} memory, which interop cannot map; "
            f"download to system memory before the appsink (e.g. a converter to plain video/x-raw)")


def _host_caps(caps: Any) -> bool:
    """Whether caps are of memory the CPU maps in place (system memory, dma-buf); VA memory maps to VAAPI only."""
    feats = caps.get_features(0) if caps is not None else None
    return feats is None or feats.is_any() or not feats.get_size() or \
        feats.contains("memory:SystemMemory") or feats.contains("memory:DMABuf")


@dataclass(frozen=True)
class Plan:
    """What a buffer's caps and video meta say about its planes, worked out once per (caps, meta layout): format,
    visible size, each plane's buffer offset and TensorInfo, the bytes they span, colour and frame rate."""

    format: FrameFormat
    width: int
    height: int
    planes: tuple[tuple[int, TensorInfo], ...]
    names: tuple[str, ...]
    span: int
    colorspace: ColorSpace | None
    color_range: ColorRange | None
    framerate: Fraction | None
    #: the caps are of memory the CPU maps in place (the one-step CPU path takes only those)
    host: bool = True
    #: per plane, the read-only __array_interface__ of a CPU view but its address (copied, "data" set, per frame)
    interfaces: tuple[dict[str, Any], ...] = ()

    #: per mapped address (a pool hands out a few buffers over and over): per plane (info, index, address, its
    #: read-only __array_interface__), shared by the CPU views of every frame at that address (numpy only reads it)
    at: dict[int, tuple[tuple[TensorInfo, int, int, dict[str, Any]], ...]] = field(default_factory=dict, compare=False,
                                                                               repr=False)

    husk_cache: dict[type, list[Any]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "interfaces", tuple(
            {"version": 3, "shape": i.shape, "typestr": i.dtype.str, "data": (0, True), "strides": i.strides}
            for _, i in self.planes))

    def husks(self, cls: type) -> list[Any]:
        """Released planes of class ``cls`` that hold nothing, one per plane: what a released frame keeps."""
        out = self.husk_cache.get(cls)
        if out is None:
            hs = []
            for i, (_, info) in enumerate(self.planes):
                h: Any = object.__new__(cls)
                h._info, h._index, h._addr, h._parent, h._released = info, i, None, None, True
                hs.append(h)
            out = self.husk_cache[cls] = hs
        return list(out)

    def views_at(self, address: int) -> tuple[tuple[TensorInfo, int, int, dict[str, Any]], ...]:
        """What the CPU views of a frame mapped at ``address`` share (cached per address)."""
        out = self.at.get(address)
        if out is None:
            views = []
            for i, (off, info) in enumerate(self.planes):
                iface = dict(self.interfaces[i])
                iface["data"] = (address + off, True)
                views.append((info, i, address + off, iface))
            out = tuple(views)
            at = self.at
            if len(at) >= _ADDRESSES_MAX:  # memory that is not pooled: start over rather than grow
                at.clear()
            at[address] = out
        return out


# (GstCaps*, the video meta's layout bytes or None) -> Plan. Entries go when GStreamer frees the caps (a weak ref),
# so a cached pointer is never another caps' pointer; caps that others share are immutable.
_plans: dict[tuple[int, bytes | None], Plan] = {}
_PLANS_MAX = 64
_ADDRESSES_MAX = 64


def _make_plan(caps: Any, caps_ptr: int, meta: int) -> Plan:
    layout = None
    if caps is not None:
        _check_caps(caps)
        layout = ng.video_info(caps_ptr)
        if layout is None:
            raise UnsupportedFormatError(f"GStreamer cannot read caps {caps.to_string()!r} as raw video")
    vmeta = ng.video_meta_at(meta) if meta else None
    if vmeta is not None:
        if layout is not None and (vmeta.format, vmeta.width, vmeta.height) != (layout.format, layout.width,
                                                                                layout.height):
            raise InvalidTensorError(f"the buffer's video meta ({vmeta.format} {vmeta.width}x{vmeta.height}) "
                                     f"contradicts its caps ({layout.format} {layout.width}x{layout.height})")
        colour = layout if layout is not None else vmeta
        layout = vmeta
    elif layout is None:
        raise InvalidTensorError(f"{NO_LAYOUT}: give its caps (interop.wrap(sample), or "
                                 "interop.tensors.gst.wrap_buffer(buffer, caps)) so interop knows its planes")
    else:
        colour = layout
    fmt = GST_FORMATS.get(layout.format)
    if fmt is None:
        raise UnsupportedFormatError(f"GStreamer format {layout.format} is not supported; supported: "
                                     f"{supported_names()}. Convert before the appsink with a caps filter that names "
                                     f"one: '... ! {CONVERT_CAPS} ! appsink' (videoconvert copies each frame; without "
                                     f"the caps filter it may keep {layout.format})")
    specs = plane_layout(fmt)
    if len(layout.offsets) < len(specs):
        raise InvalidTensorError(f"a {layout.format} buffer needs {len(specs)} planes, its layout has {len(layout.offsets)}")
    planes = []
    for spec, off, pitch in zip(specs, layout.offsets, layout.strides):
        shape = spec.shape(layout.width, layout.height)
        if pitch < spec.row_bytes(layout.width):
            raise InvalidTensorError(f"plane {spec.name} of a {layout.width}x{layout.height} {layout.format} buffer "
                                     f"has stride {pitch}, less than its {spec.row_bytes(layout.width)}-byte rows")
        planes.append((int(off), TensorInfo(shape, spec.dtype, (pitch,) + contiguous_strides(shape, spec.dtype.itemsize)[1:])))
    fps = colour.fps
    return Plan(fmt, layout.width, layout.height, tuple(planes), tuple(sp.name for sp in specs), max(o + i.extent for o, i in planes),
                _MATRICES.get(colour.matrix), _RANGES.get(colour.range),
                Fraction(fps[0], fps[1]) if fps[0] > 0 and fps[1] > 0 else None, caps is None or _host_caps(caps))


def plan_for(caps: Any, caps_ptr: int, meta: int) -> Plan:
    """The Plan of a buffer with caps ``caps_ptr`` (0: none) and video meta ``meta`` (0: none), cached. ``caps`` is
    the Python ``Gst.Caps`` (or a callable giving it), needed only on a cache miss."""
    key = (caps_ptr, ng.meta_key(meta) if meta else None)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    plan = _make_plan(caps() if callable(caps) else caps, caps_ptr, meta)
    with _plans_lock:
        if len(_plans) >= _PLANS_MAX:  # caps change rarely (renegotiation): start over rather than track use
            _plans.clear()
        _plans[key] = plan
    if caps_ptr:
        ng.watch(caps_ptr, _forget_caps)
    return plan


def _forget_caps(caps_ptr: int) -> None:
    with _plans_lock:
        for k in [k for k in _plans if k[0] == caps_ptr]:
            del _plans[k]


_plans_lock = threading.RLock()


def wrap_buffer(buffer: Any, caps: Any = None, *, native: Any = None) -> Frame:
    """A ``Gst.Buffer`` (with its negotiated ``caps``, or carrying a GstVideoMeta) as a GstFrame, zero-copy."""
    gst()
    if not _is(buffer, "Buffer"):
        raise UnsupportedTypeError(f"wrap_buffer() takes a Gst.Buffer, not {type(buffer).__name__}")
    buf = ng.pointer_of(buffer, "Gst.Buffer")
    plan = plan_for(caps, ng.pointer_of(caps, "Gst.Caps") if caps is not None else 0, ng.video_meta_ptr(buf))
    tensors: list[Tensor] = []
    total = ng.buffer_size(buf)
    single = ng.n_memory(buf) == 1
    memories: dict[int, Any] = {}
    parent = native if native is not None else buffer
    for (off, info), name in zip(plan.planes, plan.names):
        if off + info.extent > total:
            raise InvalidTensorError(f"plane {name} at offset {off} spans {info.extent} bytes; the buffer has {total}")
        if single:  # the one memory holds every byte of the buffer: no search
            idx, count, skip = 0, 1, off
        else:
            found = ng.find_memory(buf, off, info.extent)
            if found is None:
                raise InvalidTensorError(f"plane {name} at offset {off} is not in the buffer's memories")
            idx, count, skip = found
        if count != 1:
            raise InvalidTensorError(
                f"plane {name} spans {count} GstMemory blocks: reading it as one array would need them "
                f"joined (a copy). interop maps planes that each lie in one memory")
        mem = memories.get(idx)
        if mem is None:
            mem = memories[idx] = buffer.peek_memory(idx)
        tensors.append(GstTensor(mem, info, offset=skip, buffer=buffer, memory_index=idx, context=GST_CPU,
                                 parent=parent))
    pts, duration = ng.buffer_times(buf)
    f = GstFrame(tensors, plan.format, plan.width, plan.height, context=GST_CPU, native=parent,
                 colorspace=plan.colorspace, color_range=plan.color_range,
                 pts=None if pts == ng.GST_CLOCK_TIME_NONE else pts, time_base=NANOSECONDS)
    f._buffer = buffer
    f._caps = caps
    if duration != ng.GST_CLOCK_TIME_NONE:
        f.metadata["duration"] = duration  # nanoseconds, as pts
    if plan.framerate is not None:
        f.metadata["framerate"] = plan.framerate
    return f


def wrap_mapped_planes(buffer: Any, f: Frame, caps: Any, offsets: list[int], strides: list[int]) -> Frame:
    """The GstFrame a mapper to GST gives for ``f`` once it has appended ``f``'s planes to ``buffer`` as memories:
    a GstVideoMeta with each plane's byte offset in the buffer and pitch, ``f``'s pts in nanoseconds, metadata and
    colour. The frame keeps ``f`` alive (its memories are ``f``'s bytes)."""
    ng.add_video_meta(ng.pointer_of(buffer, "Gst.Buffer"), GST_FORMAT_NAMES[f.format], f.width, f.height, offsets,
                      strides)
    if f.pts is not None and f.time_base is not None:
        buffer.pts = int(f.pts * f.time_base * 1_000_000_000)
    out = wrap_buffer(buffer, caps)
    out._parent = f
    out.metadata.update(f.metadata)
    out.colorspace, out.color_range = f.colorspace, f.color_range
    return out


# ---- one-step READ mapping -----------------------------------------------------------------------------
# interop.map(sample, CPU) runs once per frame. The general path wraps the sample as GstTensors (PyGObject calls,
# per-plane checks), then maps each memory. The one-step path (GstToCPU.map_native) reads the buffer, caps and
# video meta pointers with one ctypes call each, takes the planes from the cached Plan, maps the buffer's one
# memory with one call, and builds the CPU planes directly; the GstFrame in between is made only if asked for.


class MappedSample(ng.BufferMapping):
    """A sample (or buffer) whose one memory is mapped for READ, shared by the frame and planes mapped from it in
    one step (the mapping holds the sample); ``frame()`` is the GstFrame the general path would have wrapped, made
    on first use."""

    __slots__ = ("plan", "_frame")
    plan: Plan
    _frame: Frame | None

    def frame(self) -> Frame:
        f = self._frame
        if f is None:
            f = self._frame = wrap_sample(self.owner) if _is(self.owner, "Sample") else wrap_buffer(self.owner)
        return f


_kinds: dict[type, int] = {}  # class -> 1 Gst.Sample, 0 Gst.Buffer, -1 neither
_allocators: dict[int, bool] = {}  # GstAllocator* (entry dropped when it is freed) -> the CPU maps it in place


def _cpu_mappable(mem: int) -> bool:
    """Whether the CPU maps this memory in place, and GStreamer's lock count of it has room for this mapping."""
    head = ng.GstMemoryHead.from_address(mem)
    if head.flags & ng.GST_MEMORY_FLAG_NOT_MAPPABLE or (head.lockstate & ng.LOCK_COUNT_MASK) >= ng.MAX_LOCKS:
        return False
    alloc = head.allocator or 0
    ok = _allocators.get(alloc)
    if ok is None:
        ok = bool(alloc) and any(ng.memory_is_type(mem, t) for t in CPU_MEMORY_TYPES)
        if alloc:
            with _plans_lock:
                _allocators[alloc] = ok
            ng.watch(alloc, _forget_allocator, gobject=True)
    return ok


def _forget_allocator(alloc: int) -> None:
    with _plans_lock:
        _allocators.pop(alloc, None)


def map_read(obj: Any) -> MappedSample | None:
    """Map a ``Gst.Sample`` (or a ``Gst.Buffer`` with a video meta) for READ in one step, or None when it is not
    the common case (several memories, memory the CPU cannot map, a layout the general path refuses: that path
    then runs and says why). This runs once per frame: the sample's buffer and caps, the buffer's memory count,
    memory and video meta are read from the structs (``ng.struct_layout_ok()`` checked their layout once), and
    the map and the unmap are the only calls into GStreamer."""
    f = _fast[0] if _fast else _fast_init()
    is_sample = _kinds.get(type(obj))
    if is_sample is None:
        is_sample = _kinds[type(obj)] = 1 if _is(obj, "Sample") else 0 if _is(obj, "Buffer") else -1
    ptr = hash(obj)
    if ptr <= 0 or is_sample < 0:
        return None
    g = f.lib
    if f.structs:
        if is_sample:
            sh = _SampleHead(ptr)
            buf = sh.buffer
            caps_ptr = sh.caps or 0
        else:
            buf, caps_ptr = ptr, 0
        if not buf:
            return None
        b = _BufferHead(buf)
        if b.len != 1:
            return None
        mem = b.mem0
        item = b.item
        meta = _find_meta(item, f.api) if item else 0
    else:
        if is_sample:
            buf = g.gst_sample_get_buffer(ptr)
            caps_ptr = g.gst_sample_get_caps(ptr) or 0
        else:
            buf, caps_ptr = ptr, 0
        if not buf or g.gst_buffer_n_memory(buf) != 1:
            return None
        mem = g.gst_buffer_peek_memory(buf, 0)
        meta = g.gst_buffer_get_meta(buf, f.api) or 0
    plan = _plans.get((caps_ptr, _meta_key(meta) if meta else None))
    if plan is None:
        try:
            plan = plan_for(obj.get_caps() if is_sample else None, caps_ptr, meta)
        except InteropError:
            return None
    # caps that passed the plan are system or DMABuf memory (VA memory's map would be a download: the general path
    # refuses it with advice); the memory itself is checked too, before mapping
    if not plan.host or not mem:
        return None
    head = _MemoryHead(mem)  # _cpu_mappable(mem), inlined for the memories seen before
    if head.flags & _NOT_MAPPABLE or (head.lockstate & _LOCK_COUNT_MASK) >= _MAX_LOCKS or \
            not (_allocators.get(head.allocator or 0) or _cpu_mappable(mem)):
        return None
    info = _MapInfo()
    if not g.gst_buffer_map(buf, info, _MAP_READ):  # one memory: mapped in place, with a reference on it
        return None
    m: Any = _new(MappedSample)  # BufferMapping's state, set here: its unmap runs in __del__ from now on
    m.info, m.owner, m.buf, m._unmap, m.address, m.size, m.plan, m._frame = \
        info, obj, buf, f.unmap, info.data or 0, info.size, plan, None
    _made_one()
    if m.size < plan.span:
        return None  # unmapped as m goes; the general path says which plane does not fit
    return m  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Fast:
    lib: Any  # libgstreamer-1.0
    api: int  # GstVideoMeta's API GType
    unmap: Any  # gst_buffer_unmap
    structs: bool  # ng.struct_layout_ok(): read pointers from the structs instead of calling the getters


_fast: list[_Fast] = []
_new = object.__new__
_SampleHead = ng.GstSampleHead.from_address
_BufferHead = ng.GstBufferHead.from_address
_find_meta = ng.find_meta
_meta_key = ng.meta_key
_MapInfo = ng.GstMapInfo
_MAP_READ = ng.GST_MAP_READ
_made_one = ng.count_mapping
_MemoryHead = ng.GstMemoryHead.from_address
_NOT_MAPPABLE, _LOCK_COUNT_MASK, _MAX_LOCKS = ng.GST_MEMORY_FLAG_NOT_MAPPABLE, ng.LOCK_COUNT_MASK, ng.MAX_LOCKS


def _fast_init() -> _Fast:
    if not _fast:
        g = ng.libs()[0]
        _fast.append(_Fast(g, ng.video_meta_api(), g.gst_buffer_unmap, ng.struct_layout_ok()))
    return _fast[0]


class SampledFrame(GstFrame):
    """A CPU frame mapped in one step from a sample; ``parent`` (the GstFrame) and ``metadata`` are made on first
    use. ``_parent`` is the MappedSample (the mapping) until release; ``_sample`` is (sample, GstBuffer*, plan),
    which holds the sample but not the mapping."""

    _native = None
    _colorspace = _color_range = _pts = _time_base = None
    _released = False
    _metadata: dict[str, Any] | None = None
    _sample: tuple[Any, int, Plan]

    @property
    def parent(self) -> Any:
        src = self._parent
        return None if src is None else src.frame()

    @property
    def buffer(self) -> Any:
        obj = self._sample[0]
        return obj.get_buffer() if _is(obj, "Sample") else obj

    @property
    def caps(self) -> Any:
        obj = self._sample[0]
        return obj.get_caps() if _is(obj, "Sample") else None

    @property  # type: ignore[override]
    def metadata(self) -> dict[str, Any]:
        md = self._metadata
        if md is None:
            _, buf, plan = self._sample
            md = self._metadata = {}
            duration = ng.buffer_times(buf)[1]  # the sample is held, so the buffer is alive
            if duration != ng.GST_CLOCK_TIME_NONE:
                md["duration"] = duration
            if plan.framerate is not None:
                md["framerate"] = plan.framerate
        return md

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._metadata = value

    def release(self) -> None:
        """Release the planes; the mapping ends now unless a numpy view (or a plane the caller holds) lives on."""
        if self._released:
            return
        self._released = True
        self._parent = None
        ts = self._tensors
        for t in ts:
            if _getrefcount(t) > 3 and not t._released:  # beyond this list, the loop and getrefcount's argument
                # a numpy view (or the caller) holds the plane, and through it the mapping: no new view of it from
                # now on, but the mapping stays for the views taken
                t._released = True
                d = t.__dict__
                d.pop("__array_interface__", None)
                d.pop("_native", None)
        # the frame keeps released stand-ins that hold nothing: the planes nobody else holds go now, and with the
        # last of them (or the last numpy view) the mapping
        self._tensors = self._sample[2].husks(type(ts[0]))


def release_plane(t: Any, refs: int) -> bool:
    """Release a plane mapped in one step: drop its numpy interface, and its hold on the mapping when nothing
    else refers to it (numpy arrays made from ``__array_interface__`` hold the plane itself; an array made by
    ``.native`` holds the mapping directly). ``refs``: the references the caller's own frames account for.
    True when the plane no longer holds the mapping."""
    if t._released:
        return t._parent is None
    t._released = True
    d = t.__dict__
    d.pop("__array_interface__", None)
    d.pop("_native", None)
    if _getrefcount(t) <= refs:
        t._parent = None
        return True
    return False


_getrefcount = sys.getrefcount


def _sample_attrs(src: tuple[Any, int, Plan]) -> tuple[Any, Any, Any, Any]:
    plan = src[2]
    pts = ng.buffer_times(src[1])[0]  # the sample is held, so the buffer is alive
    return (plan.colorspace, plan.color_range, None if pts == ng.GST_CLOCK_TIME_NONE else pts, NANOSECONDS)


def sampled_frame(src: MappedSample, tensors: list[Any], context: Context) -> Frame:
    plan = src.plan
    f: Any = object.__new__(SampledFrame)  # trusted_frame's state (the rest is SampledFrame's class defaults)
    f._tensors, f._format, f._width, f._height, f._context, f._parent = tensors, plan.format, plan.width, \
        plan.height, context, src
    f._sample = sample = (src.owner, src.buf, plan)
    f._attr_src = (_sample_attrs, sample)
    return f  # type: ignore[no-any-return]


def wrap_sample(sample: Any) -> Frame:
    """A ``Gst.Sample`` (what appsink gives) as a GstFrame over its buffer, with format and size from its caps."""
    if not _is(sample, "Sample"):
        raise UnsupportedTypeError(f"wrap_sample() takes a Gst.Sample, not {type(sample).__name__}")
    buffer = sample.get_buffer()
    if buffer is None:
        raise InvalidTensorError("this Gst.Sample has no buffer")
    return wrap_buffer(buffer, sample.get_caps(), native=sample)


def wrap_memory(memory: Any, info: TensorInfo | None = None) -> Tensor:
    """One ``Gst.Memory`` as a GstTensor: bytes (1-D uint8) unless ``info`` describes them."""
    gst()
    size = ng.memory_sizes(ng.pointer_of(memory, "Gst.Memory"))[0]
    return GstTensor(memory, info if info is not None else TensorInfo((size,)), context=GST_CPU)


def _wrap(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
          context: Context | None = None) -> Tensor | Frame:
    if context is not None and context.memory_type is not MemoryType.GST:
        raise UnsupportedTypeError(f"a GStreamer object is GST memory; it cannot belong to {context!r}")
    if format is not None:
        raise UnsupportedTypeError("a Gst.Sample/Gst.Buffer carries its own format (caps or video meta): do not "
                                   "pass format=")
    if _is(obj, "Memory"):
        return wrap_memory(obj, info)
    if info is not None:
        if _is(obj, "Buffer") and ng.n_memory(ng.pointer_of(obj, "Gst.Buffer")) == 1:
            return wrap_memory(obj.peek_memory(0), info)
        raise UnsupportedTypeError("info= describes a Gst.Memory or a buffer of one memory; a sample carries its caps")
    if _is(obj, "Sample"):
        return wrap_sample(obj)
    return wrap_buffer(obj)


def _matches(cls: type) -> bool:
    return any(class_in(cls, mod, name) for mod in ("gi.repository.Gst", "gi.overrides.Gst")
               for name in ("Sample", "Buffer", "Memory"))


register_wrapper(Wrapper("Gst.Sample / Gst.Buffer / Gst.Memory", _matches, _wrap, priority=50))


# ---- doctor ---------------------------------------------------------------------------------------------

#: plugins interop's GStreamer paths use, and the Debian package that has each
PLUGINS = {"coreelements": "libgstreamer1.0-0", "app": "gstreamer1.0-plugins-base",
           "videotestsrc": "gstreamer1.0-plugins-base", "videoconvertscale": "gstreamer1.0-plugins-base",
           "isomp4": "gstreamer1.0-plugins-good", "videoparsersbad": "gstreamer1.0-plugins-bad",
           "libav": "gstreamer1.0-libav"}
APT_COMMAND = ("apt-get update && apt-get install -y gstreamer1.0-plugins-base gstreamer1.0-plugins-good "
               "gstreamer1.0-plugins-bad gstreamer1.0-libav gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0")


def _probe() -> list[BackendReport]:
    if not module_available("gi"):
        return [BackendReport("GStreamer", False, reason=f"PyGObject is not installed: {pip_hint('gst')} "
                              f"(it builds against libgirepository1.0-dev libcairo2-dev pkg-config); GStreamer itself: "
                              f"{APT_COMMAND}")]
    try:
        Gst = gst()
    except Exception as e:  # a broken install is a row that says so
        return [BackendReport("GStreamer", False, reason=f"{e}; as root: {APT_COMMAND}")]
    reg = Gst.Registry.get()
    found = [p for p in PLUGINS if reg.find_plugin(p) is not None]
    missing = [p for p in PLUGINS if p not in found]
    import gi

    rep = BackendReport("GStreamer", True, f"{Gst.version_string()}, PyGObject {gi.__version__}",
                        ["cpu (system memory)"], "A", details={"plugins": found})
    if missing:
        pkgs = sorted({PLUGINS[p] for p in missing})
        rep.reason = f"plugins missing: {', '.join(missing)}; as root: apt-get install -y {' '.join(pkgs)}"
    return [rep]


BACKEND = register_backend(Backend("gst", "GStreamer", (MemoryType.GST,), tier="A", extra="gst", requires=("gi",),
                                   probe=_probe))
