"""OPENVINO -> CPU: a numpy view of a host ``ov.Tensor``'s memory (``tensor.data``), zero-copy.

Frame planes shaped ``(1, rows, pitch_in_elements, C)`` (as FFmpeg and CPU frames are given to OpenVINO) come
back as the usual CPU plane shapes (H, W[, C]) with the pitch as row stride. Read-only OpenVINO tensors
(aliases of decoded frames) give read-only views. ``RemoteTensor``s live in device memory and are refused.
"""

from __future__ import annotations

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, plane_layout
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors._fastpath import CPUView, derive_frame
from ..tensors.openvino import OpenVINOTensor
from ..types import AccessMode, MemoryType


@register
class OpenVINOToCPU(MemoryMapper):
    src = MemoryType.OPENVINO
    dst = MemoryType.CPU
    zero_copy = True
    inputs = (OpenVINOTensor,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        _host(t)
        return CPUView.of(t.numpy(), t.info, t, t.writable and mode.writes)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = []
        for spec, t in zip(plane_layout(f.format), f.tensors):
            _host(t)
            arr = t.numpy()
            want = spec.shape(f.width, f.height)
            if arr.ndim == 4 and arr.shape[0] == 1 and arr.shape[1] == want[0] and arr.shape[2] >= want[1]:
                arr = arr[0] if len(want) == 3 else arr[0, :, :, 0]
                arr = arr[:, : want[1]]
            planes.append(CPUView.of(arr, TensorInfo(arr.shape, arr.dtype, arr.strides), t, t.writable and mode.writes))
        return derive_frame(f, planes, CPU_CONTEXT)



def _host(t: Tensor) -> None:
    if t.is_remote:  # type: ignore[attr-defined]
        raise InvalidTensorError("a RemoteTensor lives in device memory the CPU cannot read; copy it to a host "
                                 "tensor with RemoteTensor.copy_to(ov.Tensor(...)) first")

