"""CPU -> NPU: page-aligned host memory handed to the NPU plugin where it lies. Zero-copy.

The NPU plugin imports the tensor's pages (``CPU_VA``: Level Zero's system-memory import) and the tensor goes
over as an ``ov.Tensor`` at its own address, inside that import (interop/tensors/npu.py ``host_planes``); a
frame's planes in one buffer share one import. The memory must start on a page boundary (the plugin's rule,
and so no other object's bytes are imported): an unaligned tensor, host memory that is a view of another
memory type (a DMA or USM mapping), or pages overlapping another live import raise WrongMemoryError, and
interop.map() takes the next route (CPU -> DMA -> NPU, which copies).
"""

from __future__ import annotations

from typing import Any

from ..errors import WrongMemoryError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.npu import host_planes, npu_output_context
from ..types import AccessMode, MemoryType

#: memory types whose CPU views are not plain process memory (device or dma-buf mappings): not importable
_FOREIGN = frozenset({MemoryType.DMA, MemoryType.VAAPI, MemoryType.USM, MemoryType.OPENCL, MemoryType.OPENCV_UMAT,
                      MemoryType.CUDA, MemoryType.NPU})


def _foreign(obj: Any) -> MemoryType | None:
    seen = 0
    while obj is not None and seen < 64:
        mt = getattr(obj, "memory_type", None)
        if mt in _FOREIGN:
            return mt  # type: ignore[no-any-return]
        obj = getattr(obj, "parent", None)
        seen += 1
    return None


@register
class CPUToNPU(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.NPU
    zero_copy = True
    # Only memory that was host memory to begin with imports: a CPU/FFmpeg view that another mapper made (of a VA
    # surface, a DMA-BUF) is foreign, so routing uses this edge only as a route's first step.
    first_only = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._map([t], image=False)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ctx = npu_output_context(self.output_context, self.name)
        return f.derive(self._map(f.tensors, image=True), context=ctx)

    def _map(self, planes: list[Tensor], *, image: bool) -> list[Tensor]:
        ctx = npu_output_context(self.output_context, self.name)
        for t in planes:
            mt = _foreign(t.parent)
            if mt is not None:
                raise WrongMemoryError(f"this CPU tensor is a view of {mt.name} memory, which the NPU cannot import as "
                                       f"host memory: map the {mt.name} source to MemoryType.NPU itself")
        return host_planes(planes, ctx, image=image, aligned_start=True)  # type: ignore[return-value]
