"""OPENCV -> CPU: a plain numpy view of the cv2.Mat's memory, zero-copy (read-only for READ mappings)."""

from __future__ import annotations

from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.opencv import OpenCVTensor
from ..types import AccessMode, MemoryType


@register
class OpenCVToCPU(MemoryMapper):
    src = MemoryType.OPENCV
    dst = MemoryType.CPU
    zero_copy = True
    inputs = (OpenCVTensor,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        view = t.numpy()  # a plain ndarray (not a cv2.Mat) over the same memory
        w = t.writable and mode.writes
        if not w and view.flags.writeable:
            view = view.view()
            view.flags.writeable = False
        return CPUTensor(view, parent=t, writable=w)
