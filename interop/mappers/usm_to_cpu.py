"""USM -> CPU: host and shared allocations are a numpy view of the USM pointer (zero-copy, after the SYCL queue
drains); device allocations are copied through the queue (counted), and copied back at release for WRITE /
READ_WRITE mappings (counted too).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.usm import USMTensor
from ..types import AccessMode, MemoryType


def _rows(info: TensorInfo) -> tuple[int, int, int]:
    from ..tensors.opencl import pitch_linear

    return pitch_linear(info)


@register
class USMToCPU(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.CPU
    # Host/shared allocations (the common case) are zero-copy; device allocations copy, only with allow_copy
    zero_copy = False
    may_copy = True
    inputs = (USMTensor,)
    # the USM may be Level Zero's: no dpctl
    requires = ()
    extra = None

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.COPY
        planes = obj.tensors if isinstance(obj, Frame) else [obj]
        return Cost.ZERO_COPY if all(t.usm_type in ("host", "shared") for t in planes) else Cost.COPY  # type: ignore[attr-defined]

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.usm import host_view

        assert isinstance(t, USMTensor)
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
