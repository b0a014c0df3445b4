"""DMA -> CPU: mmap the buffer (MAP_SHARED) and bracket the access with DMA_BUF_IOCTL_SYNC start/end. Zero-copy.

READ maps the buffer read-only (PROT_READ) and gives a read-only numpy view; WRITE/READ_WRITE map it read-write.
The sync END runs at release of the CPU tensor (end of ``with``, ``release()`` or GC). On a memfd the ioctl
answers ENOTTY: not a dma-buf, nothing to synchronise. Tiled (non-linear DRM modifier) buffers are refused:
the CPU would see tiles, not rows.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..native import dmabuf as nd
from ..tensor import Tensor, _ArrayExport
from ..tensors._fastpath import MappedView, derive_frame
from ..tensors.cpu import CPUTensor
from ..tensors.dma import DMABuffer, DMATensor
from ..types import AccessMode, MemoryType


def map_dma_to_host(t: Tensor, mode: AccessMode, *, writable_alias: bool = False) -> CPUTensor:
    """The CPU view of a DMATensor (shared by the mappers that go through the host mapping).

    ``writable_alias``: a framework that needs a writeable pointer but only reads (OpenVINO inputs) gets a
    writeable view over the read-write mapping even for READ, when the fd allows it.
    """
    if not isinstance(t, DMATensor):
        raise InvalidTensorError(f"expected a DMA tensor, got {type(t).__name__}")
    if t.drm_modifier not in (nd.DRM_FORMAT_MOD_LINEAR, nd.DRM_FORMAT_MOD_INVALID):
        raise InvalidTensorError(
            f"DRM modifier {t.drm_modifier:#018x} is a tiled layout the CPU cannot read as rows: map the frame through "
            f"its device (VA-API, OpenCL import) or ask the producer for DRM_FORMAT_MOD_LINEAR")
    buf = t.buffer
    write = mode.writes
    rw = write or (writable_alias and buf.fd_writable)
    m = buf.mapping(rw)
    info = t.info
    # the first access tells whether the fd takes DMA_BUF_IOCTL_SYNC (ENOTTY: a memfd, nothing to sync)
    fd_synced = buf.syncable is not False and nd.dma_buf_sync(buf.fd, True, write, mode.reads or not write)
    buf.syncable = fd_synced
    addr = m.address + t.offset
    iface = {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (addr, not rw), "strides": info.strides}
    arr = np.asarray(_ArrayExport(iface, m))  # the view holds the mapping; munmap when the last view is gone
    # the layout was checked when the DMA tensor was made: build the CPU tensor without re-validating it
    out = MappedView.of(arr, info, t, rw if writable_alias else write, addr)
    # A mapping is a user of the buffer: a pool buffer is not reused (nor a received one returned) while mapped.
    # The use ends when the array over the mapping is gone, not at release(): numpy views taken from the tensor
    # keep that array alive, and they must go on reading this frame, not the next one the pool hands out.
    buf.use()
    # Not at interpreter exit: handing the buffer back to its pool then would let a thread waiting in acquire()
    # reuse it while a daemon thread still reads this view.
    weakref.finalize(arr, buf.unuse).atexit = False
    if fd_synced:
        # the end-of-access ioctl needs an fd; dup'ing per mapping would cost a syscall, so keep the buffer
        out.on_release(_sync_end(buf, write, mode.reads or not write))
    return out


def _sync_end(buf: DMABuffer, write: bool, read: bool) -> Callable[[], None]:
    def end() -> None:
        try:
            fd = buf.fd
        except InvalidTensorError:  # closed: its fd is gone, and with it anything to synchronise
            return
        nd.dma_buf_sync(fd, False, write, read)
    return end


@register
class DMAToCPU(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.CPU
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return map_dma_to_host(t, mode)

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        return derive_frame(f, [map_dma_to_host(t, mode) for t in f.tensors], CPU_CONTEXT)
