"""OPENCV_UMAT -> OPENCL: the UMat's own cl_mem wrapped by pyopencl, zero-copy; a ROI's offset is kept in ``offset``."""

from __future__ import annotations

from ..errors import ContextMismatchError
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.opencl import OpenCLContext, OpenCLTensor, cl
from ..tensors.opencv import UMatTensor, cv2
from ..types import AccessMode, MemoryType


@register
class OpenCVUMatToOpenCL(MemoryMapper):
    src = MemoryType.OPENCV_UMAT
    dst = MemoryType.OPENCL
    zero_copy = True
    inputs = (UMatTensor,)
    output_contexts = (OpenCLContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, UMatTensor)
        ctx = self.out_context()
        ucx = t.context
        if ctx.cl_context != getattr(ucx, "cl_context", None):
            raise ContextMismatchError(
                f"the UMat lives in OpenCV's cl_context {getattr(ucx, 'cl_context', 0):#x}, the output context is {ctx!r}: "
                f"a cl_mem cannot cross contexts; map to the default OpenCL context (OpenCV's own)")
        c = cv2()
        if int(c.UMat.queue()) != ctx.queue.int_ptr:  # OpenCV queued this thread's work elsewhere: let it finish
            c.ocl.finish()
        # handle() with write access tells OpenCV its host copy is stale, so OpenCL writes are seen by OpenCV.
        buf = cl().Buffer.from_int_ptr(t.cl_mem_for(mode.writes), retain=True)
        return OpenCLTensor(buf, t.info, offset=t.offset, context=ctx, parent=t, writable=t.writable and mode.writes)
