"""VAAPI -> CPU: vaSyncSurface, vaDeriveImage, vaMapBuffer: numpy views of the surface's own memory. Zero-copy.

Each plane is a view at the image's offset for that plane with the image's pitch (a crop moves it by
``y * pitch + x * element size``). READ gives read-only views; WRITE/READ_WRITE writeable ones, written straight
into the surface. The image is unmapped and destroyed when every plane of the mapping is released (end of
``with``, ``release()``, or GC), or before the surface is destroyed, whichever comes first: drivers that detile
into a shadow copy write it back at vaUnmapBuffer, so release a WRITE mapping before handing the surface on.
Numpy views kept past release keep the surface alive (it is destroyed when the last view is gone) and still
point into its memory; on a driver whose derived mapping is a shadow copy they no longer see the surface.
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
from ..tensors.cpu import CPUTensor, view_bytes
from ..types import AccessMode, MemoryType


class ImageMapping:
    """A derived, mapped VAImage of one surface. ``close()`` unmaps and destroys it once."""

    def __init__(self, surface: Any, users: int):
        d = surface.display
        self.surface = surface  # the surface outlives its image, and the numpy views of it
        surface.use()
        weakref.finalize(self, surface.unuse)
        self._lock = threading.Lock()
        self._users = users
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

    def drop(self) -> None:
        """One plane tensor let go; the last one closes the mapping."""
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.close()

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
        iface = {"version": 3, "shape": (self.image.data_size,), "typestr": "|u1",
                 "data": (self.address, not writable), "strides": None}
        return np.asarray(_ArrayExport(iface, self))


def map_planes(f: Frame | Tensor, mode: AccessMode) -> list[Tensor]:
    from ..tensors.vaapi import VATensor, surface_of

    surface = surface_of(f)
    tensors = f.tensors if isinstance(f, Frame) else [f]
    m = ImageMapping(surface, len(tensors))
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
            c = CPUTensor(arr, context=CPU_CONTEXT, parent=t, writable=mode.writes)
            c.on_release(m.drop)
            out.append(c)
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
