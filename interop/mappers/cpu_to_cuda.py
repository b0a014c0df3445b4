"""CPU -> CUDA: a counted copy through a pinned staging block (reused) into a new device array.

The device array comes from torch or CuPy (whichever is installed; their caching allocators make per-frame
allocation cheap) and is the output's ``native``. The copy is queued on the output context's stream and waited
for, so the staging block can be reused at once. WRITE / READ_WRITE mappings copy back at release. Each transfer
is counted when it happens: the upload at map time (READ, READ_WRITE), the copy back at release (WRITE, READ_WRITE).
"""

from __future__ import annotations

from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.cuda import CUDAContext, missing_array_library, upload
from ..types import AccessMode, MemoryType


@register
class CPUToCUDA(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.CUDA
    zero_copy = False

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
