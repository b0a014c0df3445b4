"""USM (Level Zero) -> NPU: memory of the NPU plugin's own Level Zero context, handed to OpenVINO as an ov.Tensor
over the pointer (the plugin binds its own allocations without copying). Zero-copy.

USM of another context (a SYCL/OpenCL one, or another Level Zero context) is not this edge's input
(WrongMemoryError): the router takes USM -> DMA -> NPU (an export as a DMA-BUF, then the plugin's import) instead.
"""

from __future__ import annotations

from typing import Any

from ..errors import ContextMismatchError, InvalidTensorError, WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..tensor import Tensor
from ..tensors.level_zero import level_zero_context_of, usm_address
from ..tensors.npu import NPUContext, _host_tensor, device_layout
from ..tensors.usm import USMTensor
from ..types import AccessMode, MemoryType


@register
class USMToNPU(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.NPU
    zero_copy = True
    inputs = (USMTensor,)
    output_contexts = (NPUContext,)
    requires = ("openvino",)  # the USM is Level Zero's: no dpctl

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is not None:
            self._own(obj.tensors if isinstance(obj, Frame) else [obj], self.out_context())
        return Cost.ZERO_COPY

    def _own(self, planes: list[Tensor], ctx: Any) -> None:
        """Refuse USM that is not of the plugin's own Level Zero context: the route through DMA takes it."""
        for t in planes:
            try:
                lz = level_zero_context_of(t, self.name)
            except ContextMismatchError as e:
                raise WrongMemoryError(str(e)) from e
            if lz.ze_context != ctx.ze_context:
                raise WrongMemoryError(f"{self.name} takes USM of the NPU plugin's Level Zero context; this tensor's "
                                       f"is another ({lz!r}): map it through MemoryType.DMA (interop.map does)")

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._map([t], image=False)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = self._map(f.tensors, image=True)
        return f.derive(planes, context=planes[0].context)

    def _map(self, planes: list[Tensor], *, image: bool) -> list[Tensor]:
        ctx = self.out_context()
        self._own(planes, ctx)
        out: list[Tensor] = []
        for t in planes:
            assert isinstance(t, USMTensor)
            shape, span = device_layout(t.info, image)
            if t.offset + span > t.native.size:
                raise InvalidTensorError(f"the plane's padded rows ({span} bytes at offset {t.offset}) run past its "
                                         f"{t.native.size}-byte allocation; the NPU needs whole rows")
            out.append(_host_tensor(t.native, usm_address(t), shape, t.info.dtype, ctx, t, t.writable, "L0_USM"))
        return out
