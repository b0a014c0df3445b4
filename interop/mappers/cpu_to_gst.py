"""CPU -> GST: numpy planes wrapped as a ``Gst.Buffer`` without copying (``gst_memory_new_wrapped``).

Each plane becomes one GstMemory over the plane's own bytes (padding rows included); the buffer carries a
GstVideoMeta with every plane's offset and stride, so padded pitches reach GStreamer as they are. The memory's
destroy notify drops interop's reference to the numpy view: the arrays stay alive until GStreamer frees the
buffer, however long a pipeline keeps it. Read-only arrays give read-only memory (GST_MEMORY_FLAG_READONLY).
Planes must have rows of contiguous pixels (strides ``(pitch, itemsize[, ...])``), as GStreamer describes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import contiguous_strides
from ..mapper import MemoryMapper, register
from ..native import gst as ng
from ..tensor import Tensor
from ..tensors.gst import GST_CPU, GST_FORMAT_NAMES, GstTensor, caps_for, gst, wrap_buffer
from ..types import AccessMode, MemoryType


def _append(buf: int, t: Tensor) -> None:
    arr = np.asarray(t)  # a zero-copy view that keeps the CPU tensor (and its memory) alive
    info = t.info
    if info.strides[1:] != contiguous_strides(info.shape, info.itemsize)[1:]:
        raise InvalidTensorError(f"a plane with strides {info.strides} has no contiguous rows; GStreamer describes a "
                                 f"plane by its row stride only. Make it contiguous first (numpy.ascontiguousarray, "
                                 f"a copy)")
    ng.append_host_memory(buf, t.data_ptr, info.extent, arr, not t.writable)


@register
class CPUToGst(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.GST
    zero_copy = True
    requires = ("gi",)
    extra = "gst"
    tier = "A"

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        Gst = gst()
        name = GST_FORMAT_NAMES.get(f.format)
        caps = caps_for(f.format, f.width, f.height)  # refuses formats GStreamer lacks, with the list
        assert name is not None
        tensors = f.tensors
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        offsets, strides, pos = [], [], 0
        for t in tensors:
            if t.info.ndim < 2:
                raise InvalidTensorError(f"plane of shape {t.info.shape} is not an image plane (H, W[, C])")
            _append(buf, t)
            offsets.append(pos)
            strides.append(t.info.strides[0])
            pos += t.info.extent
        ng.add_video_meta(buf, name, f.width, f.height, offsets, strides)
        if f.pts is not None and f.time_base is not None:
            buffer.pts = int(f.pts * f.time_base * 1_000_000_000)
        out = wrap_buffer(buffer, caps)
        out._parent = f
        out.metadata.update(f.metadata)
        out.colorspace, out.color_range = f.colorspace, f.color_range
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        Gst = gst()
        if not t.info.is_contiguous:
            raise InvalidTensorError(f"a tensor with strides {t.info.strides} is not one contiguous block; map it as a "
                                     f"Frame (planes with padded rows), or make it contiguous first (a copy)")
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        ng.append_host_memory(buf, t.data_ptr, t.info.nbytes, np.asarray(t), not t.writable)
        mem: Any = buffer.peek_memory(0)
        return GstTensor(mem, t.info, buffer=buffer, memory_index=0, context=GST_CPU, parent=t)
