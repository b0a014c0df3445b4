"""CPU -> VAAPI: upload a CPU frame into a new VA surface (vaCreateSurfaces, then the surface's derived image is
written row by row). A copy, counted by the copy meter; used where frames come from software (tests, CPU decoders).
The output context is the mapper's, else ``Context.default(MemoryType.VAAPI)``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedTypeError
from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.vaapi import VAContext, VASurface, map_to_host, va_fourcc_of, va_frame
from ..types import AccessMode, MemoryType


@register
class CPUToVAAPI(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.VAAPI
    zero_copy = False
    inputs = (CPUTensor,)
    output_contexts = (VAContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        raise UnsupportedTypeError("VA surfaces are frames: map a Frame (e.g. interop.wrap(array, format=FrameFormat.NV12))")

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        va_fourcc_of(f.format)  # refuse formats VA cannot hold before allocating
        nbytes = sum(t.info.nbytes for t in f.tensors)
        self.copying(nbytes, allow_copy, f"uploading a {f.width}x{f.height} {f.format.name} frame into a VA surface")
        ctx = self.out_context()
        sid = ctx.display.create_surfaces(f.width, f.height, va_fourcc_of(f.format))[0]
        surface = VASurface(ctx, sid, f.format, f.width, f.height)
        out = va_frame(surface, base=f)
        dst = map_to_host(out, AccessMode.WRITE)
        try:
            for s, d in zip(f.tensors, dst):
                np.copyto(d.numpy(), s.numpy())
        finally:
            for d in dst:
                d.release()
        return out
