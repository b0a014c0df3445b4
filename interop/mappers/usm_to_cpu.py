"""USM -> CPU: host and shared allocations are a numpy view of the USM pointer (zero-copy, after the SYCL queue
drains); device allocations are copied through the queue (counted), and copied back at release for WRITE /
READ_WRITE mappings (counted too).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTensorError
from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..types import AccessMode, MemoryType


def _rows(info: TensorInfo) -> tuple[int, int, int]:
    from ..tensors.opencl import pitch_linear

    return pitch_linear(info)


@register
class USMToCPU(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.CPU
    # Host/shared (the common case) are zero-copy; device allocations copy, but only with allow_copy (counted),
    # so declaring the edge zero-copy never hides a copy. Declared False, routing would send USM -> CPU through
    # USM -> DMA -> CPU, which only Level Zero contexts can take.
    zero_copy = True
    requires = ()

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.usm import USMTensor, host_view

        if not isinstance(t, USMTensor):
            raise InvalidTensorError(f"{self.name} maps USMTensors, not {type(t).__name__}")
        if mode.writes and not t.writable:
            raise InvalidTensorError("this USM tensor is read-only: map it with AccessMode.READ")
        ctx = t.context
        wait = getattr(getattr(ctx, "queue", None), "wait", None) or getattr(ctx, "wait", None)
        if wait is not None:
            wait()  # kernels still writing the allocation finish first
        info = t.info
        w = t.writable and mode.writes
        if t.usm_type in ("host", "shared"):
            return CPUTensor(host_view(t.pointer, info, t, writable=w), parent=t, writable=w)
        memcpy = getattr(ctx, "memcpy", None)
        if memcpy is None:
            raise InvalidTensorError(f"{ctx!r} cannot copy device USM to the host (it has no memcpy)")
        self.copying(info.nbytes, allow_copy, "device USM is not reachable from the CPU")
        host = np.empty(info.shape, info.dtype)
        rows, row, pitch = _rows(info)
        src = t.pointer
        dst = host.ctypes.data
        if rows == 1:
            memcpy(dst, src, info.nbytes)
        else:
            for r in range(rows):
                memcpy(dst + r * row, src + r * pitch, row)
        out = CPUTensor(host, parent=t, writable=w)
        if not w:
            host.flags.writeable = False
        elif info.nbytes:
            name = self.name

            def write_back() -> None:
                if rows == 1:
                    memcpy(src, dst, info.nbytes)
                else:
                    for r in range(rows):
                        memcpy(src + r * pitch, dst + r * row, row)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
