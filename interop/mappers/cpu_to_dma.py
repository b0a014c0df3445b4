"""CPU -> DMA: zero-copy when the CPU memory is a mapping of one of our DMA buffers, otherwise a counted copy.

Memory that came from our allocator (a view obtained by mapping a DMATensor to CPU) is recognised by its address
and handed back as a DMATensor over the same buffer at the right offset. Anything else (a numpy array of the
heap) cannot become a dma-buf: it is copied into a new DMA buffer, refused unless ``allow_copy=True`` and counted;
for WRITE/READ_WRITE the DMA copy is copied back at release (counted too).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTensorError
from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..native import dmabuf as nd
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


@register
class CPUToDMA(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.DMA
    zero_copy = False  # zero-copy only for memory of our own DMA buffers

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.dma import DMABuffer, DMAContext, DMATensor

        ctx = self.output_context if isinstance(self.output_context, DMAContext) else None
        if mode.writes and not t.writable:
            raise InvalidTensorError(f"{self.name}: mode={mode.name} asks to write into read-only CPU memory; map it "
                                     f"with mode=READ, or copy it into a writeable array first")
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
        out_ctx = ctx or DMAContext.default(MemoryType.DMA)
        assert isinstance(out_ctx, DMAContext)
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
