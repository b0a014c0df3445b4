"""GStreamer buffers: a ``Gst.Sample`` (or a ``Gst.Buffer`` with its caps) as a Frame of plane tensors over the
buffer's own memories, and a single ``Gst.Memory`` as a Tensor.

Plane offsets and strides come from the buffer's ``GstVideoMeta`` when it has one (the producer's true layout,
padded pitches included), else from the caps' ``GstVideoInfo``. Each plane is a GstTensor over the one memory
that holds it (a plane spread over several memories is refused: joining them is a copy). Nothing is mapped
here: the GST -> CPU mapper maps each memory with ``gst_memory_map`` (interop.native.gst), for READ or WRITE.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..backends import (
    BackendReport,
    Wrapper,
    class_in,
    lazy_module,
    module_available,
    register_probe,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import CopyRequiredError, InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError
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

#: memory types the CPU maps in place (system memory, and fd/dma-buf memory through mmap)
CPU_MEMORY_TYPES = ("SystemMemory", "fd", "dmabuf")

_MATRICES = {1: ColorSpace.SRGB, 3: ColorSpace.BT709, 4: ColorSpace.BT601, 6: ColorSpace.BT2020}
_RANGES = {1: ColorRange.FULL, 2: ColorRange.LIMITED}
NANOSECONDS = Fraction(1, 1_000_000_000)

_import_gi = lazy_module("gi", "GStreamer", "gst")
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

        err = missing_backend("GStreamer", "gi.repository.Gst", "gst")
        err.args = (f"{err.args[0]}; GStreamer's introspection data is missing too ({e}): install gir1.2-gstreamer-1.0 "
                    f"(tests/prepare.d/gstreamer.sh prints the apt command)",)
        raise err from e
    if not Gst.is_initialized():
        Gst.init(None)
    ng.libs()
    _gst.append(Gst)
    return Gst


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
            f"caps {caps.to_string()!r} are not raw video; decode first (e.g. '... ! decodebin ! videoconvert ! "
            f"appsink'): interop maps video/x-raw in {', '.join(GST_FORMATS)}")
    feats = caps.get_features(0)
    if feats is not None and not feats.is_any() and feats.get_size() and \
            not (feats.contains("memory:SystemMemory") or feats.contains("memory:DMABuf")):
        raise UnsupportedFormatError(
            f"caps {caps.to_string()!r} carry {feats.to_string()} memory, which the CPU cannot map in place; "
            f"download to system memory before the appsink (e.g. a converter to plain video/x-raw)")


def wrap_buffer(buffer: Any, caps: Any = None, *, native: Any = None) -> Frame:
    """A ``Gst.Buffer`` (with its negotiated ``caps``, or carrying a GstVideoMeta) as a GstFrame, zero-copy."""
    gst()
    if not _is(buffer, "Buffer"):
        raise UnsupportedTypeError(f"wrap_buffer() takes a Gst.Buffer, not {type(buffer).__name__}")
    buf = ng.pointer_of(buffer, "Gst.Buffer")
    layout = None
    if caps is not None:
        _check_caps(caps)
        layout = ng.video_info(ng.pointer_of(caps, "Gst.Caps"))
        if layout is None:
            raise UnsupportedFormatError(f"GStreamer cannot read caps {caps.to_string()!r} as raw video")
    meta = ng.video_meta(buf)
    if meta is not None:
        if layout is not None and (meta.format, meta.width, meta.height) != (layout.format, layout.width,
                                                                             layout.height):
            raise InvalidTensorError(f"the buffer's video meta ({meta.format} {meta.width}x{meta.height}) contradicts "
                                     f"its caps ({layout.format} {layout.width}x{layout.height})")
        colour = layout if layout is not None else meta
        layout = meta
    elif layout is None:
        raise InvalidTensorError("this Gst.Buffer has no GstVideoMeta: give its caps (interop.wrap(sample), or "
                                 "interop.tensors.gst.wrap_buffer(buffer, caps)) so interop knows its planes")
    else:
        colour = layout
    fmt = GST_FORMATS.get(layout.format)
    if fmt is None:
        raise UnsupportedFormatError(f"GStreamer format {layout.format} is not supported; supported: "
                                     f"{', '.join(GST_FORMATS)}. Convert with videoconvert (a copy) before the appsink")
    specs = plane_layout(fmt)
    if len(layout.offsets) < len(specs):
        raise InvalidTensorError(f"a {layout.format} buffer needs {len(specs)} planes, its layout has {len(layout.offsets)}")
    Gst = gst()
    tensors: list[Tensor] = []
    memories: dict[int, Any] = {}
    total = ng.buffer_size(buf)
    for spec, off, pitch in zip(specs, layout.offsets, layout.strides):
        shape = spec.shape(layout.width, layout.height)
        if pitch < spec.row_bytes(layout.width):
            raise InvalidTensorError(f"plane {spec.name} of a {layout.width}x{layout.height} {layout.format} buffer "
                                     f"has stride {pitch}, less than its {spec.row_bytes(layout.width)}-byte rows")
        info = TensorInfo(shape, spec.dtype, (pitch,) + contiguous_strides(shape, spec.dtype.itemsize)[1:])
        if off + info.extent > total:
            raise InvalidTensorError(f"plane {spec.name} at offset {off} spans {info.extent} bytes; the buffer has "
                                     f"{total}")
        found = ng.find_memory(buf, off, info.extent)
        if found is None:
            raise InvalidTensorError(f"plane {spec.name} at offset {off} is not in the buffer's memories")
        idx, count, skip = found
        if count != 1:
            raise InvalidTensorError(
                f"plane {spec.name} spans {count} GstMemory blocks: reading it as one array would need them joined "
                f"(a copy). interop maps planes that each lie in one memory")
        mem = memories.get(idx)
        if mem is None:
            mem = memories[idx] = buffer.peek_memory(idx)
        tensors.append(GstTensor(mem, info, offset=skip, buffer=buffer, memory_index=idx, context=GST_CPU,
                                 parent=native if native is not None else buffer))
    pts = buffer.pts
    f = GstFrame(tensors, fmt, layout.width, layout.height, context=GST_CPU,
                 native=native if native is not None else buffer,
                 colorspace=_MATRICES.get(colour.matrix), color_range=_RANGES.get(colour.range),
                 pts=None if pts == Gst.CLOCK_TIME_NONE else int(pts),
                 time_base=NANOSECONDS)
    f._buffer = buffer
    f._caps = caps
    if buffer.duration != Gst.CLOCK_TIME_NONE:
        f.metadata["duration"] = int(buffer.duration)  # nanoseconds, as pts
    if colour.fps[0] > 0 and colour.fps[1] > 0:
        f.metadata["framerate"] = Fraction(colour.fps[0], colour.fps[1])
    return f


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
        return [BackendReport("GStreamer", False, reason=f"PyGObject is not installed: pip install 'interop[gst]' "
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


register_probe(12, _probe)
