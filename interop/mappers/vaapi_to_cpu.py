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

from ..context import CPU_CONTEXT
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.vaapi import check_planes, map_to_host
from ..types import AccessMode, MemoryType


@register
class VAAPIToCPU(MemoryMapper):
    src = MemoryType.VAAPI
    dst = MemoryType.CPU
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return map_to_host(t, mode)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        check_planes(f)
        planes = map_to_host(f, mode)
        return f.derive(planes, context=CPU_CONTEXT)
