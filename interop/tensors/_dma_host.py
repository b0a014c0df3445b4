"""The CPU view of a DMA tensor: mmap of its buffer bracketed by DMA_BUF_IOCTL_SYNC. Shared by every mapper that
reaches DMA memory through the host mapping (DMA -> CPU, FFMPEG, OPENCL on the CPU device, OPENVINO on the CPU),
so it lives with the DMA tensor type, not in one of those mappers."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..errors import InvalidTensorError, WrongMemoryError
from ..native import dmabuf as nd
from ..tensor import Tensor, _ArrayExport
from ..types import AccessMode
from ._fastpath import MappedView
from .cpu import CPUTensor
from .dma import BufferLease, DMABuffer, DMATensor


def host_reachable(t: Tensor) -> Tensor:
    """``t`` when the CPU may map its buffer; WrongMemoryError for a device-local allocation's dma-buf export
    (usm_to_dma marks it): that memory may not be CPU-mappable on a discrete GPU, so the CPU reaches device memory
    only by a counted copy (usm_to_cpu), never through an mmap that may not work on hardware."""
    if getattr(t.native, "device_local", False):
        raise WrongMemoryError("this DMA buffer is a device-local allocation's export: the CPU reaches device memory "
                               "by a counted copy (map the USM tensor to CPU with allow_copy=True), not through its "
                               "dma-buf")
    return t


def map_dma_to_host(t: Tensor, mode: AccessMode, *, writable_alias: bool = False) -> CPUTensor:
    """The CPU view of a DMATensor (MAP_SHARED; READ maps PROT_READ and gives a read-only view).

    ``writable_alias``: a framework that needs a writeable pointer but only reads (OpenVINO inputs) gets a
    writeable view over the read-write mapping even for READ, when the fd allows it. The sync END runs at release
    of the CPU tensor. Tiled (non-linear DRM modifier) buffers are refused: the CPU would see tiles, not rows.
    """
    host_reachable(t)
    lease = getattr(t, "_lease", None)
    if lease is not None:  # only DMATensors carry a lease
        t = cast(DMATensor, t)
        buf = t._buffer
        if buf.syncable is False and not t._released and not buf._closed and t._drm_modifier in _LINEAR:
            # A received or pool frame's plane over a buffer with nothing to synchronise (a memfd): the view holds
            # the frame's lease, which ends the frame's use of the buffer (and sends a received frame's DONE) when
            # the last plane and view are gone. No use count, no finaliser, no ioctl per view; the mapping and the plane's interface
            # are the buffer's, made once.
            write = mode.writes
            rw = write or (writable_alias and buf.fd_writable)
            key = (t._offset, t._info, rw)
            got = buf.host_views.get(key)
            if got is None:
                m = buf.mapping(rw)
                info = t._info
                iface = {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
                         "data": (m.address + t._offset, not rw), "strides": info.strides}
                got = buf.host_views[key] = (m, iface)
            m, iface = got
            # a dict of its own per view: numpy's base exposes it, and a change to it must not reach the next frame
            arr = np.asarray(_LeasedExport(iface.copy(), m, lease))
            return MappedView.of(arr, t._info, t, rw if writable_alias else write, m.address + t._offset)
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
    # the view holds the mapping (munmap when the last view is gone) and a received frame's lease (its DONE waits)
    arr = np.asarray(_ArrayExport(iface, m) if lease is None else _LeasedExport(iface, m, lease))
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


class _LeasedExport:
    """numpy's ``base`` of a received frame's CPU view: the interface, the mapping and the frame's lease."""

    __slots__ = ("__array_interface__", "owner", "lease")

    def __init__(self, iface: dict[str, Any], owner: object, lease: BufferLease):
        self.__array_interface__ = iface
        self.owner = owner
        self.lease = lease


_LINEAR = (nd.DRM_FORMAT_MOD_LINEAR, nd.DRM_FORMAT_MOD_INVALID)


def _sync_end(buf: DMABuffer, write: bool, read: bool) -> Callable[[], None]:
    def end() -> None:
        try:
            fd = buf.fd
        except InvalidTensorError:  # closed: its fd is gone, and with it anything to synchronise
            return
        nd.dma_buf_sync(fd, False, write, read)
    return end
