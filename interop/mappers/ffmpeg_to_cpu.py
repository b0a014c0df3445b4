"""FFMPEG -> CPU: numpy views of an av.VideoFrame's planes, zero-copy, at their true pitch.

READ views are read-only: decoded frames are the decoder's reference frames. WRITE and READ_WRITE map a
writable copy of the frame (a new VideoFrame; the decoder's is never modified): refused unless
``allow_copy=True``, then counted. Frames wrapped with ``wrap_video_frame(vf, writable=True)`` are written in
place. Hardware frames (format ``cuda``) are refused: map them to CUDA.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import register
from ..tensor import Tensor
from ..tensors._fastpath import CPUView, FastMapper, _new, derive_frame
from ..tensors.ffmpeg import FFmpegTensor, is_video_frame, refuse_hardware, wrap_video_frame, writable_frame
from ..types import AccessMode, MemoryType


@register
class FFmpegToCPU(FastMapper):
    src = MemoryType.FFMPEG
    dst = MemoryType.CPU
    zero_copy = True  # READ is always zero-copy; WRITE of a read-only frame copies, only with allow_copy
    requires = ("av",)
    extra = "ffmpeg"
    tier = "A"

    def _wrap_input(self, obj: Any) -> Frame | None:
        return wrap_video_frame(obj) if is_video_frame(obj) else None

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        if mode is not AccessMode.READ:
            f = writable_frame(f, self, allow_copy)
        planes = [_view(t) for t in f.tensors]
        return derive_frame(f, planes, CPU_CONTEXT)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        if not isinstance(t, FFmpegTensor):
            raise InvalidTensorError(f"{self.name} maps FFmpegTensors, not {type(t).__name__}")
        if mode is not AccessMode.READ and not t.writable:
            vf = t.video_frame
            if vf is None or t.offset or t.index < 0:
                raise InvalidTensorError("a read-only plane region cannot be made writable on its own; map the whole "
                                         "frame with mode=WRITE (allow_copy=True), then crop")
            whole = wrap_video_frame(vf)
            if whole[t.index].info != t.info:
                raise InvalidTensorError("map the whole frame with mode=WRITE (allow_copy=True), then crop")
            t = writable_frame(whole, self, allow_copy)[t.index]  # type: ignore[assignment]
        return _view(t)  # type: ignore[arg-type]


class PlaneView(CPUView):
    """A CPU view of a decoded plane. Its numpy array is made on first use of ``.native``: numpy.asarray(t),
    DLPack and regions work from the address alone, so a mapping nobody reads costs no array at all."""

    @property
    def native(self) -> np.ndarray:
        self._check()
        arr = self._native
        if arr is None:
            src: Any = self._parent  # the FFmpegTensor of this plane
            info = self._info
            arr = ndarray(info.shape, info.dtype, buffer=src._native, offset=src._offset, strides=info.strides)
            if not self._writable:
                arr.setflags(write=False)
            self._native = arr
        return arr  # type: ignore[no-any-return]


def _view(t: Any) -> CPUView:  # an FFmpegTensor
    if t._hardware or t._released:
        if t._released:
            t._check()
        raise refuse_hardware(f"this {t.video_frame.format.name if t.video_frame is not None else 'hardware'} frame",
                              "the CPU")
    v: Any = _new(PlaneView)  # CPUView.of, inlined: it runs for every plane of every frame
    v._native, v._info, v._context, v._parent, v._writable = None, t._info, CPU_CONTEXT, t, t._writable
    v._released, v._finalizer, v._hooks = False, None, None
    v._addr = t._native.buffer_ptr + t._offset  # the plane keeps its AVBuffer, and this tensor keeps the plane
    return v  # type: ignore[no-any-return]


ndarray = np.ndarray
