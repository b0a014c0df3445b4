"""CPU -> USM: host memory that is a view of a host/shared USM allocation maps back to it (zero-copy); any
other host memory is copied into a new shared allocation (counted), and copied back at release for WRITE /
READ_WRITE mappings (counted too). Declared as copying: that is the edge's worst case.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Context
from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.usm import SYCLContext, USMTensor, host_view
from ..types import AccessMode, MemoryType


def _usm_origin(t: Tensor, ctx: Context) -> Any:
    """The host/shared USMTensor, in context ``ctx``, that ``t``'s memory lies in (walking the parent chain)."""
    addr, end = t.data_ptr, t.data_ptr + t.info.extent
    p: Any = t.parent
    for _ in range(16):
        if p is None:
            return None
        if isinstance(p, USMTensor) and not p.released and p.usm_type != "device" and p.context == ctx:
            size = getattr(p.native, "nbytes", None)
            base = p.base_pointer
            if isinstance(size, int) and base <= addr and end <= base + size:
                return p
        p = getattr(p, "parent", None)
    return None


@register
class CPUToUSM(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.USM
    zero_copy = False
    inputs = (CPUTensor,)
    output_contexts = (SYCLContext,)  # it allocates with dpctl

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        ctx = self.out_context()
        info = t.info
        origin = _usm_origin(t, ctx)
        if origin is not None:
            return USMTensor(origin.native, info, pointer=origin.base_pointer, usm_type=origin.usm_type, context=ctx,
                             parent=t, offset=t.data_ptr - origin.base_pointer, writable=t.writable and mode.writes)
        self.copying(info.nbytes, allow_copy, "this host memory is not a USM allocation")
        dense = TensorInfo(info.shape, info.dtype)
        mem = ctx.allocate(dense.nbytes, "shared")
        ptr = int(mem._pointer)
        dst = host_view(ptr, dense, mem, writable=True)
        src = t.numpy()
        np.copyto(dst, src)
        out = USMTensor(mem, dense, pointer=ptr, usm_type="shared", context=ctx, parent=t,
                        writable=t.writable and mode.writes)
        if mode.writes and info.nbytes:
            name = self.name
            back = host_view(t.data_ptr, info, t, writable=True)

            def write_back() -> None:
                ctx.queue.wait()
                np.copyto(back, dst)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
