"""VAAPI -> CPU: vaSyncSurface, vaDeriveImage, vaMapBuffer: numpy views of the surface's own memory. Zero-copy.

Each plane is a view at the image's offset for that plane with the image's pitch (a crop moves it by
``y * pitch + x * element size``). READ gives read-only views; WRITE/READ_WRITE writeable ones, written straight
into the surface. The image is unmapped and destroyed when the mapped memory is no longer used: every plane of the
mapping released (end of ``with``, ``release()``, or GC) and every numpy view taken from them gone; or before the
surface is destroyed, whichever comes first. Drivers that detile into a shadow copy write it back at
vaUnmapBuffer, so release a WRITE mapping and drop its views before handing the surface on. Numpy views kept past
release keep the mapping and the surface alive (both go when the last view is gone).
Drivers that cannot derive an image of a surface (some tiled or compressed layouts) make this mapper fail with
a VAError; map the frame to DMA instead, or to CPU with a route that copies.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, plane_infos
from ..mapper import MemoryMapper, register
from ..tensor import Tensor, _ArrayExport
from ..tensors._fastpath import MappedView
from ..tensors.cpu import view_bytes
from ..types import AccessMode, MemoryType


class ImageMapping:
    """A derived, mapped VAImage of one surface. ``close()`` unmaps and destroys it once: when the array over the
    mapping (``base()``, which every plane view holds) is gone, or before the surface is destroyed."""

    def __init__(self, surface: Any):
        d = surface.display
        self.surface = surface  # the surface outlives its image, and the numpy views of it
        surface.use()
        weakref.finalize(self, surface.unuse)
        self._lock = threading.Lock()
        self._closed = False
        surface.sync()
        self.image = d.derive_image(surface.surface_id)
        try:
            if self.image.fourcc != surface.fourcc:
                raise InvalidTensorError(f"the driver derived a {self.image.fourcc:#x} image from a {surface.format.name} surface")
            self.address = d.map_buffer(self.image.buf)
        except BaseException:
            d.destroy_image(self.image.image_id)
            raise
        surface.add_closer(self.close)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        d = self.surface.display
        self.surface.remove_closer(self.close)
        if not d.closed:
            try:
                d.unmap_buffer(self.image.buf)
            finally:
                d.destroy_image(self.image.image_id)

    def base(self, writable: bool) -> np.ndarray:
        """The array over the whole mapping; the mapping is closed when it (and so every view of it) is gone."""
        iface = {"version": 3, "shape": (self.image.data_size,), "typestr": "|u1",
                 "data": (self.address, not writable), "strides": None}
        arr = np.asarray(_ArrayExport(iface, self))
        weakref.finalize(arr, self.close).atexit = False  # not at exit: libva may be torn down by then
        return arr


def map_planes(f: Frame | Tensor, mode: AccessMode) -> list[Tensor]:
    from ..tensors.vaapi import VATensor, surface_of

    surface = surface_of(f)
    tensors = f.tensors if isinstance(f, Frame) else [f]
    m = ImageMapping(surface)
    try:
        im = m.image
        if len(im.pitches) != len(plane_infos(surface.format, surface.width, surface.height)):
            raise InvalidTensorError(f"the driver derived {len(im.pitches)} planes from a {surface.format.name} surface")
        full = plane_infos(surface.format, surface.width, surface.height, list(im.pitches))
        base = m.base(mode.writes)
        out: list[Tensor] = []
        for t in tensors:
            assert isinstance(t, VATensor)
            i = t.plane_index
            info = TensorInfo(t.info.shape, t.info.dtype, full[i].strides)
            arr = view_bytes(base, im.offsets[i] + t.origin_bytes(im.pitches[i]), info, writable=mode.writes)
            # numpy views of the plane hold ``arr`` (so ``base``), not the tensor: release() drops the tensor's
            # reference, and the image is unmapped when the last plane and the last view are gone
            out.append(MappedView.of(arr, info, t, mode.writes, int(arr.__array_interface__["data"][0])))
        return out
    except BaseException:
        m.close()
        raise


@register
class VAAPIToCPU(MemoryMapper):
    src = MemoryType.VAAPI
    dst = MemoryType.CPU
    zero_copy = True
    tier = "C"

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return map_planes(t, mode)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        from ..tensors.vaapi import check_planes

        check_planes(f)
        planes = map_planes(f, mode)
        return f.derive(planes, context=CPU_CONTEXT)
