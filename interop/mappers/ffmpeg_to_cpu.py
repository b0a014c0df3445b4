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
from ..mapper import Cost, register
from ..tensor import Tensor
from ..tensors._fastpath import CPUView, derive_frame
from ..tensors.ffmpeg import (
    DecodedSource,
    FFmpegMapper,
    FFmpegTensor,
    SourcedTensor,
    refuse_hardware,
    software_planes,
    sourced_frame,
    wrap_video_frame,
    writable_frame,
)
from ..types import AccessMode, MemoryType


@register
class FFmpegToCPU(FFmpegMapper):
    dst = MemoryType.CPU
    zero_copy = False  # READ is zero-copy; WRITE of a read-only (decoded) frame copies, only with allow_copy
    may_copy = True
    inputs = (FFmpegTensor,)
    refuse_read_only = False  # WRITE of a decoded frame maps a counted writable copy

    def map_native(self, vf: Any, mode: AccessMode, allow_copy: bool) -> Frame | None:
        """interop.map(vf, CPU) in one step for a software av.VideoFrame in READ mode; None: take the general
        path (WRITE copies, hardware frames and their advice live there)."""
        if mode is not READ:
            return None
        found = software_planes(vf)
        if found is None:
            return None
        planes, lay = found
        src = DecodedSource(vf, planes, lay)
        return sourced_frame(src, _views(lay.infos, planes, CPU_CONTEXT, src), CPU_CONTEXT)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.ZERO_COPY if mode is AccessMode.READ else Cost.COPY
        planes = obj.tensors if isinstance(obj, Frame) else [obj]
        for t in planes:
            if t.is_hardware:  # type: ignore[attr-defined]
                raise refuse_hardware("this frame", "the CPU")
        if mode is AccessMode.READ or all(t.writable for t in planes):
            return Cost.ZERO_COPY
        if not isinstance(obj, Frame) and (obj.video_frame is None or obj.offset or obj.index < 0):  # type: ignore[attr-defined]
            raise InvalidTensorError("a read-only plane region cannot be made writable on its own; map the whole "
                                     "frame with mode=WRITE (allow_copy=True), then crop")
        return Cost.COPY

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        if mode is not AccessMode.READ:
            f = writable_frame(f, self, allow_copy)
        planes = [_view(t) for t in f.tensors]
        return derive_frame(f, planes, CPU_CONTEXT)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, FFmpegTensor)
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


class PlaneView(SourcedTensor, CPUView):
    """A CPU view of a decoded plane. Its numpy array is made on first use of ``.native``: numpy.asarray(t),
    DLPack and regions work from the address alone, so a mapping nobody reads costs no array at all."""

    _plane: Any  # the av.VideoPlane: numpy arrays of it keep the frame's buffer alive
    _offset: int
    _offset = 0
    _addr = None  # CPUView's state; a plane's address is read from the plane (_host_address)

    def _host_address(self) -> int | None:
        return self._plane.buffer_ptr + self._offset  # type: ignore[no-any-return]

    def numpy(self) -> np.ndarray:
        # a view of the plane's own array (whose base, the av.VideoPlane, keeps the AVBuffer alive): the generic
        # __array_interface__ export costs microseconds more per plane
        return self.native.view()

    @property
    def native(self) -> np.ndarray:
        self._check()
        arr = self._native
        if arr is None:
            info = self._info
            arr = ndarray(info.shape, info.dtype, buffer=self._plane, offset=self._offset, strides=info.strides)
            if not self._writable:
                arr.setflags(write=False)
            self._native = arr
        return arr  # type: ignore[no-any-return]


def _plane_view(parent: Any, plane: Any, offset: int, index: int, info: Any, writable: bool) -> CPUView:
    v = PlaneView._unchecked(None, info, CPU_CONTEXT, parent, writable)
    v._plane, v._index, v._offset = plane, index, offset  # _unchecked_planes' order, then the offset
    return v  # type: ignore[no-any-return]


def _view(t: Any) -> CPUView:  # an FFmpegTensor
    if t._hardware or t._released:
        if t._released:
            t._check()
        raise refuse_hardware(f"this {t.video_frame.format.name if t.video_frame is not None else 'hardware'} frame",
                              "the CPU")
    return _plane_view(t, t._native, t._offset, t._index, t._info, t._writable)


ndarray = np.ndarray
READ = AccessMode.READ
_views = PlaneView._unchecked_planes  # bound once: map_native runs once per decoded frame
