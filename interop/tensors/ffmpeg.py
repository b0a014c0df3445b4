"""FFmpeg frames: an ``av.VideoFrame`` as a Frame of plane tensors over the decoder's own buffers.

Every plane keeps its true pitch (``line_size``): an 854-wide yuv420p frame has Y rows of 864 or 896 bytes,
so plane strides are ``(line_size, 1)`` and nothing is repacked. Decoded frames are the decoder's reference
frames: their planes are wrapped read-only unless the caller says otherwise (``writable=True``, e.g. after
``VideoFrame.make_writable()``). Hardware frames (format ``cuda``) are described with their ``sw_format``;
their planes are not reachable from the CPU (``_host_address()`` is None).

PyAV reports a plane's ``buffer_size`` as line_size x rows. FFmpeg's own buffers (a decoder's frames, frames
FFmpeg allocates) hold that much and more, but a frame over memory FFmpeg did not allocate
(``VideoFrame.from_numpy_buffer`` / ``from_dlpack`` over an array whose last row ends at its last pixel) does not:
there, reading line_size x rows reads past the array. So a plane's memory is known by its true size
(``FFmpegTensor.buffer_size``): PyAV's figure for a decoder's frame (``pict_type`` set) or one FFmpeg allocated, the
arrays' own for frames interop builds over arrays, and for any other frame only its visible extent. Where that is
less than PyAV's figure the plane is read through a ``ForeignPlane`` (exactly those bytes, with the plane's
attributes), so every consumer, numpy's bounds checks included, sees the true size.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .._cache import IdentityCache
from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    register_backend,
    register_wrapper,
    require,
)
from ..context import Context, register_default_context
from ..errors import InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError, WrongMemoryError
from ..frame import Frame
from ..info import TensorInfo, contiguous_strides, plane_layout
from ..tensor import Tensor
from ..types import ColorRange, ColorSpace, FrameFormat, MemoryType
from ._fastpath import FastMapper

# FFmpeg pixel format name -> (FrameFormat, range implied by the format or None)
PIXEL_FORMATS: dict[str, tuple[FrameFormat, ColorRange | None]] = {
    "yuv420p": (FrameFormat.I420, None),
    "yuvj420p": (FrameFormat.I420, ColorRange.FULL),
    "nv12": (FrameFormat.NV12, None),
    "nv21": (FrameFormat.NV21, None),
    "p010le": (FrameFormat.P010, None),
    "rgb24": (FrameFormat.RGB, None),
    "bgr24": (FrameFormat.BGR, None),
    "rgba": (FrameFormat.RGBA, None),
    "bgra": (FrameFormat.BGRA, None),
    "rgb0": (FrameFormat.RGBX, None),
    "bgr0": (FrameFormat.BGRX, None),
    "gray": (FrameFormat.GRAY8, None),
    "gray16le": (FrameFormat.GRAY16, None),
    "yuv422p": (FrameFormat.I422, None),
    "yuvj422p": (FrameFormat.I422, ColorRange.FULL),
    "yuv444p": (FrameFormat.I444, None),
    "yuvj444p": (FrameFormat.I444, ColorRange.FULL),
    "yuv420p10le": (FrameFormat.I420_10, None),
    "yuv422p10le": (FrameFormat.I422_10, None),
    "yuv444p10le": (FrameFormat.I444_10, None),
    "yuv420p12le": (FrameFormat.I420_12, None),
    "gray10le": (FrameFormat.GRAY10, None),
}
#: FrameFormat -> the FFmpeg pixel format used when making VideoFrames from CPU planes
AV_FORMATS: dict[FrameFormat, str] = {fmt: name for name, (fmt, rng) in PIXEL_FORMATS.items() if rng is None}

#: hardware pixel formats whose planes live in device memory
HARDWARE_FORMATS = frozenset({"cuda", "vaapi", "qsv", "d3d11", "dxva2_vld", "videotoolbox_vld", "vulkan", "drm_prime"})

# AVColorSpace -> ColorSpace (unspecified and the rest -> None)
_COLORSPACES = {0: ColorSpace.SRGB, 1: ColorSpace.BT709, 5: ColorSpace.BT601, 6: ColorSpace.BT601,
                9: ColorSpace.BT2020, 10: ColorSpace.BT2020}
_RANGES = {1: ColorRange.LIMITED, 2: ColorRange.FULL}


def supported_pixel_formats() -> list[str]:
    return list(PIXEL_FORMATS)


class FFmpegContext(Context):
    """FFmpeg frames of one device: ``"cpu"`` for software frames, ``"cuda:N"`` for CUDA hardware frames."""

    memory_type = MemoryType.FFMPEG

    def __init__(self, device: str = "cpu"):
        super().__init__(native=None, device=device)

    def key(self) -> Any:
        return self._device


FFMPEG_CPU = FFmpegContext("cpu")
register_default_context(MemoryType.FFMPEG, lambda: FFMPEG_CPU)
_hw_contexts: dict[str, FFmpegContext] = {}


def ffmpeg_context(device: str) -> FFmpegContext:
    if device == "cpu":
        return FFMPEG_CPU
    ctx = _hw_contexts.get(device)
    if ctx is None:
        ctx = _hw_contexts.setdefault(device, FFmpegContext(device))
    return ctx


class ForeignPlane(np.ndarray):
    """The bytes really behind one plane of an av.VideoFrame over memory FFmpeg did not allocate: a uint8 array of
    exactly those bytes (numpy views of it are bounds-checked against them) that also answers the av.VideoPlane's
    attributes, ``buffer_size`` being the true size. ``plane`` is the av.VideoPlane (kept alive by this array)."""

    plane: Any
    buffer_ptr: int
    buffer_size: int
    line_size: int
    width: int
    height: int


def foreign_plane(plane: Any, size: int) -> ForeignPlane:
    """``plane``'s first ``size`` bytes as a ForeignPlane (``size`` at most PyAV's ``buffer_size``)."""
    # a memoryview of the true size ends the array's base chain: code that looks for the buffer under a view
    # (cpu_to_openvino's buffer_bounds) finds this size, not PyAV's
    out = np.frombuffer(memoryview(plane)[:size], np.uint8).view(ForeignPlane)
    out.plane, out.buffer_ptr, out.buffer_size = plane, int(plane.buffer_ptr), size
    out.line_size, out.width, out.height = plane.line_size, plane.width, plane.height
    return out


def _is_plane(obj: Any) -> bool:
    return type(obj) is ForeignPlane or class_in(type(obj), "av", "VideoPlane")


class FFmpegTensor(Tensor):
    """One plane of an ``av.VideoFrame``. ``native`` is the ``av.VideoPlane``; ``offset`` is in bytes.

    The plane (and through it the frame and its AVBuffer) stays alive as long as this tensor or any numpy view
    of it does, so views outlive the decoder moving on. ``buffer_size`` is the memory really behind the plane (see
    the module's docstring); layouts and views never reach past it.

    ``writable=False`` (decoded frames, and every READ mapping) makes numpy and DLPack views of it read-only.
    The ``av.VideoPlane`` in ``native`` cannot be made read-only: PyAV exposes its buffer as writeable, and a
    write through it lands in the frame (a decoder's reference frame, or the source of a READ mapping).
    """

    memory_type = MemoryType.FFMPEG
    HANDLE_KEYS = {"data": "data_ptr"}

    def __init__(self, plane: Any, info: TensorInfo, *, offset: int = 0, hardware: bool = False,
                 context: Context | None = None, parent: Any = None, writable: bool = False,
                 video_frame: Any = None, index: int = -1):
        if not _is_plane(plane):
            raise UnsupportedTypeError(f"FFmpegTensor wraps an av.VideoPlane, not {type(plane).__name__}")
        if not isinstance(info, TensorInfo):
            raise InvalidTensorError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
        if offset < 0 or offset + info.extent > plane.buffer_size:
            raise InvalidTensorError(f"layout {info} at offset {offset} does not fit the plane's {plane.buffer_size} bytes")
        super().__init__(plane, info, context=context or (ffmpeg_context("cuda:0") if hardware else FFMPEG_CPU),
                         parent=parent, writable=writable)
        self._offset = offset
        self._hardware = hardware
        self._frame = video_frame
        self._index = index

    @classmethod
    def _trusted(cls, plane: Any, info: TensorInfo, offset: int, hardware: bool, context: Context, parent: Any,
                 writable: bool, video_frame: Any, index: int) -> FFmpegTensor:
        t = cls._unchecked(plane, info, context, parent, writable)
        t._offset = offset
        t._hardware = hardware
        t._frame = video_frame
        t._index = index
        return t

    @property
    def video_frame(self) -> Any:
        """The av.VideoFrame this plane belongs to (None when unknown)."""
        return self._frame

    @property
    def index(self) -> int:
        """Plane index in the VideoFrame (-1 when unknown)."""
        return self._index

    @property
    def native(self) -> Any:
        """The av.VideoPlane."""
        self._check()
        n = self._native
        return n.plane if type(n) is ForeignPlane else n

    @property
    def plane(self) -> Any:
        """The av.VideoPlane (same as ``native``)."""
        return self.native

    @property
    def buffer_size(self) -> int:
        """Bytes of memory behind the plane from element 0 (``buffer_ptr``) on: PyAV's ``buffer_size`` for FFmpeg's
        own buffers, the true size for a frame over foreign memory (see the module's docstring)."""
        self._check()
        return int(self._native.buffer_size) - self._offset

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def line_size(self) -> int:
        """Bytes per row (the pitch), padding included."""
        return self._info.strides[0]

    @property
    def is_hardware(self) -> bool:
        """True for planes of hardware frames (device memory the CPU cannot read)."""
        return self._hardware

    @property
    def buffer_ptr(self) -> int:
        """Address of element 0 in whatever memory the plane lives in (a device pointer for hardware frames)."""
        self._check()
        return int(self._native.buffer_ptr) + self._offset

    def _host_address(self) -> int | None:
        if self._hardware:
            return None
        return int(self._native.buffer_ptr) + self._offset

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        return FFmpegTensor(self._native, info, offset=self._offset + offset, hardware=self._hardware,
                            context=self._context, parent=self, writable=self._writable, video_frame=self._frame,
                            index=self._index)

    def as_array(self, info: TensorInfo | None = None, writable: bool | None = None) -> np.ndarray:
        """A numpy view of the plane (``info`` defaults to the tensor's own), read-only unless writable.

        The array's base is the av.VideoPlane, which keeps the frame's buffer alive.
        """
        self._check()
        if self._hardware:
            raise InvalidTensorError("a hardware frame's planes are in device memory; map it to CUDA, not to the CPU")
        info = self._info if info is None else info
        arr = np.ndarray(info.shape, info.dtype, buffer=self._native, offset=self._offset, strides=info.strides)
        if not (self._writable if writable is None else writable):
            arr.flags.writeable = False
        return arr


# ---- per-format layout cache ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    format: FrameFormat
    implied_range: ColorRange | None
    infos: tuple[TensorInfo, ...]
    #: each plane's true size where it is less than PyAV's buffer_size (its planes are then ForeignPlanes), else None
    sizes: tuple[int, ...] | None = None


# Bounded: a process that sees many distinct sizes must not grow without end.
_layouts: IdentityCache[tuple[str, int, int, tuple[int, ...]], _Layout] = IdentityCache(256)
_layout_hit = _layouts.get  # bound once: read on every frame


def _layout(fmt_name: str, vf: Any, planes: Any) -> _Layout:
    """The layout of ``vf``'s ``planes`` read as pixel format ``fmt_name`` (its own, or a hardware frame's
    sw_format), cached per (format, size, pitches); validated on first sight."""
    width, height = vf.width, vf.height
    line_sizes = tuple([p.line_size for p in planes])
    key = (fmt_name, width, height, line_sizes)
    lay = _layout_hit(key)
    if lay is not None:
        return lay
    try:
        fmt, implied = PIXEL_FORMATS[fmt_name]
    except KeyError:
        raise UnsupportedFormatError(
            f"pixel format {fmt_name!r} is not supported; supported: {', '.join(PIXEL_FORMATS)}. "
            f"Convert the frame first, e.g. frame.reformat(format='yuv420p') (a copy)") from None
    specs = plane_layout(fmt)
    if len(line_sizes) != len(specs):
        raise InvalidTensorError(f"a {fmt_name} frame should have {len(specs)} planes, this one has {len(line_sizes)}")
    infos = []
    for spec, pitch, plane in zip(specs, line_sizes, planes):
        shape = spec.shape(width, height)
        if pitch < spec.row_bytes(width):
            raise InvalidTensorError(f"plane {spec.name} of a {width}x{height} {fmt_name} frame has line_size {pitch}, "
                                     f"less than its {spec.row_bytes(width)}-byte rows (negative line sizes are not supported)")
        info = TensorInfo(shape, spec.dtype, (pitch,) + contiguous_strides(shape, spec.dtype.itemsize)[1:])
        if info.extent > plane.buffer_size:
            raise InvalidTensorError(f"plane {spec.name} of a {fmt_name} frame spans {info.extent} bytes, "
                                     f"its buffer has {plane.buffer_size}")
        infos.append(info)
    return _layouts.put(key, _Layout(fmt, implied, tuple(infos)))


_sized_layouts: IdentityCache[tuple[int, tuple[int, ...]], _Layout] = IdentityCache(256)


def _true_planes(vf: Any, planes: Any, lay: _Layout, sizes: Any) -> tuple[Any, _Layout]:
    """(planes, layout) of a software frame with each plane's memory at its true size (see the module's docstring).

    ``sizes``: the bytes behind each plane from its first byte, as the caller knows them; None: PyAV's figure for a
    decoder's frame (``pict_type`` set: FFmpeg allocated it), else only the visible extent. A plane whose size is
    less than PyAV's ``buffer_size`` becomes a ForeignPlane, and the frame gets a layout of its own (consumers
    cache what they may do per layout)."""
    if sizes is None:
        if vf.pict_type:  # a decoder's frame: FFmpeg's buffers hold line_size x rows and more
            return planes, lay
        sizes = [info.extent for info in lay.infos]
    cut = False
    for p, n in zip(planes, sizes):
        if n < p.buffer_size:
            cut = True
            break
    if not cut:
        return planes, lay
    true = tuple([min(int(n), int(p.buffer_size)) for p, n in zip(planes, sizes)])
    key = (id(lay), true)
    sized = _sized_layouts.get(key)
    if sized is None:
        for spec_info, n in zip(lay.infos, true):
            if spec_info.extent > n:
                raise InvalidTensorError(f"a {lay.format.name} plane of {vf.width}x{vf.height} spans {spec_info.extent} "
                                         f"bytes, but only {n} bytes of memory lie behind it")
        sized = _sized_layouts.put(key, _Layout(lay.format, lay.implied_range, lay.infos, true), lay)
    return [foreign_plane(p, n) if n < p.buffer_size else p for p, n in zip(planes, true)], sized


_frame_classes: set[type] = set()


def is_video_frame(obj: object) -> bool:
    cls = type(obj)
    if cls in _frame_classes:
        return True
    if class_in(cls, "av", "VideoFrame"):
        _frame_classes.add(cls)
        return True
    return False


def wrap_video_frame(vf: Any, *, writable: bool = False, parent: Any = None, sizes: Any = None,
                     allocated: bool = False) -> Frame:
    """An av.VideoFrame as a Frame of FFmpegTensors (zero-copy), with format, colour and timing from the frame.

    ``writable=False`` (the default) makes every plane read-only: decoded frames are reference frames, and a
    write would corrupt the frames decoded after them. Pass True only for frames you own (made writable
    with ``make_writable()``, or built from your own arrays). Hardware frames use their ``sw_format``.
    ``sizes``: the bytes of memory behind each plane from its first byte, for a frame over memory the caller knows
    (arrays); ``allocated=True``: FFmpeg allocated the frame (``av.VideoFrame(w, h, format)``), so PyAV's
    ``buffer_size`` holds. Otherwise a frame that no decoder made is trusted only for its visible extent.
    """
    if not is_video_frame(vf):
        raise UnsupportedTypeError(f"wrap_video_frame() takes an av.VideoFrame, not {type(vf).__name__}")
    fmt_name = vf.format.name
    hardware = fmt_name in HARDWARE_FORMATS
    ctx: Context = FFMPEG_CPU
    if hardware:
        sw = vf.sw_format
        if sw is None:
            raise UnsupportedFormatError(f"a {fmt_name} hardware frame without a sw_format cannot be described as planes")
        fmt_name = sw.name
        ctx = ffmpeg_context(f"{vf.format.name}:{int(getattr(vf, '_device_id', 0) or 0)}")
    planes = vf.planes
    lay = _layout(fmt_name, vf, planes)
    if not hardware and not allocated:
        planes, lay = _true_planes(vf, planes, lay, sizes)
    return _wrap_planes(vf, planes, lay, ctx, hardware, bool(writable), parent)


def _wrap_planes(vf: Any, planes: Any, lay: _Layout, ctx: Context, hardware: bool, writable: bool,
                 parent: Any) -> Frame:
    owner = vf if parent is None else parent
    tensors = []
    for i, (p, info) in enumerate(zip(planes, lay.infos)):
        t = FFmpegTensor._unchecked(p, info, ctx, owner, writable)
        t._offset, t._hardware, t._frame, t._index = 0, hardware, vf, i
        tensors.append(t)
    f = Frame._unchecked(tensors, lay.format, vf.width, vf.height, ctx, parent)
    f._native = vf
    f._attr_src = (_frame_attrs, (vf, lay.implied_range))  # read from the AVFrame on first use
    return f


# ---- one-step mapping of decoded frames ---------------------------------------------------------------
# interop.map(vf, CPU / OPENVINO) runs once per decoded frame. The general path wraps the frame as FFmpeg
# tensors, then maps each; the one-step path (mappers' map_native) reads the planes once and builds the mapped
# planes from them directly. The FFmpeg frame in between, which only `.parent` shows, is made if someone asks.


def software_planes(vf: Any) -> tuple[Any, _Layout] | None:
    """(planes, layout) of a software av.VideoFrame, or None for a hardware frame (the general path refuses
    those with the right advice). An unsupported pixel format or a bad pitch raises as wrap() does. A plane over
    memory smaller than PyAV's ``buffer_size`` is a ForeignPlane (see the module's docstring)."""
    fmt_name = vf.format.name
    if fmt_name in HARDWARE_FORMATS:
        return None
    planes = vf.planes
    lay = _layout(fmt_name, vf, planes)
    if vf.pict_type:  # a decoder's frame (the per-frame path): PyAV's buffer_size holds
        return planes, lay
    return _true_planes(vf, planes, lay, None)


def hardware_planes(vf: Any, hw_name: str) -> tuple[Any, _Layout] | None:
    """(planes, layout of the sw_format) of a hardware av.VideoFrame of format ``hw_name``, or None when the
    frame is not one (or has no supported sw_format: the general path says why)."""
    if vf.format.name != hw_name:
        return None
    sw = vf.sw_format
    if sw is None or sw.name not in PIXEL_FORMATS:
        return None
    planes = vf.planes
    return planes, _layout(sw.name, vf, planes)


class FFmpegMapper(FastMapper):
    """A mapper from FFMPEG memory: it takes av.VideoFrames as they are (wrapped here, not by interop.wrap())."""

    src = MemoryType.FFMPEG

    def _wrap_input(self, obj: Any) -> Frame | None:
        return wrap_video_frame(obj) if is_video_frame(obj) else None


class DecodedSource:
    """A decoded av.VideoFrame, its planes and layout, shared by the frame and planes mapped from it in one
    step; ``frame()`` is the FFmpeg Frame of read-only planes the general path would have made (``context``:
    the FFmpeg context of a hardware frame, None for software frames)."""

    __slots__ = ("vf", "planes", "layout", "context", "_frame")

    def __init__(self, vf: Any, planes: Any, layout: _Layout, context: FFmpegContext | None = None):
        self.vf, self.planes, self.layout, self.context = vf, planes, layout, context
        self._frame: Frame | None = None

    def frame(self) -> Frame:
        f = self._frame
        if f is None:
            ctx = self.context
            f = self._frame = _wrap_planes(self.vf, self.planes, self.layout, ctx or FFMPEG_CPU, ctx is not None,
                                           False, None)
        return f


class SourcedTensor(Tensor):
    """Mixin for planes mapped in one step: ``_parent`` is the DecodedSource (it keeps the frame alive) and
    ``parent`` the FFmpegTensor of plane ``_index``, made on first use."""

    _index: int

    @property
    def parent(self) -> Any:
        src = self._parent
        return src.frame()[self._index] if type(src) is DecodedSource else src


class SourcedFrame(Frame):
    """A frame mapped in one step from an av.VideoFrame; ``parent`` (the FFmpeg Frame) and ``metadata`` are made
    on first use."""

    _metadata_on_demand = True
    _metadata: dict[str, Any] | None = None

    @property
    def parent(self) -> Any:
        src = self._parent
        return src.frame() if type(src) is DecodedSource else src

    @property  # type: ignore[override]
    def metadata(self) -> dict[str, Any]:
        md = self._metadata
        if md is None:
            md = self._metadata = {}
        return md

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._metadata = value


def sourced_frame(src: DecodedSource, tensors: list[Any], context: Context | None) -> Frame:
    lay, vf = src.layout, src.vf
    f = SourcedFrame._unchecked(tensors, lay.format, vf.width, vf.height, context, src)
    f._attr_src = (_frame_attrs, (vf, lay.implied_range))
    return f  # type: ignore[no-any-return]


def _frame_attrs(src: tuple[Any, Any]) -> tuple[Any, Any, Any, Any]:
    vf, implied_range = src
    tb = vf.time_base
    if tb is not None and type(tb) is not Fraction:
        tb = Fraction(tb)
    return _COLORSPACES.get(vf.colorspace), implied_range or _RANGES.get(vf.color_range), vf.pts, tb


def _wrap(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
          context: Context | None = None) -> Frame:
    if info is not None or format is not None:
        raise UnsupportedTypeError("an av.VideoFrame carries its own layout and pixel format: do not pass info= or format=")
    if context is not None and context.memory_type is not MemoryType.FFMPEG:
        raise UnsupportedTypeError(f"an av.VideoFrame is FFmpeg memory; it cannot belong to {context!r}")
    return wrap_video_frame(obj)


register_wrapper(Wrapper("av.VideoFrame", lambda c: class_in(c, "av", "VideoFrame"), _wrap, priority=50))


# ---- WRITE access to decoded frames --------------------------------------------------------------------


def refuse_hardware(what: str, target: str) -> InvalidTensorError:
    return WrongMemoryError(
        f"{what} is a hardware frame: its planes are in GPU memory, which the CPU cannot read, so it cannot be "
        f"mapped to {target} directly. Map it to MemoryType.CUDA (interop.map(frame, MemoryType.CUDA)), or download "
        f"it to a software frame first (a copy)")


def writable_frame(f: Frame, mapper: Any, allow_copy: bool) -> Frame:
    """A writable FFmpeg Frame for WRITE/READ_WRITE mappings of ``f`` (whose planes may be read-only).

    A read-only frame (a decoder's reference frame, or any av.VideoFrame interop cannot prove it owns) is copied
    into a new av.VideoFrame: refused unless ``allow_copy``, then counted through ``mapper.copying()``. The caller's
    frame is never modified: ``VideoFrame.make_writable()`` would swap its buffers in place, and every view taken
    of it earlier would then read memory the decoder recycles. Writes land in the copy (the returned frame's
    ``native``); wrap frames you own with ``wrap_video_frame(vf, writable=True)`` to write into them directly.
    """
    tensors: list[Any] = f.tensors
    if all(t.writable for t in tensors):
        return f
    vf = f.native
    if not is_video_frame(vf) or any(t.offset or t.info.shape != i.shape for t, i in
                                      zip(tensors, _layout_of(vf).infos)):
        raise InvalidTensorError("only a whole av.VideoFrame can be made writable; map the full frame for WRITE, "
                                 "then crop the result")
    mapper.copying(sum(t.info.nbytes for t in tensors), allow_copy,
                   "a decoded frame is a reference frame: writing needs a writable copy of it (a new VideoFrame)")
    av = require("av", "ffmpeg")
    new = av.VideoFrame(vf.width, vf.height, vf.format.name)
    if vf.pts is not None:
        new.pts = vf.pts
    if vf.time_base is not None:  # PyAV refuses None here
        new.time_base = vf.time_base
    for attr in ("colorspace", "color_range"):
        try:
            setattr(new, attr, getattr(vf, attr))
        except (AttributeError, TypeError, ValueError):  # older PyAV: read-only there; Frame carries them anyway
            pass
    out = wrap_video_frame(new, writable=True, parent=f, allocated=True)
    planes: list[Any] = out.tensors  # FFmpegTensors
    for src, dst in zip(tensors, planes):
        np.copyto(dst.as_array(None, True), src.as_array())
    out.metadata.update(f.metadata)
    out._copy_attrs(f)
    return out


def _layout_of(vf: Any) -> _Layout:
    planes = vf.planes
    fmt_name = vf.format.name
    if fmt_name in HARDWARE_FORMATS:
        fmt_name = vf.sw_format.name
    return _layout(fmt_name, vf, planes)


# ---- CPU planes -> VideoFrame ---------------------------------------------------------------------------


def video_frame_from_planes(arrays: list[np.ndarray], format: FrameFormat, width: int, height: int) -> Any:
    """An av.VideoFrame over the memory of CPU plane arrays, zero-copy (the frame keeps the arrays alive).

    Packed and single-plane formats go through ``VideoFrame.from_numpy_buffer`` (any row pitch); the planar YUV
    formats (I420, I422, I444 and their 10/12-bit forms), NV12, P010 and GRAY16 through ``VideoFrame.from_dlpack``
    (each plane with its own pitch; PyAV wants an even size where chroma is subsampled).
    """
    av = require("av", "ffmpeg")
    name = AV_FORMATS.get(format)
    if name is None or format in (FrameFormat.RGBX, FrameFormat.BGRX, FrameFormat.NV21):
        ok = ", ".join(f.name for f in AV_FORMATS if f not in (FrameFormat.RGBX, FrameFormat.BGRX, FrameFormat.NV21))
        raise UnsupportedFormatError(f"PyAV cannot build a {format.name} VideoFrame over existing memory; supported: {ok}")
    specs = plane_layout(format)
    if len(arrays) != len(specs):
        raise InvalidTensorError(f"a {format.name} frame has {len(specs)} planes, got {len(arrays)}")
    for spec, a in zip(specs, arrays):
        want = spec.shape(width, height)
        if a.shape != want or a.dtype != spec.dtype:
            raise InvalidTensorError(f"plane {spec.name} of a {width}x{height} {format.name} frame must be {want} "
                                     f"{spec.dtype}, got {a.shape} {a.dtype}")
        inner = contiguous_strides(want, spec.dtype.itemsize)[1:]
        if a.strides[1:] != inner:
            raise InvalidTensorError(f"plane {spec.name} must have contiguous rows (strides (pitch,) + {inner}), "
                                     f"got {a.strides}")
    VideoFrame = av.VideoFrame
    try:
        if len(specs) == 1 and format is not FrameFormat.GRAY16:
            vf = VideoFrame.from_numpy_buffer(arrays[0], format=name)
        elif format in (FrameFormat.NV12, FrameFormat.P010):
            vf = VideoFrame.from_dlpack(tuple(arrays), format=name)
        else:
            vf = VideoFrame.from_dlpack(tuple(arrays), format=name, width=width, height=height)
    except (ValueError, TypeError, NotImplementedError, BufferError) as e:
        raise InvalidTensorError(f"PyAV refused the {format.name} planes: {e}") from e
    return vf


# ---- doctor ---------------------------------------------------------------------------------------------


def _probe() -> list[BackendReport]:
    why = BACKEND.missing()
    if why is not None:
        return [BackendReport(BACKEND.title, False, reason=f"PyAV {why}")]
    try:
        av = require("av", "ffmpeg")
        ver = f"PyAV {av.__version__}, FFmpeg {av.ffmpeg_version_info}" if hasattr(av, "ffmpeg_version_info") \
            else f"PyAV {av.__version__}"
        return [BackendReport(BACKEND.title, True, ver, ["cpu (software frames)"], "A")]
    except Exception as e:  # a broken install is a row that says so
        return [BackendReport(BACKEND.title, False, reason=f"PyAV failed to import: {e}")]


BACKEND = register_backend(Backend("ffmpeg", "FFmpeg", (MemoryType.FFMPEG,), tier="A", extra="ffmpeg", requires=("av",),
                                   probe=_probe))
