"""DMA -> VAAPI: import a DMA frame as a VA surface with DRM PRIME 2 (vaCreateSurfaces). Zero-copy.

Every plane is described by its own fd's object, its own offset and its own pitch (DL Streamer passed tensor 0's
offset for every plane and no modifier); planes in the same buffer (same inode) share one object; the object's
64-bit DRM modifier is passed whole. A driver without PRIME 2 import gets the legacy DRM PRIME import
(``VASurfaceAttribExternalBuffers``) when the frame is one linear buffer. The driver takes its own reference to the memory; the VA frame also keeps
the DMA frame alive and destroys its surface at release. The output context is the mapper's, else
``Context.default(MemoryType.VAAPI)``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import InvalidTensorError, UnsupportedTypeError
from ..frame import Frame
from ..info import plane_infos
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.dma import DMATensor, drm_fourcc_of
from ..tensors.vaapi import VAContext, VASurface, va_fourcc_of, va_frame
from ..types import AccessMode, MemoryType

if TYPE_CHECKING:
    from ..native.libva import PrimeDescriptor


def prime_descriptor(f: Frame) -> PrimeDescriptor:
    """The DRM PRIME 2 descriptor of a DMA frame (fds are the planes' own; nothing is dup'ed)."""
    from ..native import libva

    want = plane_infos(f.format, f.width, f.height)
    objects: list[libva.PrimeObject] = []
    keys: list[tuple[int, int]] = []
    planes = []
    for i, (t, w) in enumerate(zip(f.tensors, want)):
        assert isinstance(t, DMATensor)  # the mapper took DMATensors only
        info = t.info
        if info.shape != w.shape or info.dtype != w.dtype or info.strides[1:] != w.strides[1:]:
            raise InvalidTensorError(
                f"plane {i} of the {f.width}x{f.height} {f.format.name} frame is {info} but VA needs shape {w.shape} "
                f"{w.dtype} with rows of packed elements (strides (pitch,) + {w.strides[1:]})")
        st = os.fstat(t.fd)
        key = (st.st_dev, st.st_ino)
        if key in keys:
            k = keys.index(key)
            if objects[k].modifier != t.drm_modifier:
                raise InvalidTensorError(f"planes of one buffer carry different DRM modifiers "
                                         f"({objects[k].modifier:#x} and {t.drm_modifier:#x})")
        else:
            if len(objects) == 4:
                raise InvalidTensorError("a VA surface takes at most 4 buffers")
            keys.append(key)
            objects.append(libva.PrimeObject(t.fd, t.size, t.drm_modifier))
            k = len(objects) - 1
        planes.append(libva.PrimePlane(k, t.offset, t.pitch))
    layer = libva.PrimeLayer(drm_fourcc_of(f.format), tuple(planes))
    return libva.PrimeDescriptor(va_fourcc_of(f.format), f.width, f.height, objects, [layer])


def _legacy_ok(desc: PrimeDescriptor) -> bool:
    from ..native import libva

    return len(desc.objects) == 1 and desc.objects[0].modifier in (libva.DRM_FORMAT_MOD_LINEAR, libva.DRM_FORMAT_MOD_INVALID)


@register
class DMAToVAAPI(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.VAAPI
    zero_copy = True
    inputs = (DMATensor,)
    output_contexts = (VAContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        raise UnsupportedTypeError("VA surfaces are frames: wrap the DMA planes in a Frame (interop.tensors.dma.dma_frame) "
                                   "with its format and size, then map the frame")

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        from ..native import libva

        ctx = self.out_context()
        writable = all(t.writable for t in f.tensors)
        desc = prime_descriptor(f)
        try:
            sid = ctx.display.import_prime2(desc)
        except libva.VAError as e:
            no_prime2 = (libva.VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE, libva.VA_STATUS_ERROR_ATTR_NOT_SUPPORTED,
                         libva.VA_STATUS_ERROR_UNIMPLEMENTED)
            if e.status not in no_prime2 or not _legacy_ok(desc):
                raise
            # older drivers import only legacy DRM PRIME: one buffer, no modifier (so linear memory only)
            sid = ctx.display.import_external(desc.fourcc, desc.width, desc.height, desc.objects[0].fd,
                                              [p.pitch for p in desc.planes], [p.offset for p in desc.planes],
                                              desc.objects[0].size)
        surface = VASurface(ctx, sid, f.format, f.width, f.height, keep=f)
        return va_frame(surface, parent=f, base=f, writable=writable)
