"""DMA -> OPENVINO (CPU device): ``ov.Tensor(shared_memory=True)`` over the CPU mapping of each plane. Zero-copy.

Frame planes come out as FFMPEG -> OPENVINO shapes them: (1, rows, pitch_in_elements, C) over the full pitch,
so padded rows stay padded (crop inside the model). A single tensor keeps its shape when it is C-contiguous.
OpenVINO wants a writeable pointer and never writes its inputs, so READ gets a private writeable alias of the
read-write mapping; the sync END runs when the OpenVINO tensor is released.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Context
from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor, _ArrayExport
from ..tensors._dma_host import map_dma_to_host
from ..types import AccessMode, MemoryType


def _full_pitch(arr: np.ndarray, room: int) -> np.ndarray:
    """(1, rows, pitch/itemsize/C, C) over the padded rows of a plane (H, W[, C]); ``room``: bytes from the plane's
    start to the end of its buffer (the last row's padding must be inside it)."""
    rows = arr.shape[0]
    ch = arr.shape[2] if arr.ndim == 3 else 1
    pitch = arr.strides[0]
    unit = arr.itemsize * ch
    if pitch % unit or rows * pitch > room:
        if arr.flags.c_contiguous:
            return arr.reshape((1, rows, arr.shape[1], ch))
        raise InvalidTensorError(f"a plane with pitch {pitch} whose last row's padding lies outside the buffer cannot be "
                                 f"shared with OpenVINO: allocate frames with a FramePool/DMAContext (padded buffers)")
    iface = {"version": 3, "shape": (1, rows, pitch // unit, ch), "typestr": arr.dtype.str,
             "data": (arr.__array_interface__["data"][0], False), "strides": None}
    return np.asarray(_ArrayExport(iface, arr))


@register
class DMAToOpenVINO(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.OPENVINO
    zero_copy = True

    def _ctx(self) -> Context | None:
        return self.output_context

    def _plane(self, t: Any, mode: AccessMode, shaped: bool) -> Tensor:
        from ..tensors.openvino import OpenVINOTensor

        host = map_dma_to_host(t, mode, writable_alias=True)
        arr = host.numpy()
        if not arr.flags.writeable:
            host.release()
            raise InvalidTensorError("this dma-buf fd is read-only: OpenVINO needs a writeable mapping; "
                                     "ask the producer for an O_RDWR fd")
        if shaped and arr.ndim in (2, 3):
            arr = _full_pitch(arr, t.size - t.offset)
        elif not arr.flags.c_contiguous:
            host.release()
            raise InvalidTensorError(f"OpenVINO shares only C-contiguous memory; this DMA tensor has strides "
                                     f"{t.info.strides} for shape {t.info.shape}: map a Frame (full-pitch planes)")
        out = OpenVINOTensor.from_numpy(arr, parent=t, context=self._ctx(), writable=mode.writes)
        out.on_release(host.release)
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._plane(t, mode, shaped=False)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = [self._plane(t, mode, shaped=True) for t in f.tensors]
        return f.derive(planes, context=planes[0].context)
