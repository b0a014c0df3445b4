"""GST -> DMA: the planes of a buffer whose memory is ``GstFdMemory``/``GstDmaBufMemory`` as DMA tensors. Zero-copy.

Each memory's fd is dup'd once (the DMA frame owns its dups); a plane's offset into the fd is the memory's own
offset (a GstMemory may be a region of its fd) plus the plane's offset in that memory, and its pitch is kept. The
DMA planes hold the GST planes (``parent``), so GStreamer's memory outlives them. System memory has no fd:
``WrongMemoryError``, and routing goes on elsewhere (GST -> CPU). WRITE of a shared buffer is refused as in
GST -> CPU (NotWritableError): the fd reaches the same pages others read.
"""

from __future__ import annotations

from ..errors import InvalidTensorError, WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..native import gst as ng
from ..tensor import Tensor
from ..tensors.dma import DMABuffer, DMATensor, buffer_from_fd, drm_fourcc_of
from ..tensors.gst import GstTensor, NotWritableError
from ..types import AccessMode, MemoryType


@register
class GstToDMA(MemoryMapper):
    src = MemoryType.GST
    dst = MemoryType.DMA
    zero_copy = True
    # a read-only tensor is refused for WRITE by the base class; shared buffers get NotWritableError here

    # fd memory comes from GStreamer's own producers (or dma_to_gst, whose input is DMA already); the mapper that
    # makes GST memory from anything else (cpu_to_gst) makes system memory: never a step after another mapper
    first_only = True

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        # the router asks per input: system memory has no fd, so GST -> DMA -> X is not a route for it (GST -> CPU
        # is); refusing it here keeps map() from trying this chain first and falling back on every frame
        if obj is None:  # an input of unknown kind: the worst case is system memory, which this edge cannot take
            raise WrongMemoryError(f"{self.name} takes fd-backed GstMemory only (GstFdMemory, GstDmaBufMemory); an "
                                   f"input of unknown kind may be system memory")
        for t in (obj.tensors if isinstance(obj, Frame) else [obj]):
            if isinstance(t, GstTensor) and ng.fd_of_memory(t.memory_ptr) is None:
                raise WrongMemoryError(f"{self.name}: this GstMemory has no fd (it is not GstFdMemory or "
                                       f"GstDmaBufMemory); map it to CPU instead")
        return Cost.ZERO_COPY

    def _planes(self, tensors: list[Tensor], mode: AccessMode, code: int) -> list[Tensor]:
        if not all(isinstance(t, GstTensor) for t in tensors):
            raise InvalidTensorError(f"{self.name} maps GstTensors, not {type(tensors[0]).__name__}")
        if mode.writes and not all(t.writable_now() for t in tensors if isinstance(t, GstTensor)):
            raise NotWritableError(
                f"{self.name}: this GStreamer buffer is shared, so writing through its fd would change what others "
                f"read; map it for READ, or write into a buffer you own", step=type(self), src=self.src, dst=self.dst)
        bufs: dict[int, tuple[DMABuffer, int]] = {}
        out: list[Tensor] = []
        try:
            for t in tensors:
                assert isinstance(t, GstTensor)
                mem = t.memory_ptr
                if mem not in bufs:
                    fd = ng.fd_of_memory(mem)
                    if fd is None:
                        raise WrongMemoryError(f"{self.name}: this GstMemory has no fd (it is not GstFdMemory or "
                                               f"GstDmaBufMemory); map it to CPU instead")
                    offset = ng.memory_sizes(mem)[1]
                    bufs[mem] = (buffer_from_fd(fd), offset)
                b, base = bufs[mem]
                out.append(DMATensor(b, t.info, offset=base + t.offset, drm_fourcc=code, parent=t,
                                     writable=mode.writes))
        except BaseException:
            for b, _ in bufs.values():
                if b.users == 0:
                    b.close()
            raise
        return out

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = self._planes(f.tensors, mode, drm_fourcc_of(f.format))
        return f.derive(planes, context=planes[0].context)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self._planes([t], mode, 0)[0]
