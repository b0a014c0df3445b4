"""CPU -> CUDA: a counted copy through a pinned staging block (reused) into a new device array.

The device array comes from torch or CuPy (whichever is installed; their caching allocators make per-frame
allocation cheap) and is the output's ``native``. The copy is queued on the output context's stream and waited
for, so the staging block can be reused at once. WRITE / READ_WRITE mappings copy back at release. Each transfer
is counted when it happens: the upload at map time (READ, READ_WRITE), the copy back at release (WRITE, READ_WRITE).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Context
from ..errors import InvalidTensorError
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cuda import (
    CUDAContext,
    CUDATensor,
    cached_info,
    device_empty,
    download,
    host_view,
    missing_array_library,
    pinned_pool,
    upload_into,
)
from ..types import AccessMode, MemoryType


def upload(t: Tensor, ctx: Context, mode: AccessMode, *, parent: Any, name: str = "cpu_to_cuda") -> CUDATensor:
    """Copy CPU tensor ``t`` to a new C-contiguous device array on ``ctx`` (the caller counts that copy; the
    write-back of a writing mode is counted under ``name`` when it runs)."""
    src = t.numpy()
    info = cached_info(src.shape, src.dtype, None)
    dev, stream = int(ctx.device), ctx.stream  # type: ignore[attr-defined]
    arr, ptr = device_empty(info.shape, info.dtype, dev)
    if mode.reads:
        stage = host_view(pinned_pool(dev).take(info.nbytes), info)
        np.copyto(stage, src)
        upload_into(stage, ptr, info, dev, stream, sync=True)
    out = CUDATensor(arr, info, ptr=ptr, device=dev, stream=None, context=ctx, parent=parent, writable=True)
    if mode.writes:
        if not t.writable:
            raise InvalidTensorError("the CPU tensor is read-only: map it with AccessMode.READ")

        def write_back() -> None:
            stage = host_view(pinned_pool(dev).take(info.nbytes), info)
            download(_Raw(ptr, info, dev), stage, stream, sync=True)
            np.copyto(src, stage)
            record_copy(name, info.nbytes)

        out.on_release(write_back)
    return out


class _Raw:
    """What download() reads of a tensor, for the write-back that runs after the tensor was released."""

    def __init__(self, ptr: int, info: Any, device: int):
        self.ptr, self.info, self.device_id = ptr, info, device


@register
class CPUToCUDA(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.CUDA
    zero_copy = False
    tier = "B"

    @classmethod
    def missing(cls) -> str | None:
        return missing_array_library()

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        ctx = self.output_context if self.output_context is not None else CUDAContext.get(0)
        # one count per real transfer: the upload now (READ, READ_WRITE), the download at release (WRITE, READ_WRITE)
        if mode.reads:
            self.copying(t.info.nbytes, allow_copy, "host memory is copied to the GPU")
        elif not allow_copy:
            self.copying(t.info.nbytes, False, "the device data is copied back to host memory at release")  # raises
        return upload(t, ctx, mode, parent=t, name=self.name)
