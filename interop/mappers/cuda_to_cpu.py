"""CUDA -> CPU: a counted copy into a pinned (page-locked) host block, reused once its last view is gone.

Rows keep their elements but lose the device pitch (the CPU tensor is C-contiguous). READ mappings are
read-only; WRITE / READ_WRITE mappings copy the host data back to the GPU at release. Each transfer is counted when it
happens: the download at map time (READ, READ_WRITE), the upload at release (WRITE, READ_WRITE).
"""

from __future__ import annotations

from ..context import CPU_CONTEXT
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.cuda import CUDATensor, download, host_view, pinned_pool, upload_into
from ..types import AccessMode, MemoryType


@register
class CUDAToCPU(MemoryMapper):
    src = MemoryType.CUDA
    dst = MemoryType.CPU
    zero_copy = False
    inputs = (CUDATensor,)

    def _one(self, t: Tensor, mode: AccessMode, allow_copy: bool, sync: bool) -> CPUTensor:
        assert isinstance(t, CUDATensor)  # inputs
        info = t.info
        # one count per real transfer: the download now (READ, READ_WRITE), the upload at release (WRITE, READ_WRITE)
        if mode.reads:
            self.copying(info.nbytes, allow_copy, "device memory is copied to host memory")
        elif not allow_copy:
            self.copying(info.nbytes, False, "the host data is copied to device memory at release")  # raises
        stream = t.context.stream if t.context is not None else 1  # type: ignore[attr-defined]
        t.sync_to(stream)
        host = host_view(pinned_pool(t.device_id).take(info.nbytes), info)
        if mode.reads:
            download(t, host, stream, sync=sync)
        out = CPUTensor(host, context=CPU_CONTEXT, parent=t, writable=mode.writes)
        if mode.writes:
            ptr, dev, name = t.ptr, t.device_id, self.name

            def write_back() -> None:
                upload_into(host, ptr, info, dev, stream)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._one(t, mode, allow_copy, sync=True)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        # Queue every plane's copy, then wait once.
        planes = f.tensors
        out = [self._one(t, mode, allow_copy, sync=i == len(planes) - 1) for i, t in enumerate(planes)]
        return f.derive(out, context=CPU_CONTEXT)
