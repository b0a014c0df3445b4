"""DMA -> GST: DMA frames (FramePool frames included) as a ``Gst.Buffer`` of fd-backed ``GstMemory``. Zero-copy.

Each distinct DMA buffer under the planes becomes one GstMemory (``gst_dmabuf_allocator_alloc`` for a real
dma-buf, ``gst_fd_allocator_alloc`` for the memfd stand-in) over a dup of its fd, given with DONT_CLOSE: interop
closes the dup, and lets go of the DMA frame (so a pool gets its slot back), when GStreamer frees the memory. The
buffer carries a GstVideoMeta with each plane's offset (its memory's place in the buffer + its offset in the fd)
and pitch. GStreamer maps the fd itself (mmap): the pages are the DMA buffer's. A READ mapping is read-only memory
(GST_MEMORY_FLAG_READONLY): neither GStreamer nor a later WRITE mapping writes through it into the DMA buffer.
"""

from __future__ import annotations

import os

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..native import gst as ng
from ..tensor import Tensor
from ..tensors._dma_host import host_reachable
from ..tensors.dma import DMATensor
from ..tensors.gst import GST_CPU, GstTensor, caps_for, gst, wrap_mapped_planes
from ..types import AccessMode, MemoryType


class _Hold:
    """A user of a DMA buffer for as long as GStreamer holds the memory over it: released from GStreamer's destroy
    notify, so a FramePool gets its slot back only then, even when the caller released the frame long before."""

    __slots__ = ("tensor",)

    def __init__(self, t: DMATensor):
        b = t.buffer
        self.tensor = DMATensor(b, TensorInfo((b.size,)), context=t.context, parent=t)

    def __del__(self) -> None:
        try:
            self.tensor.release()
        except Exception:  # never raise from a finaliser (GStreamer's destroy notify runs it on its thread)
            pass


def _append(buf: int, t: DMATensor, readonly: bool) -> None:
    b = t.buffer
    hold = _Hold(t)
    fd = os.dup(b.fd)
    try:
        ng.append_fd_memory(buf, fd, b.size, hold, b.is_dmabuf, readonly)
    except BaseException:
        os.close(fd)
        hold.tensor.release()
        raise


@register
class DMAToGst(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.GST
    zero_copy = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        for t in (obj.tensors if isinstance(obj, Frame) else [obj]) if obj is not None else []:
            host_reachable(t)  # GStreamer maps fd memory into the CPU: never a device-local allocation's export
        return Cost.ZERO_COPY

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        Gst = gst()
        caps = caps_for(f.format, f.width, f.height)  # refuses formats GStreamer lacks, with the list
        planes = f.tensors
        if not all(isinstance(t, DMATensor) for t in planes):
            raise InvalidTensorError(f"{self.name} maps DMATensors, not {type(planes[0]).__name__}")
        for t in planes:
            host_reachable(t)  # GStreamer maps fd memory into the CPU: never a device-local allocation's export
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        starts: dict[int, int] = {}  # id(DMABuffer) -> its memory's offset in the Gst.Buffer
        pos = 0
        offsets, strides = [], []
        for t in planes:
            assert isinstance(t, DMATensor)
            if t.info.ndim < 2:
                raise InvalidTensorError(f"plane of shape {t.info.shape} is not an image plane (H, W[, C])")
            b = t.buffer
            if id(b) not in starts:
                _append(buf, t, not mode.writes)
                starts[id(b)] = pos
                pos += b.size
            offsets.append(starts[id(b)] + t.offset)
            strides.append(t.info.strides[0])
        return wrap_mapped_planes(buffer, f, caps, offsets, strides)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        Gst = gst()
        if not isinstance(t, DMATensor):
            raise InvalidTensorError(f"{self.name} maps DMATensors, not {type(t).__name__}")
        host_reachable(t)
        buffer = Gst.Buffer.new()
        _append(ng.pointer_of(buffer, "Gst.Buffer"), t, not mode.writes)
        return GstTensor(buffer.peek_memory(0), t.info, offset=t.offset, buffer=buffer, memory_index=0,
                         context=GST_CPU, parent=t)
