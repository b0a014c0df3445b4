"""CPU -> GST: numpy planes wrapped as a ``Gst.Buffer`` without copying (``gst_memory_new_wrapped``).

Each plane becomes one GstMemory over the plane's own bytes (padding rows included); the buffer carries a
GstVideoMeta with every plane's offset and stride, so padded pitches reach GStreamer as they are. The memory's
destroy notify drops interop's reference to the numpy view: the arrays stay alive until GStreamer frees the
buffer, however long a pipeline keeps it. A READ mapping gives read-only memory (GST_MEMORY_FLAG_READONLY: neither
GStreamer nor a later WRITE mapping writes through it into the arrays); a WRITE mapping, writable memory (read-only
arrays are refused for WRITE).
Planes must have rows of contiguous pixels (strides ``(pitch, itemsize[, ...])``), as GStreamer describes them;
others are WrongMemoryError (``input_cost`` says so before routing picks this edge), so ``interop.map`` takes a
route that copies them, with ``allow_copy=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidTensorError, UnsupportedFormatError, WrongMemoryError
from ..frame import Frame
from ..info import contiguous_strides
from ..mapper import Cost, MemoryMapper, register
from ..native import gst as ng
from ..tensor import Tensor
from ..tensors.gst import GST_CPU, GST_FORMAT_NAMES, GstTensor, caps_for, gst, wrap_mapped_planes
from ..types import AccessMode, MemoryType


def _refuse_layout(obj: Tensor | Frame, name: str) -> None:
    """Raise what mapping ``obj`` would raise for its layout: WrongMemoryError for planes GStreamer cannot describe
    without a copy (routing then takes a route that copies, with allow_copy), InvalidTensorError / UnsupportedFormatError
    for what no route makes good."""
    if isinstance(obj, Frame):
        if obj.format not in GST_FORMAT_NAMES:
            raise UnsupportedFormatError(f"GStreamer has no format for {obj.format.name}; supported: "
                                         f"{', '.join(f.name for f in GST_FORMAT_NAMES)}")
        for t in obj.tensors:
            info = t.info
            if info.ndim < 2:
                raise InvalidTensorError(f"plane of shape {info.shape} is not an image plane (H, W[, C])")
            if info.strides[1:] != contiguous_strides(info.shape, info.itemsize)[1:]:
                raise WrongMemoryError(
                    f"{name}: a plane with strides {info.strides} has no contiguous rows; GStreamer describes a plane "
                    f"by its row stride only. Make it contiguous first (numpy.ascontiguousarray, a copy), or pass "
                    f"allow_copy=True to interop.map()")
    elif not obj.info.is_contiguous:
        raise WrongMemoryError(
            f"{name}: a tensor with strides {obj.info.strides} is not one contiguous block; map it as a Frame (planes "
            f"with padded rows), or make it contiguous first (a copy; allow_copy=True to interop.map())")


def _append(buf: int, t: Tensor, readonly: bool) -> None:
    arr = np.asarray(t)  # a zero-copy view that keeps the CPU tensor (and its memory) alive
    ng.append_host_memory(buf, t.data_ptr, t.info.extent, arr, readonly)


@register
class CPUToGst(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.GST
    zero_copy = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        # None: an input a previous step makes; the CPU planes mappers make have contiguous rows
        if obj is not None:
            _refuse_layout(obj, self.name)
        return Cost.ZERO_COPY

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        Gst = gst()
        _refuse_layout(f, self.name)
        caps = caps_for(f.format, f.width, f.height)
        tensors = f.tensors
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        offsets, strides, pos = [], [], 0
        for t in tensors:
            _append(buf, t, not mode.writes)
            offsets.append(pos)
            strides.append(t.info.strides[0])
            pos += t.info.extent
        return wrap_mapped_planes(buffer, f, caps, offsets, strides)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        Gst = gst()
        _refuse_layout(t, self.name)
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        ng.append_host_memory(buf, t.data_ptr, t.info.nbytes, np.asarray(t), not mode.writes)
        mem: Any = buffer.peek_memory(0)
        return GstTensor(mem, t.info, buffer=buffer, memory_index=0, context=GST_CPU, parent=t)
