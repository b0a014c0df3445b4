"""CPU -> OPENCV: a cv2.Mat over the same memory (cv2.Mat is a numpy subclass in OpenCV 5): zero-copy."""

from __future__ import annotations

from ..errors import InvalidTensorError
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


@register
class CPUToOpenCV(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.OPENCV
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.opencv import OpenCVTensor, as_mat

        if mode.writes and not t.writable:
            raise InvalidTensorError("this CPU tensor is read-only: map it with AccessMode.READ")
        writable = t.writable and mode.writes
        arr = t.numpy()
        if not writable and arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False  # a READ mapping's cv2.Mat is read-only too (OpenCV refuses it as an output)
        return OpenCVTensor(as_mat(arr), parent=t, writable=writable)
