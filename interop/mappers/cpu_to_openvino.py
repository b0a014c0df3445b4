"""CPU -> OPENVINO: ``ov.Tensor(array, shared_memory=True)`` over the host memory, zero-copy.

OpenVINO shares only C-contiguous, writeable memory. A plane with padded rows is exposed at full pitch
(``(rows, pitch_in_elements[, C])``; in a Frame every plane is ``(1, rows, pitch_in_elements, C)``, as from
FFmpeg) when the padding of the last row lies inside the buffer; otherwise the plane must be copied, which is
refused unless ``allow_copy=True`` and then counted. A read-only array (e.g. a READ view of a decoded frame)
is handed to OpenVINO through a private writeable alias for READ mappings; OpenVINO never writes its inputs.

A READ mapping is read-only through interop: ``numpy.asarray(t)`` and ``np.from_dlpack(t)`` give read-only
arrays and a WRITE mapping of it is refused. The ``ov.Tensor`` in ``.native`` cannot be made read-only
(OpenVINO shares only writeable memory): writing through ``t.native.data`` writes into the source.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import Cost, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors._fastpath import FastMapper, derive_frame
from ..tensors.cpu import _alias, shareable
from ..tensors.openvino import OpenVINOContext, OpenVINOTensor, default_context
from ..types import AccessMode, MemoryType


@register
class CPUToOpenVINO(FastMapper):
    src = MemoryType.CPU
    dst = MemoryType.OPENVINO
    zero_copy = False  # planes whose padding is not in the buffer are copied, only with allow_copy, and counted
    may_copy = True
    output_contexts = (OpenVINOContext,)

    def default_output_context(self) -> OpenVINOContext:
        return default_context()

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:
            return Cost.COPY
        frame = isinstance(obj, Frame)
        for t in obj.tensors if isinstance(obj, Frame) else [obj]:
            if shareable(t.native if isinstance(t.native, np.ndarray) else t.numpy(), frame) is None:
                return Cost.COPY
        return Cost.ZERO_COPY

    def _context(self) -> OpenVINOContext:
        return self.out_context()  # type: ignore[no-any-return]

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._tensor(t, mode, allow_copy, self._context(), frame_plane=False)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ctx = self._context()
        return derive_frame(f, [self._tensor(t, mode, allow_copy, ctx, frame_plane=True) for t in f.tensors], ctx)

    def _tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool, ctx: OpenVINOContext,
                frame_plane: bool) -> OpenVINOTensor:
        arr = t.native if isinstance(t.native, np.ndarray) else t.numpy()
        if mode.writes and not (t.writable and arr.flags.writeable):
            raise InvalidTensorError("this CPU tensor is read-only (e.g. a view of a decoder's reference frame): "
                                     "map it with mode=READ, or map a writable copy")
        shared = shareable(arr, frame_plane)
        if shared is None:
            self.copying(t.info.nbytes, allow_copy,
                         f"OpenVINO shares only C-contiguous memory and this array (shape {arr.shape}, strides "
                         f"{arr.strides}) cannot be exposed at full pitch")
            copy = np.ascontiguousarray(arr)
            shared = copy
            if frame_plane:
                shared = copy.reshape((1,) + copy.shape + ((1,) if copy.ndim == 2 else ()))
            # a READ copy is read-only (writes to it would be lost); a WRITE copy goes back at release
            out = OpenVINOTensor.from_numpy(shared, parent=t, context=ctx, writable=mode.writes)
            if mode.writes:
                name = self.name

                def write_back() -> None:
                    np.copyto(arr, copy)
                    record_copy(name, copy.nbytes)
                out.on_release(write_back)
            return out
        # A READ mapping is read-only for interop's users (numpy/DLPack views of it), whatever the source allows;
        # the ov.Tensor in ``native`` cannot be made read-only (OpenVINO shares only writeable memory)
        writable = mode.writes and t.writable and arr.flags.writeable
        if not shared.flags.writeable:  # private writeable alias: OpenVINO never writes inputs
            shared = _alias(int(shared.__array_interface__["data"][0]), shared.shape, shared.dtype, shared,
                            readonly=False)
        return OpenVINOTensor.from_numpy(shared, parent=t, context=ctx, writable=writable)

