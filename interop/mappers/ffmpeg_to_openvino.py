"""FFMPEG -> OPENVINO: each plane of an av.VideoFrame as a host ``ov.Tensor`` over the decoder's memory.

OpenVINO shares only writeable, C-contiguous memory. A decoded plane is neither from the user's side (it is a
read-only reference frame with padded rows), so OpenVINO gets a *private* writeable alias of the whole plane
at full pitch, shaped ``(1, rows, pitch_in_elements, C)`` (C = 1 for Y/U/V, 2 for UV, 3/4 for packed RGB):
nothing is copied, the padding is cropped inside the model, and OpenVINO never writes its inputs. The
OpenVINOTensors handed back are read-only for the user (numpy views refuse writes). ``frame.width`` /
``frame.height`` stay the visible size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, plane_layout
from ..mapper import register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors._fastpath import FastMapper, _new, derive_frame
from ..tensors.ffmpeg import FFmpegTensor, is_video_frame, refuse_hardware, wrap_video_frame, writable_frame
from ..tensors.openvino import OpenVINOContext, OpenVINOTensor, default_context, ov_module
from ..types import AccessMode, MemoryType

_infos: dict[int, tuple[TensorInfo, TensorInfo | None]] = {}


def full_pitch_info(info: TensorInfo) -> TensorInfo | None:
    """(1, rows, pitch_elems, C) C-contiguous covering every row at full pitch, or None when the pitch is not a
    whole number of pixels (e.g. an RGB plane whose pitch is not a multiple of 3)."""
    hit = _infos.get(id(info))  # TensorInfos are interned: one entry per plane layout of the stream
    if hit is not None and hit[0] is info:
        return hit[1]
    shape, strides = info.shape, info.strides
    channels = shape[2] if len(shape) == 3 else 1
    pixel = channels * info.itemsize
    pitch = strides[0]
    inner_ok = strides[1:] == ((pixel, info.itemsize) if len(shape) == 3 else (info.itemsize,))
    out = None
    if len(shape) in (2, 3) and inner_ok and pitch % pixel == 0:
        out = TensorInfo((1, shape[0], pitch // pixel, channels), info.dtype)
    if len(_infos) > 1024:
        _infos.clear()
    _infos[id(info)] = (info, out)
    return out


@register
class FFmpegToOpenVINO(FastMapper):
    src = MemoryType.FFMPEG
    dst = MemoryType.OPENVINO
    zero_copy = True  # a plane whose pitch is not whole pixels is copied, only with allow_copy, and counted
    requires = ("av", "openvino")
    extra = "openvino"
    tier = "A"

    def _wrap_input(self, obj: Any) -> Frame | None:
        return wrap_video_frame(obj) if is_video_frame(obj) else None

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
        if not isinstance(t, FFmpegTensor):
            raise InvalidTensorError(f"{self.name} maps FFmpegTensors, not {type(t).__name__}")
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
        full = full_pitch_info(info)
        plane = t._native
        offset = t._offset
        if full is not None and offset + full.nbytes <= plane.buffer_size:
            # private writeable alias of the whole plane: OpenVINO needs one, and never writes its inputs
            arr = ndarray(full.shape, full.dtype, buffer=plane, offset=offset)
            o: Any = _new(OpenVINOTensor)  # OpenVINOTensor._trusted, inlined: it runs for every plane of every frame
            o._native, o._info, o._context, o._parent, o._writable = ov.Tensor(arr, True), full, ctx, t, t._writable
            o._released, o._finalizer, o._hooks = False, None, None
            o._remote, o._addr, o._array = False, None, arr
            return o  # type: ignore[no-any-return]
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


ndarray = np.ndarray


def plane_shapes(f: Frame) -> list[tuple[int, ...]]:
    """The visible (H, W[, C]) of each plane of ``f`` (helps cropping full-pitch OpenVINO planes)."""
    return [spec.shape(f.width, f.height) for spec in plane_layout(f.format)]
