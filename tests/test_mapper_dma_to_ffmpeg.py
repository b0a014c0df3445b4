"""DMA -> FFMPEG: an av.VideoFrame over the mapping of the DMA planes (zero-copy, pitch kept)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType, copy_meter
from interop.tensors.dma import FramePool
from tests.support.requirements import need_module

need_module("av")


@pytest.mark.parametrize("fmt,avname", [(FrameFormat.I420, "yuv420p"), (FrameFormat.NV12, "nv12")])
def test_video_frame_planes_are_the_mapping(fmt, avname):
    pool = FramePool(fmt, 854, 480, 1)
    f = pool.acquire()
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        for i, t in enumerate(c):
            np.asarray(t)[:] = 40 + i
    with copy_meter() as cm:
        ff = interop.map(f, MemoryType.FFMPEG)
    assert cm.copies == 0
    vf = ff.native
    assert vf.format.name == avname and (vf.width, vf.height) == (854, 480)
    m = f[0].buffer.mapping(True)
    for plane, src, t in zip(vf.planes, f, ff):
        assert plane.buffer_ptr == m.address + src.offset  # pointer identity with our mmap
        assert plane.line_size == src.pitch
        assert t.data_ptr == plane.buffer_ptr
    assert not ff[0].writable  # READ: the user's FFmpeg view is read-only
    # write-through: a write into the DMA buffer is seen by the VideoFrame
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[0, 0] = 222
    assert vf.to_ndarray()[0, 0] == 222 if fmt is FrameFormat.I420 else bytes(vf.planes[0])[0] == 222
    ff.release()
    assert pool.free_count == 0
    f.release()
    assert pool.free_count == 0  # the VideoFrame still reads the buffer: it stays out of the pool...
    del vf, plane, t, ff  # the VideoFrame and everything holding it
    gc.collect()
    assert pool.free_count == 1  # ...until the last view of it is gone


def test_write_mapping_writes_reach_the_dma_buffer():
    pool = FramePool(FrameFormat.GRAY8, 64, 32, 1)
    f = pool.acquire()
    ff = interop.map(f, MemoryType.FFMPEG, mode=AccessMode.WRITE)
    assert ff[0].writable
    np.asarray(ff[0])[:] = 17
    ff.release()
    with interop.map(f, MemoryType.CPU) as c:
        assert np.all(np.asarray(c[0]) == 17)
    f.release()
