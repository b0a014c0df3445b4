"""WRITE mappings that copy write back at release; WRITE into read-only memory is refused, never silently lost."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, InvalidTensorError, MemoryType


def test_cpu_to_dma_copy_writes_back_and_read_copies_are_read_only():
    a = np.zeros((4, 8), np.uint8)[:, ::2]  # not a DMA mapping, not contiguous: a counted copy
    with interop.copy_meter() as m:
        d = interop.map(a, MemoryType.DMA, mode=AccessMode.WRITE, allow_copy=True)
        with interop.map(d, MemoryType.CPU, mode=AccessMode.WRITE) as c:
            np.asarray(c)[...] = 9
        d.release()
    assert np.all(a == 9)
    assert m.copies == 2 and m.bytes == 2 * a.nbytes  # the copy in and the write-back
    r = interop.map(a, MemoryType.DMA, allow_copy=True)
    assert not r.writable


def test_cpu_to_dma_refuses_write_into_read_only_memory():
    a = np.zeros((4, 4), np.uint8)
    a.flags.writeable = False
    with pytest.raises(InvalidTensorError, match="read-only"):
        interop.map(a, MemoryType.DMA, mode=AccessMode.WRITE, allow_copy=True)


def test_cpu_to_openvino_copy_writes_back_and_read_copy_is_read_only():
    b = np.zeros((4, 8), np.float32)
    v = b[:, ::2]  # column-strided: OpenVINO cannot share it, so a counted copy
    with interop.copy_meter() as m:
        o = interop.map(v, MemoryType.OPENVINO, mode=AccessMode.WRITE, allow_copy=True)
        o.native.data[...] = 7
        o.release()
    assert np.all(v == 7) and np.all(b[:, 1::2] == 0)
    assert m.copies == 2 and m.bytes == 2 * v.nbytes
    r = interop.map(v, MemoryType.OPENVINO, allow_copy=True)
    assert not r.writable


def test_cpu_to_ffmpeg_copy_writes_back():
    b = np.zeros((8, 16, 3), np.uint8)
    v = b[:, ::2]  # rows of non-contiguous pixels: FFmpeg needs a copy
    with interop.copy_meter() as m:
        f = interop.map(interop.wrap(v, format=interop.FrameFormat.RGB), MemoryType.FFMPEG,
                        mode=AccessMode.WRITE, allow_copy=True)
        with interop.map(f, MemoryType.CPU, mode=AccessMode.READ_WRITE) as c:
            np.asarray(c[0])[...] = 5
        f.release()
    assert np.all(v == 5) and np.all(b[:, 1::2] == 0)
    assert m.copies == 2 and m.bytes == 2 * v.nbytes
