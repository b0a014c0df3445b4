"""OPENCL -> OPENCV_UMAT: one counted device copy into a new UMat (opencv-python cannot wrap a foreign cl_mem as
a UMat: ``convertFromBuffer`` is not bound, feasibility Q2). WRITE / READ_WRITE mappings copy back at release
(counted too). The OpenCL tensor must live in OpenCV's own context.
"""

from __future__ import annotations

from ..errors import ContextMismatchError
from ..info import TensorInfo
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.opencl import OpenCLTensor, cl, enqueue_copy_region
from ..tensors.opencv import UMatContext, UMatTensor, cv2, new_umat
from ..types import AccessMode, MemoryType


@register
class OpenCLToOpenCVUMat(MemoryMapper):
    src = MemoryType.OPENCL
    dst = MemoryType.OPENCV_UMAT
    zero_copy = False
    inputs = (OpenCLTensor,)
    output_contexts = (UMatContext,)
    extra = "opencl"  # the OpenCL runtime is what a UMat over a cl_mem needs beyond OpenCV

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, OpenCLTensor)  # inputs
        ucx = self.out_context()
        if getattr(ucx, "cl_context", None) != t.context.cl_context:  # type: ignore[union-attr]
            raise ContextMismatchError(
                f"the OpenCL tensor belongs to {t.context!r}, OpenCV works in cl_context {getattr(ucx, 'cl_context', 0):#x}: "
                f"a cl_mem cannot cross contexts; allocate the tensor in Context.default(MemoryType.OPENCL)")
        info = t.info
        umat = new_umat(info)  # raises InvalidTensorError for shapes a UMat cannot hold, before counting a copy
        self.copying(info.nbytes, allow_copy, "opencv-python cannot wrap a foreign cl_mem as a UMat")
        dense = TensorInfo(info.shape, info.dtype)
        cl_ = cl()
        q = t.queue
        dst = cl_.Buffer.from_int_ptr(umat.handle(cv2().ACCESS_WRITE), retain=True)
        enqueue_copy_region(q, dst, umat.offset, dense, t.native, t.offset, info)
        q.finish()  # OpenCV may use another queue of the same context
        out = UMatTensor(umat, dense, parent=t, writable=t.writable and mode.writes)
        if mode.writes and info.nbytes:
            name, src, src_off = self.name, t.native, t.offset

            def write_back() -> None:
                back = cl_.Buffer.from_int_ptr(umat.handle(cv2().ACCESS_READ), retain=True)
                enqueue_copy_region(q, src, src_off, info, back, umat.offset, dense)
                q.finish()
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
