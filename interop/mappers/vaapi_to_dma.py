"""VAAPI -> DMA: vaSyncSurface, then vaExportSurfaceHandle(DRM PRIME 2). Zero-copy.

Each plane becomes a DMATensor over its own object's fd (a dup the DMA frame owns; the exported fds are closed
here), at that plane's own offset and with that plane's own pitch, carrying the object's 64-bit DRM modifier and
the frame's DRM fourcc. Composed layers are asked for first, separate layers where the driver refuses them. A
region (crop) of a VA frame becomes the same offsets moved by ``y * pitch + x * element size``.
Export flags follow the access mode (READ -> READ_ONLY, WRITE -> WRITE_ONLY, READ_WRITE -> READ_WRITE).
"""

from __future__ import annotations

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo, plane_infos
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..types import AccessMode, MemoryType


def export_planes(f: Frame | Tensor, mode: AccessMode) -> list[Tensor]:
    """DMATensors for the VA planes of ``f`` (a frame, or one plane tensor), each with its own offset and pitch."""
    from ..native import libva
    from ..tensors.dma import DMATensor, drm_fourcc_of
    from ..tensors.vaapi import VATensor, surface_of

    surface = surface_of(f)
    tensors = f.tensors if isinstance(f, Frame) else [f]
    d = surface.display
    surface.sync()  # the decoder may still be writing it; DL Streamer exported without waiting
    access = {AccessMode.READ: libva.VA_EXPORT_SURFACE_READ_ONLY, AccessMode.WRITE: libva.VA_EXPORT_SURFACE_WRITE_ONLY,
              AccessMode.READ_WRITE: libva.VA_EXPORT_SURFACE_READ_WRITE}[mode]
    try:
        desc = d.export_prime2(surface.surface_id, access | libva.VA_EXPORT_SURFACE_COMPOSED_LAYERS)
    except libva.VAError:
        desc = d.export_prime2(surface.surface_id, access | libva.VA_EXPORT_SURFACE_SEPARATE_LAYERS)
    try:
        planes = desc.planes
        if len(planes) != len(plane_infos(surface.format, surface.width, surface.height)):
            raise InvalidTensorError(f"the driver exported {len(planes)} planes for a {surface.format.name} surface")
        pitches = [p.pitch for p in planes]
        full = plane_infos(surface.format, surface.width, surface.height, pitches)
        code = drm_fourcc_of(surface.format)
        out: list[Tensor] = []
        for t in tensors:
            assert isinstance(t, VATensor)
            p = planes[t.plane_index]
            obj = desc.objects[p.object_index]
            info = TensorInfo(t.info.shape, t.info.dtype, full[t.plane_index].strides)
            out.append(DMATensor.from_fd(obj.fd, info=info, offset=p.offset + t.origin_bytes(p.pitch),
                                         size=obj.size or None, drm_fourcc=code, drm_modifier=obj.modifier, parent=t))
        return out
    finally:
        desc.close()


@register
class VAAPIToDMA(MemoryMapper):
    src = MemoryType.VAAPI
    dst = MemoryType.DMA
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return export_planes(t, mode)[0]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        from ..tensors.vaapi import check_planes

        check_planes(f)
        planes = export_planes(f, mode)
        return f.derive(planes, context=planes[0].context)
