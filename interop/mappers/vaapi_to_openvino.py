"""VAAPI -> OPENVINO. Zero-copy on both paths:

- GPU output context (``OpenVINOContext("GPU")``): OpenVINO's ``VAContext`` (a GPU remote context sharing the VA
  display; tier C, needs an Intel GPU) and ``create_tensor_nv12(height, width, surface_id)``: an NV12 frame becomes
  two ``VASurfaceTensor``s, Y (1, H, W, 1) and UV (1, H/2, W/2, 2), the layout OpenVINO's NV12 pre-processing
  takes. Only NV12 surfaces and whole surfaces (no crop: crop in the model) can be shared this way. Compile the
  model on the same remote context (``va_remote_context(...)``) so inference reads the surface itself.
- any other device (CPU): this edge raises WrongMemoryError, and routing takes VAAPI -> DMA -> OPENVINO (the
  surface exported, its planes shared through the host mapping at their full pitch).

The VADisplay reaches OpenVINO as a PyCapsule holding the pointer (pybind11's ``void*`` argument); surface ids are
plain ints.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

from ..errors import InvalidTensorError, UnsupportedFormatError, WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..tensor import Tensor
from ..tensors.openvino import OpenVINOContext
from ..types import AccessMode, FrameFormat, MemoryType

_lock = threading.Lock()
_remote: dict[tuple[int, int], Any] = {}


def display_capsule(handle: int) -> Any:
    """A PyCapsule holding the VADisplay pointer (what pybind11 hands to a C++ ``void*`` parameter)."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(handle, None, None)


def _va_context_class() -> Any:
    from ..tensors.openvino import ov_module

    return ov_module().VAContext


def va_remote_context(va_ctx: Any, ov_ctx: Any, tile_id: int = -1) -> Any:
    """OpenVINO's ``VAContext`` for a VA display and an OpenVINO core (made once per display and core).

    Compile the model with ``core.compile_model(model, va_remote_context(...))`` so it runs on the GPU that owns
    the surfaces.
    """
    key = (int(va_ctx.display.handle), id(ov_ctx.core))
    with _lock:
        rc = _remote.get(key)
        if rc is None:
            rc = _va_context_class()(ov_ctx.core, display_capsule(va_ctx.display.handle), tile_id)
            _remote[key] = rc
            # forget it with the display (a new display may reuse the address)
            weakref.finalize(va_ctx.display, _remote.pop, key, None)
        return rc


def _is_gpu(ctx: Any) -> bool:
    return str(getattr(ctx, "device", "")).upper().startswith("GPU")


@register
class VAAPIToOpenVINO(MemoryMapper):
    src = MemoryType.VAAPI
    dst = MemoryType.OPENVINO
    zero_copy = True
    output_contexts = (OpenVINOContext,)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        self._out()
        return Cost.ZERO_COPY

    def _out(self) -> Any:
        out = self.out_context()
        if not _is_gpu(out):
            raise WrongMemoryError(f"vaapi_to_openvino shares VA surfaces with an OpenVINO GPU context only, not "
                                   f"{out!r}; routing takes VAAPI -> DMA -> OPENVINO for host devices")
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.openvino import OpenVINOTensor, ov_module
        from ..tensors.vaapi import surface_of

        out = self._out()
        surface = surface_of(t)
        self._whole(surface, [t])
        surface.sync()
        rc = va_remote_context(surface.context, out)
        shape = (1,) + t.info.shape + ((1,) if t.info.ndim == 2 else ())
        ov = ov_module()
        rt = rc.create_tensor(ov.Type.u8, ov.Shape(list(shape)), surface.surface_id, t.plane_index)  # type: ignore[attr-defined]
        return OpenVINOTensor(rt, context=out, parent=t, writable=mode.writes)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        from ..tensors.openvino import OpenVINOTensor
        from ..tensors.vaapi import check_planes, surface_of

        out = self._out()
        check_planes(f)
        if f.format is not FrameFormat.NV12:
            raise UnsupportedFormatError(f"OpenVINO's GPU shares NV12 VA surfaces only, not {f.format.name}: convert on the "
                                         f"VA side (VPP) or map to a CPU OpenVINO context (through DMA)")
        surface = surface_of(f)
        self._whole(surface, f.tensors)
        surface.sync()
        rc = va_remote_context(surface.context, out)
        y, uv = rc.create_tensor_nv12(surface.height, surface.width, surface.surface_id)
        planes = [OpenVINOTensor(y, context=out, parent=f[0], writable=mode.writes),
                  OpenVINOTensor(uv, context=out, parent=f[1], writable=mode.writes)]
        return f.derive(planes, context=out)

    @staticmethod
    def _whole(surface: Any, tensors: list[Tensor]) -> None:
        if any(getattr(t, "x", 0) or getattr(t, "y", 0) for t in tensors) or \
                tensors[0].info.shape[:2] != (surface.height, surface.width) and getattr(tensors[0], "plane_index", 0) == 0:
            raise InvalidTensorError("OpenVINO's VA remote tensors cover whole surfaces: crop inside the model "
                                     "(PrePostProcessor crop/resize) instead of cropping the VA frame")
