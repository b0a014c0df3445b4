"""FFMPEG -> NPU: a decoded frame's planes handed to the NPU plugin where they lie. Zero-copy.

The NPU plugin imports the whole pages that hold each decoder buffer (``CPU_VA``: Level Zero's system-memory
import), once per buffer while the frame holds it; every plane goes over as an ``ov.Tensor`` at its own address,
inside that import (interop/tensors/npu.py ``host_planes``). The import holds the FFmpeg planes, so FFmpeg cannot
reuse or free the buffer before the import ends. Hardware frames, and pages that overlap another live import,
raise WrongMemoryError: interop.map() then takes the next route (FFMPEG -> CPU -> DMA -> NPU, which copies).
Decoded frames are reference frames: only READ is zero-copy here.
"""

from __future__ import annotations

from ..errors import WrongMemoryError
from ..frame import Frame
from ..mapper import register
from ..tensor import Tensor
from ..tensors.ffmpeg import FFmpegMapper, FFmpegTensor, refuse_hardware
from ..tensors.npu import host_planes, npu_output_context
from ..types import AccessMode, MemoryType


@register
class FFmpegToNPU(FFmpegMapper):
    dst = MemoryType.NPU
    zero_copy = True
    # Only memory that was host memory to begin with imports: a CPU/FFmpeg view that another mapper made (of a VA
    # surface, a DMA-BUF) is foreign, so routing uses this edge only as a route's first step.
    first_only = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._map([t], mode, image=False)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ctx = npu_output_context(self.output_context, self.name)
        return f.derive(self._map(f.tensors, mode, image=True), context=ctx)

    def _map(self, planes: list[Tensor], mode: AccessMode, *, image: bool) -> list[Tensor]:
        ctx = npu_output_context(self.output_context, self.name)
        limits = []
        for t in planes:
            if not isinstance(t, FFmpegTensor):
                raise WrongMemoryError(f"{self.name} maps FFmpegTensors, not {type(t).__name__}")
            if t.is_hardware:
                raise refuse_hardware("this frame", "the NPU")
            if mode is not AccessMode.READ and not t.writable:
                raise WrongMemoryError(f"{self.name} hands the NPU a decoder's reference frame for reading only; "
                                       f"{mode.name} needs a writable copy (allow_copy=True)")
            limits.append(int(t.native.buffer_size) - t.offset)
        return host_planes(planes, ctx, image=image, aligned_start=False, limits=limits)  # type: ignore[return-value]
