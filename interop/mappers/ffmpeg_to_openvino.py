"""FFMPEG -> OPENVINO: each plane of an av.VideoFrame as a host ``ov.Tensor`` over the decoder's memory.

``ov.Tensor(array)`` shares only writeable, C-contiguous arrays (feasibility Q5), and a decoded plane is
neither (a read-only reference frame with padded rows). So each plane goes to OpenVINO whole, at full pitch,
shaped ``(1, rows, pitch_in_elements, C)`` (C = 1 for Y/U/V, 2 for UV, 3/4 for packed RGB), through
``ov.Tensor(array, shape, type)``, which shares the plane's bytes as they are: nothing is copied, the padding
is cropped inside the model, and OpenVINO never writes its inputs. The OpenVINOTensors handed back are
read-only for the user (numpy views refuse writes). ``frame.width`` / ``frame.height`` stay the visible size.
Each plane's ``ov.Tensor`` is made when ``native`` is first read (see PlaneTensor)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, plane_layout
from ..mapper import Cost, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors._fastpath import derive_frame
from ..tensors.ffmpeg import (
    DecodedSource,
    FFmpegMapper,
    FFmpegTensor,
    SourcedTensor,
    refuse_hardware,
    software_planes,
    sourced_frame,
    writable_frame,
)
from ..tensors.openvino import OpenVINOContext, OpenVINOTensor, default_context, ov_module
from ..types import AccessMode, MemoryType


class _Shared:
    """How OpenVINO shares one plane layout: the full-pitch TensorInfo and its ov.Shape / element type."""

    __slots__ = ("full", "shape", "type")

    def __init__(self, full: TensorInfo, ov: Any):
        self.full = full
        self.shape = ov.Shape(list(full.shape))
        self.type = ov.Type(full.dtype)


_shared: dict[int, tuple[TensorInfo, _Shared | None]] = {}


def full_pitch_info(info: TensorInfo) -> TensorInfo | None:
    """(1, rows, pitch_elems, C) C-contiguous covering every row at full pitch, or None when the pitch is not a
    whole number of pixels (e.g. an RGB plane whose pitch is not a multiple of 3)."""
    shape, strides = info.shape, info.strides
    channels = shape[2] if len(shape) == 3 else 1
    pixel = channels * info.itemsize
    pitch = strides[0]
    inner_ok = strides[1:] == ((pixel, info.itemsize) if len(shape) == 3 else (info.itemsize,))
    if len(shape) in (2, 3) and inner_ok and pitch % pixel == 0:
        return TensorInfo((1, shape[0], pitch // pixel, channels), info.dtype)
    return None


def shared_spec(info: TensorInfo, ov: Any) -> _Shared | None:
    """The cached _Shared of a plane layout, or None when OpenVINO cannot share it (see full_pitch_info)."""
    hit = _shared.get(id(info))  # TensorInfos are interned: one entry per plane layout of the stream
    if hit is not None and hit[0] is info:
        return hit[1]
    full = full_pitch_info(info)
    out = None if full is None else _Shared(full, ov)
    if len(_shared) > 1024:
        _shared.clear()
    _shared[id(info)] = (info, out)
    return out


class _LayoutSpecs:
    """How OpenVINO shares every plane of one frame layout: each plane's _Shared and its full-pitch TensorInfo."""

    __slots__ = ("specs", "infos")

    def __init__(self, specs: tuple[_Shared, ...]):
        self.specs = specs
        self.infos = tuple(s.full for s in specs)


_specs: dict[int, tuple[Any, _LayoutSpecs | None]] = {}


def _layout_specs(lay: Any, planes: Any) -> _LayoutSpecs | None:
    """shared_spec of every plane of a frame layout (cached per layout), or None if one cannot be shared: a
    pitch that is not whole pixels, or a full-pitch plane longer than its buffer (PyAV's ``buffer_size`` is
    line_size x plane rows, both fixed by the layout, so ``planes`` of any frame of the layout decide it)."""
    hit = _specs.get(id(lay))
    if hit is not None and hit[0] is lay:
        return hit[1]
    ov = ov_module()
    specs = [shared_spec(info, ov) for info in lay.infos]
    found = tuple(s for s in specs if s is not None)
    out = None
    if len(found) == len(specs) and all(s.full.nbytes <= p.buffer_size for s, p in zip(found, planes)):
        out = _LayoutSpecs(found)
    if len(_specs) > 256:
        _specs.clear()
    _specs[id(lay)] = (lay, out)
    return out


class PlaneTensor(SourcedTensor, OpenVINOTensor):
    """An ov.Tensor over a decoded plane at full pitch (host memory; read-only for interop's users).

    The ov.Tensor is made on first use of ``native``, as CPU plane views make their arrays: OpenVINO's
    constructor costs more than the rest of the map (1.1 µs a plane), numpy and DLPack exports work from the
    address alone, and interop.Inference feeds requests from its own ov.Tensors over the same addresses (see
    inference.py). ``_plane`` (the av.VideoPlane), ``_offset`` and ``_spec`` (full-pitch shape and element type)
    are set at the map; the plane is kept alive by ``_parent`` until then and by the ov.Tensor's array after."""

    _plane: Any
    _spec: _Shared
    _remote = False
    _offset = 0
    _addr = None  # OpenVINOTensor's state; a plane's address is read from the plane (_host_address)
    _array = None  # the array under the ov.Tensor is the ov.Tensor's to keep

    @property
    def native(self) -> Any:
        """The ov.Tensor over the plane (made once; it keeps the plane's memory alive as long as it lives)."""
        self._check()
        n = self._native
        if n is None:  # two threads may both make one: either is the same view of the same memory
            spec = self._spec
            flat = frombuffer(self._plane, uint8, spec.full.nbytes, self._offset)  # keeps the plane's AVBuffer
            n = self._native = ov_module().Tensor(flat, spec.shape, spec.type)
        return n

    def _host_address(self) -> int | None:
        return self._plane.buffer_ptr + self._offset  # type: ignore[no-any-return]

    def shared_memory(self) -> tuple[int, _Shared]:
        """(address, layout) of the memory ``native`` shares: the plane at full pitch, whose ``full`` TensorInfo,
        ``shape`` (ov.Shape) and ``type`` (ov.Type) an ov.Tensor over the same address takes (interop.Inference
        keeps such tensors for the buffers a decoder reuses). Valid while this tensor (or its frame) lives."""
        self._check()
        return self._plane.buffer_ptr + self._offset, self._spec


def _ov_plane(plane: Any, offset: int, spec: _Shared, ctx: OpenVINOContext, parent: Any, index: int,
              writable: bool) -> OpenVINOTensor:
    # ov.Tensor(array, shape, type) shares the array's memory as it is (read-only arrays too: OpenVINO never
    # writes its inputs) and does NOT check that the shape fits the array: the caller checked the buffer size.
    o = PlaneTensor._unchecked(None, spec.full, ctx, parent, writable)
    o._plane, o._index, o._spec, o._offset = plane, index, spec, offset  # _unchecked_planes' order, then the rest
    return o  # type: ignore[no-any-return]


def _shared_plane(t: Any, spec: _Shared | None) -> _Shared | None:
    """``spec`` when OpenVINO may share the plane of FFmpegTensor ``t`` at full pitch, else None. PyAV's
    ``buffer_size`` is line_size x rows: a decoder's buffers hold that much, but a frame over memory interop imported
    (CPU -> FFMPEG wraps arrays with from_numpy_buffer / from_dlpack) may end at the last visible pixel, so such a
    plane is shared only when its rows have no padding."""
    if spec is None or t._offset + spec.full.nbytes > t._native.buffer_size:
        return None
    owner = t._parent
    while isinstance(owner, FFmpegTensor):  # a region of a plane: the plane it is cut from
        owner = owner._parent
    imported = isinstance(owner, (Tensor, Frame)) and owner.memory_type is not MemoryType.FFMPEG
    return spec if not imported or spec.full.nbytes == t._info.extent else None  # no padding to read past


@register
class FFmpegToOpenVINO(FFmpegMapper):
    dst = MemoryType.OPENVINO
    zero_copy = False  # a plane whose pitch is not whole pixels, or WRITE of a decoded frame, copies (allow_copy)
    may_copy = True
    inputs = (FFmpegTensor,)
    refuse_read_only = False  # WRITE of a decoded frame maps a counted writable copy

    def map_native(self, vf: Any, mode: AccessMode, allow_copy: bool) -> Frame | None:
        """interop.map(vf, OPENVINO) in one step for a software av.VideoFrame in READ mode whose planes OpenVINO
        can share; None: take the general path (copies, hardware frames and their advice live there)."""
        if mode is not READ:
            return None
        found = software_planes(vf)
        if found is None:
            return None
        planes, lay = found
        shared = _layout_specs(lay, planes)
        if shared is None:
            return None
        ctx = self._context()
        src = DecodedSource(vf, planes, lay)
        return sourced_frame(src, _planes(shared.infos, planes, ctx, src, shared.specs), ctx)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.COPY
        planes = obj.tensors if isinstance(obj, Frame) else [obj]
        for t in planes:
            if t.is_hardware:  # type: ignore[attr-defined]
                raise refuse_hardware("this frame", "OpenVINO host tensors")
        if mode is not AccessMode.READ and not all(t.writable for t in planes):
            if not isinstance(obj, Frame):
                raise InvalidTensorError("map the whole frame with mode=WRITE (allow_copy=True) to write into a "
                                         "decoded frame")
            return Cost.COPY
        ov = ov_module()
        for t in planes:
            if _shared_plane(t, shared_spec(t.info, ov)) is None:
                return Cost.COPY
        return Cost.ZERO_COPY

    def _context(self) -> OpenVINOContext:
        ctx = self._output_context
        return ctx if isinstance(ctx, OpenVINOContext) else default_context()

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        if mode is not AccessMode.READ:
            f = writable_frame(f, self, allow_copy)
        ctx = self._context()
        ov = ov_module()
        planes = [self._plane(t, mode, allow_copy, ctx, ov) for t in f.tensors]
        return derive_frame(f, planes, ctx)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        if mode is not AccessMode.READ and not t.writable:
            raise InvalidTensorError("map the whole frame with mode=WRITE (allow_copy=True) to write into a decoded frame")
        return self._plane(t, mode, allow_copy, self._context(), ov_module())

    def _plane(self, t: Tensor, mode: AccessMode, allow_copy: bool, ctx: OpenVINOContext, ov: Any) -> OpenVINOTensor:
        if not isinstance(t, FFmpegTensor):
            raise InvalidTensorError(f"{self.name} maps FFmpegTensors, not {type(t).__name__}")
        t._check()
        if t._hardware:
            raise refuse_hardware("this frame", "OpenVINO host tensors")
        info = t._info
        spec = _shared_plane(t, shared_spec(info, ov))
        if spec is not None:
            return _ov_plane(t._native, t._offset, spec, ctx, t, t._index, t._writable)
        self.copying(info.nbytes, allow_copy,
                     f"a plane with pitch {info.strides[0]} bytes is not a whole number of pixels, or its last row's "
                     f"padding lies outside the buffer, so OpenVINO cannot share it")
        arr = np.ascontiguousarray(t.as_array(info, False))
        # a READ copy is read-only (writes to it would be lost); a WRITE copy goes back into the plane at release
        writes = mode.writes and t._writable
        out = OpenVINOTensor.from_numpy(arr.reshape((1,) + arr.shape + ((1,) if arr.ndim == 2 else ())),
                                        parent=t, context=ctx, writable=writes)
        if writes:
            name, dst = self.name, t.as_array(info, True)

            def write_back() -> None:
                np.copyto(dst, arr)
                record_copy(name, arr.nbytes)
            out.on_release(write_back)
        return out


frombuffer = np.frombuffer
uint8 = np.uint8
READ = AccessMode.READ
_planes = PlaneTensor._unchecked_planes  # bound once: map_native runs once per decoded frame


def plane_shapes(f: Frame) -> list[tuple[int, ...]]:
    """The visible (H, W[, C]) of each plane of ``f`` (helps cropping full-pitch OpenVINO planes)."""
    return [spec.shape(f.width, f.height) for spec in plane_layout(f.format)]
