"""CPU -> OPENCL: a USE_HOST_PTR buffer over the host memory where the device works in host memory (the CPU
device: zero-copy, the buffer *is* the array); elsewhere a device buffer and a counted copy (and a counted copy
back at release for WRITE / READ_WRITE). The edge "may copy": routes and ``interop routes`` say which it is for the
output context (the default one: this machine's OpenCL device).
"""

from __future__ import annotations

from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.opencl import OpenCLContext
from ..types import AccessMode, MemoryType


@register
class CPUToOpenCL(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.OPENCL
    zero_copy = False
    may_copy = True  # zero-copy where the device works in host memory
    output_contexts = (OpenCLContext,)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        return Cost.ZERO_COPY if self.out_context().host_shared else Cost.COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.opencl import OpenCLTensor, buffer_over_host, cl, enqueue_host_copy

        ctx = self.out_context()
        info = t.info
        writable = t.writable and mode.writes  # a READ mapping is read-only, whatever the source allows
        if ctx.host_shared:
            # the Buffer holds a numpy view of the source, which keeps the memory alive (a mapping too) for as
            # long as a user holds ``.native``, after this tensor and the source are gone
            buf = buffer_over_host(ctx, t.data_ptr, info.extent, t.numpy(), read_only=not t.writable)
            return OpenCLTensor(buf, info, context=ctx, parent=t, writable=writable)
        # A device with its own memory: one counted copy in, and one back at release when the mapping writes.
        self.copying(info.nbytes, allow_copy, "the OpenCL device does not work in host memory")
        cl_ = cl()
        dense = TensorInfo(info.shape, info.dtype)
        access = cl_.mem_flags.READ_WRITE if t.writable else cl_.mem_flags.READ_ONLY
        buf = cl_.Buffer(ctx.native, access, max(info.nbytes, 1))
        host = t.numpy()
        q = ctx.queue
        enqueue_host_copy(q, buf, 0, dense, host, to_device=True)
        out = OpenCLTensor(buf, dense, context=ctx, parent=t, writable=writable)
        if mode.writes and info.nbytes:
            name = self.name

            def write_back() -> None:
                enqueue_host_copy(q, buf, 0, dense, host, to_device=False)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out

