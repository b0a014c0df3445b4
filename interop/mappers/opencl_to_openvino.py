"""OPENCL -> OPENVINO.

* CPU device (tier A): the buffer region is mapped into host memory and shared with OpenVINO
  (``ov.Tensor(shared_memory=True)`` through ``OpenVINOTensor.from_numpy``): zero-copy, released (unmapped) with
  the OpenVINO tensor. OpenVINO needs a writeable pointer even for inputs, so a READ mapping hands it a private
  writeable alias while the OpenVINOTensor itself stays read-only. Row-padded tensors are shared at full pitch,
  shaped (1, rows, pitch_in_elements, C) like other padded planes (crop inside the model).
* Intel GPU (tier C): a remote tensor over the cl_mem (``OCL_BUFFER``) in an OpenVINO GPU context made on the
  same cl_context. Coded against the documented properties; only testable on Intel GPU hardware. Found here:
  the openvino 2026.4 wheel's Python API turns ints in property maps into int64, and the GPU plugin wants a
  ``void*`` for ``OCL_CONTEXT`` / ``MEM_HANDLE`` ("Bad as from: l to: Pv"); the wheel has no ``ClContext``
  binding that would wrap one. Where that holds, the mapper says so with BackendUnavailableError.
"""

from __future__ import annotations

from typing import Any

from ..context import Context
from ..errors import BackendUnavailableError, ContextMismatchError, InvalidTensorError, WrongMemoryError
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


def shared_layout(info: TensorInfo, buffer_size: int, offset: int) -> TensorInfo:
    """The C-contiguous layout OpenVINO can share for ``info`` (itself, or the full padded rows)."""
    if info.is_contiguous:
        return TensorInfo(info.shape, info.dtype)
    if info.ndim not in (2, 3):
        raise WrongMemoryError(f"OpenVINO shares C-contiguous memory only; {info} is not row-padded (H, W[, C])")
    c = info.shape[2] if info.ndim == 3 else 1
    pixel = c * info.itemsize
    pitch = info.strides[0]
    inner = (pixel, info.itemsize) if info.ndim == 3 else (info.itemsize,)
    if tuple(info.strides[1:]) != inner or pitch % pixel:
        raise WrongMemoryError(f"{info}: not row-padded by whole pixels, so OpenVINO cannot share it")
    rows = info.shape[0]
    if offset + rows * pitch > buffer_size:
        raise WrongMemoryError(f"{info} at offset {offset}: the buffer ends inside the last row's padding, so the "
                                 f"padded rows cannot be shared; use a contiguous tensor")
    return TensorInfo((1, rows, pitch // pixel, c), info.dtype)


@register
class OpenCLToOpenVINO(MemoryMapper):
    src = MemoryType.OPENCL
    dst = MemoryType.OPENVINO
    zero_copy = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        """Zero-copy, for the inputs ``map_tensor`` takes: on the CPU device a host-memory buffer whose layout
        OpenVINO can share (``shared_layout``); refused here as it would be when mapping, so routing goes another
        way (a layout OpenVINO cannot share is a WrongMemoryError)."""
        if obj is None:
            return Cost.ZERO_COPY
        ovc = self.output_context or Context.default(MemoryType.OPENVINO)
        gpu = str(getattr(ovc, "device", "CPU")).startswith("GPU")
        for t in obj.tensors if isinstance(obj, Frame) else (obj,):
            if gpu:
                if t.offset or not t.info.is_contiguous:  # type: ignore[attr-defined]
                    raise WrongMemoryError("an OpenVINO remote tensor over a cl_mem must be C-contiguous and start at "
                                           "the cl_mem's origin")
                continue
            if not t.context.host_shared:  # type: ignore[union-attr]
                raise ContextMismatchError(
                    f"OpenVINO {ovc.device} reads host memory, and {t.context!r} is not a host-memory device: map to "
                    f"CPU (a driver-side transfer) or use an OpenVINO GPU context on an Intel GPU")
            shared_layout(t.info, t.native.size, t.offset)  # type: ignore[attr-defined]
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.opencl import OpenCLTensor, map_to_host
        from ..tensors.openvino import OpenVINOTensor

        if not isinstance(t, OpenCLTensor):
            raise InvalidTensorError(f"{self.name} maps OpenCLTensors, not {type(t).__name__}")
        if mode.writes and not t.writable:
            raise InvalidTensorError("this OpenCL tensor is read-only: map it with AccessMode.READ")
        ovc = self.output_context or Context.default(MemoryType.OPENVINO)
        device = str(getattr(ovc, "device", "CPU"))
        if device.startswith("GPU"):
            return self._remote(t, ovc, mode)
        ocl: Any = t.context
        if not ocl.host_shared:  # type: ignore[union-attr]
            raise ContextMismatchError(
                f"OpenVINO {device} reads host memory, and {ocl!r} is not a host-memory device: map to CPU "
                f"(a driver-side transfer) or use an OpenVINO GPU context on an Intel GPU")
        layout = shared_layout(t.info, t.native.size, t.offset)
        region = t if t.info.is_contiguous else OpenCLTensor(t.native, layout, offset=t.offset, context=ocl, parent=t,
                                                             writable=t.writable)
        host = map_to_host(region, mode, writable=True)  # OpenVINO insists on a writeable pointer
        arr = host.numpy().reshape(layout.shape)
        out = OpenVINOTensor.from_numpy(arr, parent=host, context=ovc, writable=t.writable and mode.writes)
        out.on_release(host.release)  # unmaps: writes become visible to OpenCL
        return out

    def _remote(self, t: Any, ovc: Any, mode: AccessMode) -> Tensor:
        from ..tensors.openvino import OpenVINOTensor, ov_module

        if t.offset:
            raise InvalidTensorError("an OpenVINO remote tensor starts at its cl_mem's origin: this tensor has an offset "
                                     f"of {t.offset} bytes; crop inside the model instead")
        if not t.info.is_contiguous:
            raise InvalidTensorError("an OpenVINO remote tensor over a cl_mem must be C-contiguous")
        ov = ov_module()
        core = ovc.core
        try:
            rctx = core.create_context(ovc.device, {"CONTEXT_TYPE": "OCL", "OCL_CONTEXT": t.context.cl_context})
            rt = rctx.create_tensor(ov.Type(t.info.dtype), ov.Shape(list(t.info.shape)),
                                    {"SHARED_MEM_TYPE": "OCL_BUFFER", "MEM_HANDLE": t.cl_mem})
        except RuntimeError as e:
            why = str(e)
            if "Bad as from" in why:
                why = ("this openvino Python build cannot pass an OpenCL handle (void*) in a property map and has no "
                       "ClContext binding; map to CPU (the driver moves the data) or use the CPU device")
            raise BackendUnavailableError(f"OpenVINO {ovc.device} cannot share the cl_mem: {why}", backend="openvino",
                                          extra="openvino") from e
        return OpenVINOTensor(rt, context=ovc, parent=t, writable=t.writable and mode.writes, info=t.info)
