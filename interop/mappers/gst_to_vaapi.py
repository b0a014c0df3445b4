"""GST -> VAAPI: a ``memory:VAMemory`` buffer (GStreamer's va plugin, libgstva-1.0) as a VA frame over its own
surface. Zero-copy: the surface id is read back from the GstVaMemory (``gst_va_memory_get_surface``).

A surface id means something on its own VADisplay only: the output context must be the VAContext of the display
GStreamer's memory lives on (``gst_va_memory_peek_display`` -> ``gst_va_display_get_va_dpy``); another is a
ContextMismatchError. The VA frame holds the GST frame (``parent``, and the surface's ``keep``), so the buffer and
its surface outlive the mapping; interop never destroys GStreamer's surface. WRITE of a shared buffer (every
appsink buffer) is refused as in GST -> CPU: the surface is the one downstream reads. System memory has no
surface: WrongMemoryError (routing takes GST -> CPU). Tier C: tested on the fake VA driver, whose VADisplay
GStreamer wraps (``gst_va_display_wrapped_new``).
"""

from __future__ import annotations

from ..errors import ContextMismatchError, InvalidTensorError, UnsupportedTypeError, WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..native import gst as ng
from ..tensor import Tensor
from ..tensors.gst import GstTensor, NotWritableError
from ..tensors.vaapi import VAContext, VASurface, va_frame
from ..types import AccessMode, MemoryType


def _surface(f: Frame | Tensor, name: str) -> tuple[int, int]:
    """(surface id, VADisplay) of the one VA memory under every plane of ``f``."""
    planes = f.tensors if isinstance(f, Frame) else [f]
    found = set()
    for t in planes:
        if not isinstance(t, GstTensor):
            raise InvalidTensorError(f"{name} maps GstTensors, not {type(t).__name__}")
        s = ng.va_surface_of(t.memory_ptr)
        if s is None:
            raise WrongMemoryError(f"{name}: this GstMemory is not VA memory (memory:VAMemory); map it to CPU, or "
                                   f"keep the frame on the GPU with a va element (vah264dec, vapostproc) before the "
                                   f"appsink")
        found.add(s)
    if len(found) != 1:
        raise InvalidTensorError(f"{name}: the planes lie on {len(found)} VA surfaces; a VA frame is one surface")
    return found.pop()


@register
class GstToVAAPI(MemoryMapper):
    src = MemoryType.GST
    dst = MemoryType.VAAPI
    zero_copy = True
    output_contexts = (VAContext,)
    # a read-only tensor is refused for WRITE by the base class; shared buffers get NotWritableError here

    # VA memory comes from GStreamer's va elements only; the mappers that make GST memory (cpu_to_gst, dma_to_gst)
    # make system or fd memory: never a step after another mapper
    first_only = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None:  # an input of unknown kind: the worst case is system memory, which has no surface
            raise WrongMemoryError(f"{self.name} takes VA memory (memory:VAMemory) only; an input of unknown kind may "
                                   f"be system memory")
        _surface(obj, self.name)  # routing by the object: system memory is no route here
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        raise UnsupportedTypeError("a VA surface is a frame: map the Gst.Sample / GST frame, not one memory")

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        sid, dpy = _surface(f, self.name)
        if mode.writes and not all(t.writable_now() for t in f.tensors if isinstance(t, GstTensor)):
            raise NotWritableError(
                f"{self.name}: this GStreamer buffer is shared, so writing into its surface would change what others "
                f"read; map it for READ, or write into a surface you own", step=type(self), src=self.src, dst=self.dst)
        ctx = self.out_context()
        if ctx.handle != dpy:
            raise ContextMismatchError(
                f"{self.name}: the buffer's surface {sid} lives on VADisplay {dpy:#x}, not on {ctx!r}: map it with "
                f"context=VAContext(...) of the display GStreamer uses (share it through GstContext, or wrap yours "
                f"in GStreamer with gst_va_display_wrapped_new)")
        surface = VASurface(ctx, sid, f.format, f.width, f.height, own=False, keep=f)
        return va_frame(surface, parent=f, base=f, writable=mode.writes)
