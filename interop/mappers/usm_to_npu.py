"""USM (Level Zero) -> NPU. Zero-copy.

Only Level Zero USM qualifies: a USM tensor of a SYCL/OpenCL context raises ContextMismatchError. Memory of
the NPU plugin's own Level Zero context is handed to OpenVINO as an ov.Tensor over the pointer (the plugin
binds its own allocations without copying). Memory of another Level Zero context is exported as a DMA-BUF
fd (zeMemGetAllocProperties + ze_external_memory_export_fd_t, on the input's own context) and then goes the
DMA -> NPU way (fd hand-off or import into the plugin's context).
"""

from __future__ import annotations

from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


@register
class USMToNPU(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.NPU
    zero_copy = True
    requires = ("openvino",)  # the USM is Level Zero's: no dpctl

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._map([t], image=False)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = self._map(f.tensors, image=True)
        return f.derive(planes, context=planes[0].context)

    def _map(self, planes: list[Tensor], *, image: bool) -> list[Tensor]:
        from ..tensors.level_zero import level_zero_context_of, usm_address
        from ..tensors.npu import _host_tensor, device_layout, npu_output_context, npu_planes
        from ..tensors.usm import USMTensor

        ctx = npu_output_context(self.output_context, self.name)
        lz = [level_zero_context_of(t, self.name) for t in planes]
        if all(c.ze_context == ctx.ze_context for c in lz):
            out: list[Tensor] = []
            for t in planes:
                assert isinstance(t, USMTensor)
                shape, span = device_layout(t.info, image)
                if t.offset + span > t.native.size:
                    raise InvalidTensorError(f"the plane's padded rows ({span} bytes at offset {t.offset}) run past its "
                                             f"{t.native.size}-byte allocation; the NPU needs whole rows")
                out.append(_host_tensor(t.native, usm_address(t), shape, t.info.dtype, ctx, t, t.writable, "L0_USM"))
            return out
        from .usm_to_dma import USMToDMA

        dma = USMToDMA().map_planes(planes, AccessMode.READ, False)  # an export: each plane keeps its writability
        return npu_planes(dma, ctx, image=image, parents=dma)  # type: ignore[return-value]
