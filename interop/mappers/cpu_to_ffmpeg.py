"""CPU -> FFMPEG: an ``av.VideoFrame`` over the CPU frame's own memory (``from_numpy_buffer`` / ``from_dlpack``).

Nothing is copied: packed and single-plane formats (RGB, BGR, RGBA, BGRA, GRAY8) go through
``VideoFrame.from_numpy_buffer`` with the array's row pitch; I420, NV12, P010 and GRAY16 through
``VideoFrame.from_dlpack``, each plane with its own pitch. The VideoFrame keeps the arrays alive. A single CPU
tensor becomes plane 0 of a GRAY8/GRAY16/RGB/RGBA frame, by its shape. Rows must be contiguous (a
column-strided array is refused, or copied with ``allow_copy=True``). The FFmpeg planes know the arrays' true
size (PyAV would claim line_size x rows, past an array whose last row ends at its last pixel).

A READ mapping is read-only through interop: ``numpy.asarray`` and ``np.from_dlpack`` of its planes give
read-only arrays and a WRITE mapping of it is refused. The ``av.VideoFrame``/``av.VideoPlane`` in ``.native``
cannot be made read-only (PyAV exposes a writeable buffer): writing through it writes into the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, contiguous_strides
from ..mapper import Cost, register
from ..meter import record_copy
from ..tensor import Tensor, _ArrayExport
from ..tensors._fastpath import FastMapper
from ..tensors.cpu import buffer_bounds
from ..tensors.ffmpeg import video_frame_from_planes, wrap_video_frame
from ..types import AccessMode, ColorRange, ColorSpace, FrameFormat, MemoryType

_AV_COLORSPACE = {ColorSpace.BT709: 1, ColorSpace.BT601: 6, ColorSpace.BT2020: 9, ColorSpace.SRGB: 0}
_AV_RANGE = {ColorRange.LIMITED: 1, ColorRange.FULL: 2}


@register
class CPUToFFmpeg(FastMapper):
    src = MemoryType.CPU
    dst = MemoryType.FFMPEG
    zero_copy = False  # arrays without contiguous rows are copied, only with allow_copy, and counted
    may_copy = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.COPY
        if not isinstance(obj, Frame):
            _format_of(obj.info)
        planes = obj.tensors if isinstance(obj, Frame) else [obj]
        shared = all(_rows_shared(t.native if isinstance(t.native, np.ndarray) else t.numpy()) for t in planes)
        return Cost.ZERO_COPY if shared else Cost.COPY

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        arrays = [self._array(t, mode, allow_copy, copies) for t in f.tensors]
        vf = video_frame_from_planes(arrays, f.format, f.width, f.height)
        self._check_shared(vf, arrays)
        _stamp(vf, f)
        writable = mode.writes and all(t.writable for t in f.tensors)  # a READ mapping is read-only
        out = wrap_video_frame(vf, writable=writable, parent=f, sizes=[_memory_size(a) for a in arrays])
        out.colorspace, out.color_range, out.pts, out.time_base = f.colorspace, f.color_range, f.pts, f.time_base
        out.metadata.update(f.metadata)
        if copies and mode.writes:
            out[0].on_release(_write_back(self.name, copies))
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        fmt = _format_of(t.info)
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        arr = self._array(t, mode, allow_copy, copies)
        vf = video_frame_from_planes([arr], fmt, arr.shape[1], arr.shape[0])
        self._check_shared(vf, [arr])
        out = wrap_video_frame(vf, writable=mode.writes and t.writable, parent=t, sizes=[_memory_size(arr)])[0]
        if copies and mode.writes:
            out.on_release(_write_back(self.name, copies))
        return out

    def _array(self, t: Tensor, mode: AccessMode, allow_copy: bool,
               copies: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        arr = t.native if isinstance(t.native, np.ndarray) else t.numpy()
        if mode.writes and not (t.writable and arr.flags.writeable):
            raise InvalidTensorError("this CPU tensor is read-only; map it with mode=READ")
        if not _rows_shared(arr):
            self.copying(t.info.nbytes, allow_copy, f"FFmpeg needs contiguous rows; this array has strides {arr.strides}")
            copy = np.ascontiguousarray(arr)
            copies.append((arr, copy))  # WRITE mappings copy back at release
            return copy
        if not arr.flags.writeable:
            # PyAV's DLPack import refuses read-only arrays; hand it a private alias and keep our tensors read-only
            iface = dict(arr.__array_interface__)
            iface["data"] = (iface["data"][0], False)
            arr = np.asarray(_ArrayExport(iface, arr))
        return arr

    def _check_shared(self, vf: Any, arrays: list[np.ndarray]) -> None:
        for p, a in zip(vf.planes, arrays):
            if p.buffer_ptr != a.__array_interface__["data"][0]:  # PyAV copied after all: say so
                raise InvalidTensorError("PyAV copied a plane instead of sharing it; this PyAV version does not "
                                         "support zero-copy import of this layout")


def _memory_size(arr: np.ndarray) -> int:
    """Bytes of memory from the array's first element to the end of the buffer under it (the array's own extent
    when that buffer cannot be found)."""
    start = int(arr.__array_interface__["data"][0])
    bounds = buffer_bounds(arr)
    if bounds is not None and bounds[0] <= start < bounds[1]:
        return bounds[1] - start
    return TensorInfo(arr.shape, arr.dtype, arr.strides).extent


def _rows_shared(arr: np.ndarray) -> bool:
    """Whether FFmpeg can take the array's rows as they are (contiguous rows, a positive pitch)."""
    return arr.ndim >= 2 and arr.strides[1:] == contiguous_strides(arr.shape[1:], arr.dtype.itemsize) and \
        arr.strides[0] > 0


def _stamp(vf: Any, f: Frame) -> None:
    """Carry timing and colour metadata to the VideoFrame, for encoders."""
    if f.pts is not None:
        vf.pts = f.pts
    if f.time_base is not None:
        vf.time_base = f.time_base
    try:
        if f.colorspace in _AV_COLORSPACE:
            vf.colorspace = _AV_COLORSPACE[f.colorspace]
        if f.color_range in _AV_RANGE:
            vf.color_range = _AV_RANGE[f.color_range]
    except AttributeError:  # older PyAV: read-only colour properties
        pass


def _format_of(info: TensorInfo) -> FrameFormat:
    shape, dt = info.shape, info.dtype
    if len(shape) == 2:
        if dt == np.uint8:
            return FrameFormat.GRAY8
        if dt == np.uint16:
            return FrameFormat.GRAY16
    if len(shape) == 3 and dt == np.uint8 and shape[2] in (3, 4):
        return FrameFormat.RGB if shape[2] == 3 else FrameFormat.RGBA
    raise InvalidTensorError(f"a single CPU tensor maps to FFmpeg as an image: (H, W) uint8/uint16 or (H, W, 3|4) uint8, "
                             f"got {shape} {dt}; for YUV, wrap the planes as a Frame (interop.Frame(planes, FrameFormat.I420))")


def _write_back(name: str, copies: list[tuple[np.ndarray, np.ndarray]]) -> Callable[[], None]:
    """At release of a WRITE mapping that had to copy: copy the frame's planes back into the caller's arrays."""
    def back() -> None:
        for dst, src in copies:
            np.copyto(dst, src)
            record_copy(name, src.nbytes)
    return back
