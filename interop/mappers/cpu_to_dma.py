"""CPU -> DMA: zero-copy when the CPU memory is a mapping of one of our DMA buffers, otherwise a counted copy.

Memory that came from our allocator (a view obtained by mapping a DMATensor to CPU) is recognised by its address
and handed back as a DMATensor over the same buffer at the right offset. Anything else (a numpy array of the
heap) cannot become a dma-buf: it is copied into a new DMA buffer, refused unless ``allow_copy=True`` and counted;
for WRITE/READ_WRITE the DMA copy is copied back at release (counted too).
"""

from __future__ import annotations

import numpy as np

from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..native import dmabuf as nd
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.dma import DMABuffer, DMAContext, DMATensor
from ..types import AccessMode, MemoryType


@register
class CPUToDMA(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.DMA
    zero_copy = False  # zero-copy only for memory of our own DMA buffers
    inputs = (CPUTensor,)
    output_contexts = (DMAContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        ctx = self.out_context() if self.output_context is not None else None  # a view keeps its buffer's context
        info = t.info
        addr = t.data_ptr
        m = nd.find_mapping(addr, max(info.extent, 1))
        buf = m.owner if m is not None else None
        if m is not None and isinstance(buf, DMABuffer) and not buf.closed and (m.writable or not mode.writes):
            return DMATensor(buf, info, offset=addr - m.address, context=ctx, parent=t,
                             writable=t.writable and m.writable)
        self.copying(info.nbytes, allow_copy, "this CPU memory is not a mapping of a DMA buffer (allocate frames "
                     "from a DMAContext or FramePool and map them to CPU to write them without copies)")
        src = t.numpy()
        out_ctx = ctx if ctx is not None else self.out_context()
        buf = out_ctx.allocate(max(info.nbytes, 1))
        dt = DMATensor(buf, TensorInfo(info.shape, info.dtype), context=out_ctx, parent=t,  # C-contiguous copy
                       writable=mode.writes)  # a READ copy is read-only: writes to it would be lost
        view = np.asarray(_Iface(buf.mapping(True), info))
        np.copyto(view, src)
        if mode.writes:
            name = self.name

            def write_back() -> None:  # the source is writeable: checked above
                np.copyto(src, view)
                record_copy(name, info.nbytes)
            dt.on_release(write_back)
        return dt


class _Iface:
    def __init__(self, m: nd.Mapping, info) -> None:  # type: ignore[no-untyped-def]
        self.m = m
        self.__array_interface__ = {"version": 3, "shape": info.shape, "typestr": info.dtype.str,
                                    "data": (m.address, False), "strides": None}
