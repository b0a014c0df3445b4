"""DMA -> OPENCL: a ``pyopencl.Buffer`` over the whole DMA buffer; each plane's region is its ``offset`` in it.

- A device that works in host memory (the CPU device): a USE_HOST_PTR buffer over the CPU mapping. Zero-copy:
  kernels read and write the dma-buf's pages; DMA_BUF_IOCTL_SYNC brackets the access (END at release).
- A device reporting ``cl_khr_external_memory_dma_buf``: the fd is imported (clCreateBufferWithProperties with
  CL_EXTERNAL_MEMORY_HANDLE_DMA_BUF_KHR). Zero-copy (tier C: no such device here).
- Any other device (a discrete GPU without the extension) would need a copy: refused unless ``allow_copy``, counted.
"""

from __future__ import annotations

from typing import Any

from ..frame import Frame
from ..mapper import Cost, MemoryMapper, register
from ..native.opencl_external import CL_EXTERNAL_MEMORY_HANDLE_DMA_BUF_KHR, import_fd
from ..tensor import Tensor
from ..tensors._dma_host import map_dma_to_host
from ..types import AccessMode, MemoryType


def import_dma_buf(ctx: Any, fd: int, size: int, read_only: bool) -> Any:
    """clCreateBufferWithProperties(ctx, {DMA_BUF_KHR: fd, 0}, flags, size, NULL): a cl.Buffer over the dma-buf."""
    return import_fd(ctx.native, CL_EXTERNAL_MEMORY_HANDLE_DMA_BUF_KHR, fd, size, read_only=read_only)


def _has_dmabuf_import(ctx: Any) -> bool:
    try:
        return "cl_khr_external_memory_dma_buf" in ctx.device.extensions
    except Exception:
        return False


@register
class DMAToOpenCL(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.OPENCL
    # The edge's worst case: a device with neither host memory nor dma-buf import copies, so routing must ask
    # for allow_copy; on the CPU device and with the import extension nothing is copied (and nothing counted).
    zero_copy = False
    may_copy = True

    def _context(self) -> Any:
        from ..context import Context
        from ..tensors.opencl import OpenCLContext

        ctx = self.output_context
        return ctx if isinstance(ctx, OpenCLContext) else Context.default(MemoryType.OPENCL)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        ctx = self._context()
        if ctx.host_shared:
            return Cost.ZERO_COPY
        planes = [] if obj is None else obj.tensors if isinstance(obj, Frame) else [obj]
        if planes and _has_dmabuf_import(ctx) and all(t.buffer.is_dmabuf for t in planes):  # type: ignore[attr-defined]
            return Cost.ZERO_COPY
        return Cost.COPY

    def _buffer(self, ctx: Any, t: Any, mode: AccessMode, allow_copy: bool) -> tuple[Any, list[Any]]:
        """A cl.Buffer over all of ``t``'s DMA buffer, and what must be released with the mapping."""
        from ..tensors.opencl import buffer_over_host

        buf = t.buffer
        if buf.is_dmabuf and _has_dmabuf_import(ctx):
            return import_dma_buf(ctx, buf.fd, buf.size, not mode.writes), []
        if not ctx.host_shared:  # refuse before mapping anything, so a refusal holds no buffer out of its pool
            self.copying(buf.size, allow_copy, f"{ctx!r} is not a host-memory device and does not report "
                                               f"cl_khr_external_memory_dma_buf")
        # the whole buffer mapped on the host (one plane's CPU view is enough to hold the mapping and sync)
        host = map_dma_to_host(t, mode, writable_alias=True)
        m = buf.mapping(True) if buf.fd_writable else buf.mapping(False)
        clbuf = buffer_over_host(ctx, m.address, buf.size, m, read_only=not m.writable)
        return clbuf, [host]

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self.map_planes([t], mode, allow_copy)[0]

    def map_planes(self, tensors: list[Any], mode: AccessMode, allow_copy: bool) -> list[Tensor]:
        from ..tensors.opencl import OpenCLTensor

        ctx = self._context()
        made: dict[int, tuple[Any, list[Any]]] = {}
        out: list[Tensor] = []
        for t in tensors:
            key = id(t.buffer)
            if key not in made:
                made[key] = self._buffer(ctx, t, mode, allow_copy)
            clbuf, holds = made[key]
            o = OpenCLTensor(clbuf, t.info, offset=t.offset, context=ctx, parent=t, writable=mode.writes)
            for h in holds:
                o.on_release(h.release)
            holds.clear()  # the sync END runs once, with the first plane over this buffer
            out.append(o)
        return out
