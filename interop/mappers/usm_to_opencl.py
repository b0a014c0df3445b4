"""USM -> OPENCL: on the shared context, a USM allocation becomes an OpenCL buffer without a copy.

The output's ``native`` is a ``USE_HOST_PTR`` pyopencl.Buffer over the whole USM allocation (``offset`` is the
region) and ``usm_pointer`` keeps the USM address, so kernels can take it directly through the Intel USM
extension (``OpenCLTensor.set_kernel_arg`` -> ``clSetKernelArgMemPointerINTEL``). The USM tensor's SYCL context
must be the OpenCL context's cl_context; when it is not (dpctl could not adopt the context here), the data is
copied into a buffer of the OpenCL context: a counted copy, refused unless allow_copy.
"""

from __future__ import annotations

from ..errors import ContextMismatchError
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.opencl import OpenCLContext
from ..tensors.usm import USMTensor
from ..types import AccessMode, MemoryType


@register
class USMToOpenCL(MemoryMapper):
    src = MemoryType.USM
    dst = MemoryType.OPENCL
    zero_copy = False  # USM of another context is copied (host/shared), only with allow_copy
    may_copy = True
    inputs = (USMTensor,)
    output_contexts = (OpenCLContext,)
    requires = ("pyopencl",)  # the USM may be Level Zero's: no dpctl

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.COPY
        cl_context = self.out_context().cl_context
        for t in obj.tensors if isinstance(obj, Frame) else [obj]:
            if getattr(t.context, "cl_context", None) != cl_context:
                if t.usm_type == "device":  # type: ignore[attr-defined]
                    raise ContextMismatchError(f"device USM of {t.context!r} cannot reach OpenCL context "
                                               f"{self.out_context()!r}; map it to CPU first (allow_copy=True)")
                return Cost.COPY
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..native.opencl_usm import usm_functions
        from ..tensors.opencl import OpenCLTensor, buffer_over_host, cl, enqueue_host_copy

        assert isinstance(t, USMTensor)
        ctx = self.out_context()
        wait = getattr(getattr(t.context, "queue", None), "wait", None)
        if wait is not None:
            wait()  # SYCL work on the allocation is done before OpenCL touches it
        info = t.info
        same = getattr(t.context, "cl_context", None) == ctx.cl_context
        if same:
            kind = usm_functions(ctx.device.platform.int_ptr).alloc_type(ctx.cl_context, t.base_pointer)
            if kind == "unknown":
                raise ContextMismatchError(f"{t.base_pointer:#x} is not a USM allocation of cl_context {ctx.cl_context:#x}")
            size = getattr(t.native, "nbytes", None) or (t.offset + info.extent)
            # the Buffer holds ``t`` (hence the allocation) for as long as a user holds ``.native``
            buf = buffer_over_host(ctx, t.base_pointer, int(size), t, read_only=not t.writable)
            return OpenCLTensor(buf, info, offset=t.offset, context=ctx, parent=t, writable=t.writable and mode.writes,
                                usm_pointer=t.base_pointer)
        # Separate contexts: copy through the host view of the allocation (host/shared) into an OpenCL buffer.
        if t.usm_type == "device":
            raise ContextMismatchError(
                f"device USM of {t.context!r} cannot reach OpenCL context {ctx!r}; map it to CPU first (allow_copy=True)")
        self.copying(info.nbytes, allow_copy, f"the USM tensor's context {t.context!r} is not {ctx!r}")

        cl_ = cl()
        dense = TensorInfo(info.shape, info.dtype)
        buf = cl_.Buffer(ctx.native, cl_.mem_flags.READ_WRITE, max(info.nbytes, 1))
        host = t.numpy()
        q = ctx.queue
        enqueue_host_copy(q, buf, 0, dense, host, to_device=True)
        out = OpenCLTensor(buf, dense, context=ctx, parent=t, writable=mode.writes)
        if mode.writes and info.nbytes:  # the copy goes back into the allocation at release (counted)
            name = self.name

            def write_back() -> None:
                enqueue_host_copy(q, buf, 0, dense, host, to_device=False)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
