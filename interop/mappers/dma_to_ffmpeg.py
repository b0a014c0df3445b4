"""DMA -> FFMPEG: an av.VideoFrame over the CPU mapping of the DMA planes (zero-copy; each plane keeps its pitch).

The frame is built by ``interop.tensors.ffmpeg.video_frame_from_planes`` over the mmap'ed planes and wrapped with
``wrap_video_frame``; DMA_BUF_IOCTL_SYNC brackets the access (END at release of the FFmpeg frame). READ mappings
are read-only FFmpeg planes; encoders and filters that only read can take them.
"""

from __future__ import annotations

import numpy as np

from ..frame import Frame
from ..mapper import MemoryMapper, register
from ..tensors._dma_host import map_dma_to_host
from ..types import AccessMode, MemoryType


@register
class DMAToFFmpeg(MemoryMapper):
    src = MemoryType.DMA
    dst = MemoryType.FFMPEG
    zero_copy = True

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        from ..tensors.ffmpeg import video_frame_from_planes, wrap_video_frame

        # PyAV takes planes through DLPack, which wants writeable memory; the user's view stays read-only for READ
        host = [map_dma_to_host(t, mode, writable_alias=True) for t in f.tensors]
        try:
            vf = video_frame_from_planes([np.asarray(h.numpy()) for h in host], f.format, f.width, f.height)
        except BaseException:
            for h in host:
                h.release()
            raise
        vf.pts = f.pts
        if f.time_base is not None:
            vf.time_base = f.time_base
        out = wrap_video_frame(vf, writable=mode.writes, parent=f)
        for t, h in zip(out.tensors, host):
            t.on_release(h.release)  # DMA_BUF_SYNC_END when the FFmpeg view ends
        out.metadata.update(f.metadata)
        return out
