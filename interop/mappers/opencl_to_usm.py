"""OPENCL -> USM: zero-copy when the cl_mem was made over a USM allocation of the same context (its
CL_MEM_HOST_PTR is a USM pointer, e.g. the output of usm_to_opencl); otherwise the region is copied into a new
shared allocation on the OpenCL queue (counted), and copied back at release for WRITE / READ_WRITE (counted).
"""

from __future__ import annotations

from typing import Any

from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.opencl import OpenCLTensor, enqueue_host_copy
from ..tensors.usm import _SUAI, SYCLContext, USMTensor, dpctl, host_view
from ..types import AccessMode, MemoryType


@register
class OpenCLToUSM(MemoryMapper):
    src = MemoryType.OPENCL
    dst = MemoryType.USM
    zero_copy = False
    inputs = (OpenCLTensor,)
    output_contexts = (SYCLContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, OpenCLTensor)  # inputs
        from ..native.opencl_usm import mem_host_ptr, usm_functions
        ctx = self.out_context()
        ocl = t.context
        info = t.info
        q = t.queue
        if ctx.cl_context == ocl.cl_context:  # type: ignore[union-attr]
            host_ptr = mem_host_ptr(t.cl_mem)
            if host_ptr:
                usm = usm_functions(ocl.device.platform.int_ptr)  # type: ignore[union-attr]
                kind = usm.alloc_type(ocl.cl_context, host_ptr)  # type: ignore[union-attr]
                if kind != "unknown":
                    q.finish()  # OpenCL work on the buffer is done before SYCL touches it
                    # the dpctl memory holds the SUAI, which holds ``t``: the allocation under the cl_mem lives
                    # as long as a user holds ``.native``
                    mem: Any = dpctl().memory.as_usm_memory(_SUAI(host_ptr, t.native.size, ctx.queue, owner=t))
                    return USMTensor(mem, info, pointer=host_ptr, usm_type=kind, context=ctx, parent=t,
                                     offset=t.offset, writable=t.writable and mode.writes)
        self.copying(info.nbytes, allow_copy, "the cl_mem is not a USM allocation of the SYCL context")
        dense = TensorInfo(info.shape, info.dtype)
        mem = ctx.allocate(dense.nbytes, "shared")
        ptr = int(mem._pointer)
        host = host_view(ptr, dense, mem, writable=True)
        enqueue_host_copy(q, t.native, t.offset, info, host, to_device=False)
        out = USMTensor(mem, dense, pointer=ptr, usm_type="shared", context=ctx, parent=t,
                        writable=t.writable and mode.writes)
        if mode.writes and info.nbytes:
            name, buf, off = self.name, t.native, t.offset
            squeue = ctx.queue

            def write_back() -> None:
                squeue.wait()
                enqueue_host_copy(q, buf, off, info, host, to_device=True)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
