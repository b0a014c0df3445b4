"""OPENCV_UMAT -> CPU: the UMat's cl_mem mapped into host memory on OpenCV's own queue (zero-copy on the CPU
device: about 50 us for 64 MiB where ``UMat.get()`` copies). Release unmaps; WRITE mappings are seen by OpenCV then.
"""

from __future__ import annotations

from ..errors import InvalidTensorError
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType
from .opencv_umat_to_opencl import OpenCVUMatToOpenCL


@register
class OpenCVUMatToCPU(MemoryMapper):
    src = MemoryType.OPENCV_UMAT
    dst = MemoryType.CPU
    zero_copy = True
    requires = ("cv2", "pyopencl")
    extra = "opencl"

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.opencl import OpenCLTensor, map_to_host

        if mode.writes and not t.writable:
            raise InvalidTensorError("this UMat tensor is read-only: map it with AccessMode.READ")
        ocl = OpenCVUMatToOpenCL().map_tensor(t, mode, allow_copy)
        assert isinstance(ocl, OpenCLTensor)
        return map_to_host(ocl, mode)
