"""CPU -> OPENCV: a cv2.Mat over the same memory (cv2.Mat is a numpy subclass in OpenCV 5): zero-copy."""

from __future__ import annotations

from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.opencv import OpenCVTensor, as_mat
from ..types import AccessMode, MemoryType


@register
class CPUToOpenCV(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.OPENCV
    zero_copy = True
    inputs = (CPUTensor,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        writable = t.writable and mode.writes
        arr = t.numpy()
        if not writable and arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False  # a READ mapping's cv2.Mat is read-only too (OpenCV refuses it as an output)
        return OpenCVTensor(as_mat(arr), parent=t, writable=writable)
