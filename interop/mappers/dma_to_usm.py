"""DMA -> USM (Level Zero): import each DMA-BUF into the output LevelZeroContext. Zero-copy.

zeMemAllocDevice (or Host/Shared, per ``LevelZeroContext.import_as``) with ``ze_external_memory_import_fd_t``
(ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF) chained to the descriptor: the allocation *is* the buffer. Planes that
share a buffer share one import; each plane keeps its own offset and pitch (DL Streamer dropped them). The fd
stays the DMA tensor's (Level Zero's PRIME import does not take it), and the DMA tensor is the output's parent,
so the fd outlives the import. Tiled buffers (non-linear DRM modifier) are refused: a USM pointer is linear.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..native import dmabuf as nd
from ..tensor import Tensor
from ..tensors.dma import DMATensor
from ..tensors.level_zero import LevelZeroContext, SharedRelease, usm_tensor
from ..types import AccessMode, MemoryType


@register
class DMAToUSM(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.USM
    zero_copy = True
    # imports into Level Zero (no dpctl: the USM backend's own requirement), on Level Zero hardware
    requires = ()
    extra = None
    tier = "C"
    inputs = (DMATensor,)
    output_contexts = (LevelZeroContext,)  # a DMA-BUF is imported into USM only through Level Zero

    def default_output_context(self) -> Any:
        return LevelZeroContext.default()

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._import([t], self.out_context())[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ctx = self.out_context()
        return f.derive(self._import(f.tensors, ctx), context=ctx)

    def _import(self, tensors: list[Tensor], ctx: LevelZeroContext) -> list[Tensor]:
        planes: list[DMATensor] = tensors  # type: ignore[assignment]  # inputs = (DMATensor,)
        for t in planes:
            if t.drm_modifier not in (nd.DRM_FORMAT_MOD_LINEAR, nd.DRM_FORMAT_MOD_INVALID):
                raise InvalidTensorError(
                    f"DRM modifier {t.drm_modifier:#018x} is a tiled layout; a USM pointer is linear memory: ask the "
                    f"producer for DRM_FORMAT_MOD_LINEAR or map through VA-API")
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(planes):
            groups.setdefault(id(t.buffer), []).append(i)
        out: list[Tensor | None] = [None] * len(planes)
        for idx in groups.values():
            buf = planes[idx[0]].buffer
            alloc = ctx.allocate(buf.size, ctx.import_as, import_fd=buf.fd, keepalive=buf)
            rel = SharedRelease(alloc, len(idx))
            for i in idx:
                t = planes[i]
                out[i] = usm_tensor(alloc, t.info, context=ctx, offset=t.offset, parent=t, writable=t.writable,
                                    release=rel)
        return out  # type: ignore[return-value]
