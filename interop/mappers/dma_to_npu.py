"""DMA -> NPU: the NPU plugin reads the DMA-BUF itself. Zero-copy.

A plane at offset 0 is handed over as its fd: ``RemoteContext.create_tensor(type, shape, {"MEM_TYPE":
"SHARED_BUF", "MEM_HANDLE": "0x<fd>"})`` (the plugin imports it into its Level Zero context). A plane further
into its buffer (NV12's chroma) is imported by us into the plugin's own Level Zero context (zeMemAllocHost +
ze_external_memory_import_fd_t, once per buffer) and handed over as an ov.Tensor at pointer + offset.
interop/tensors/npu.py has the details; docs/npu.md what was verified how. The DMA tensor is the output's
parent, so the fd stays open while the NPU tensor lives.
"""

from __future__ import annotations

from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.npu import npu_output_context, npu_planes
from ..types import AccessMode, MemoryType


@register
class DMAToNPU(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.NPU
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return npu_planes([t], npu_output_context(self.output_context, self.name), image=False)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ctx = npu_output_context(self.output_context, self.name)
        return f.derive(npu_planes(f.tensors, ctx, image=True), context=ctx)
