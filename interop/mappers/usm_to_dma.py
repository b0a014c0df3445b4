"""USM (Level Zero) -> DMA: export the allocation as a DMA-BUF fd. Zero-copy.

zeMemGetAllocProperties with ``ze_external_memory_export_fd_t`` (DMA_BUF) chained, called on the *input*
tensor's own Level Zero context (DL Streamer read it from the output side, which has none). The new fd is owned
by the resulting DMA buffer; each plane's offset is its distance from the allocation's base, so planes of one
allocation share one fd. USM of a SYCL/OpenCL context is refused with ContextMismatchError.

Device allocations are exported too (USM -> DMA -> NPU / VA-API needs them), but device-local memory exported as a
dma-buf may not be CPU-mappable on a discrete GPU: the DMA buffer made from one is marked ``device_local = True``,
and a consumer that would mmap it for the CPU must refuse it (the CPU reaches device USM by usm_to_cpu's counted
copy, never by an mmap that works only where device memory is host memory, as on the fake driver).
"""

from __future__ import annotations

from typing import Any

from ..errors import ContextMismatchError, WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


@register
class USMToDMA(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.DMA
    zero_copy = True
    # exports from Level Zero (no dpctl: the USM backend's own requirement), on Level Zero hardware
    requires = ()
    extra = None
    tier = "C"

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        for t in () if obj is None else obj.tensors if isinstance(obj, Frame) else (obj,):
            self._context_of(t)
        return Cost.ZERO_COPY

    def _context_of(self, t: Tensor) -> Any:
        from ..tensors.level_zero import level_zero_context_of

        try:
            return level_zero_context_of(t, self.name)
        except ContextMismatchError as e:  # USM of a SYCL/OpenCL context: routing goes another way
            raise WrongMemoryError(str(e)) from e

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self.map_planes([t], mode, allow_copy)[0]

    def map_planes(self, planes: list[Tensor], mode: AccessMode, allow_copy: bool) -> list[Tensor]:
        from ..native import level_zero as ze
        from ..tensors.dma import DMATensor, buffer_from_fd
        from ..tensors.level_zero import usm_address

        bufs: dict[tuple[int, int], tuple[object, int]] = {}
        out: list[Tensor] = []
        for t in planes:
            ctx = self._context_of(t)
            addr = usm_address(t)
            base, size = ze.address_range(ctx.native, addr)
            key = (ctx.ze_context, base)
            if key not in bufs:
                fd = ze.export_dma_buf(ctx.native, addr)
                dma = buffer_from_fd(fd, size=size, take_ownership=True)
                dma.device_local = getattr(t, "usm_type", None) == "device"
                bufs[key] = (dma, base)
            buf, base = bufs[key]
            out.append(DMATensor(buf, t.info, offset=addr - base, parent=t, writable=t.writable))  # type: ignore[arg-type]
        return out
