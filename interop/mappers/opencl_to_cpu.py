"""OPENCL -> CPU: clEnqueueMapBuffer of the tensor's region; release unmaps (WRITE mappings become visible then).

Zero-copy on devices that work in host memory (the CPU device: the mapped pointer is the buffer's storage); on a
discrete GPU the driver moves the data inside map/unmap, which is the OpenCL way of reaching it from the CPU.
"""

from __future__ import annotations

from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.opencl import OpenCLTensor, map_to_host
from ..types import AccessMode, MemoryType


@register
class OpenCLToCPU(MemoryMapper):
    src = MemoryType.OPENCL
    dst = MemoryType.CPU
    zero_copy = True
    inputs = (OpenCLTensor,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, OpenCLTensor)  # inputs
        return map_to_host(t, mode)
