"""DMA -> CPU: mmap the buffer (MAP_SHARED) and bracket the access with DMA_BUF_IOCTL_SYNC start/end. Zero-copy.

READ maps the buffer read-only (PROT_READ) and gives a read-only numpy view; WRITE/READ_WRITE map it read-write.
The sync END runs at release of the CPU tensor (end of ``with``, ``release()`` or GC). On a memfd the ioctl
answers ENOTTY: not a dma-buf, nothing to synchronise. Tiled (non-linear DRM modifier) buffers are refused:
the CPU would see tiles, not rows.
"""

from __future__ import annotations

from ..context import CPU_CONTEXT
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..tensor import Tensor
from ..tensors._dma_host import host_reachable, map_dma_to_host
from ..tensors._fastpath import derive_frame
from ..tensors.dma import DMATensor
from ..types import AccessMode, MemoryType


@register
class DMAToCPU(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.CPU
    zero_copy = True
    inputs = (DMATensor,)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is not None:
            for t in obj.tensors if isinstance(obj, Frame) else [obj]:
                host_reachable(t)
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return map_dma_to_host(t, mode)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        return derive_frame(f, [map_dma_to_host(t, mode) for t in f.tensors], CPU_CONTEXT)

