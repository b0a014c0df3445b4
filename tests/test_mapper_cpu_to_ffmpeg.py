"""CPU -> FFMPEG: an av.VideoFrame over the CPU planes (from_numpy_buffer / from_dlpack), zero-copy."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.clip import encode
from interop.tensors.cpu import CPUTensor
from tests.support.requirements import need_module

av = need_module("av")

from interop.mappers.cpu_to_ffmpeg import CPUToFFmpeg  # noqa: E402


def test_route_is_one_step_that_may_copy() -> None:
    chain = interop.route(MemoryType.CPU, MemoryType.FFMPEG)
    assert not chain.zero_copy and chain.may_copy and [type(m) for m in chain.mappers] == [CPUToFFmpeg]


def _i420(width: int, height: int, pitch: int) -> list[np.ndarray]:
    cw, ch = -(-width // 2), -(-height // 2)
    return [np.zeros((height, pitch), np.uint8)[:, :width], np.zeros((ch, pitch // 2), np.uint8)[:, :cw],
            np.zeros((ch, pitch // 2), np.uint8)[:, :cw]]


def test_padded_i420_planes_become_the_frames_planes() -> None:
    planes = _i420(854, 480, 896)
    f = interop.Frame([CPUTensor(p) for p in planes], FrameFormat.I420, 854, 480, pts=12, time_base=Fraction(1, 25))
    with interop.copy_meter() as m:
        o = interop.map(f, MemoryType.FFMPEG)
    assert m.copies == 0
    vf = o.native
    assert vf.format.name == "yuv420p" and (vf.width, vf.height) == (854, 480)
    assert [p.buffer_ptr for p in vf.planes] == [a.ctypes.data for a in planes]
    assert [p.line_size for p in vf.planes] == [896, 448, 448]
    assert vf.pts == 12 and vf.time_base == Fraction(1, 25) and o.pts == 12
    planes[0][10, 20] = 99  # written through numpy, read through FFmpeg
    assert vf.to_ndarray()[10, 20] == 99
    assert o.parent is f and not o[0].writable  # a READ mapping is read-only (issue 15 item 14)
    assert interop.map(f, MemoryType.FFMPEG, mode=interop.AccessMode.READ_WRITE)[0].writable


@pytest.mark.parametrize("fmt,shapes,dtype,name", [
    (FrameFormat.NV12, [(48, 64), (24, 32, 2)], np.uint8, "nv12"),
    (FrameFormat.P010, [(48, 64), (24, 32, 2)], np.uint16, "p010le"),
    (FrameFormat.GRAY16, [(48, 64)], np.uint16, "gray16le"),
    (FrameFormat.BGR, [(48, 64, 3)], np.uint8, "bgr24"),
    (FrameFormat.BGRA, [(48, 64, 4)], np.uint8, "bgra"),
])
def test_formats(fmt: FrameFormat, shapes: list, dtype: type, name: str) -> None:
    arrays = [np.zeros(s, dtype) for s in shapes]
    o = interop.map(interop.Frame([CPUTensor(a) for a in arrays], fmt, 64, 48), MemoryType.FFMPEG)
    assert o.native.format.name == name and o.format is fmt
    assert [p.buffer_ptr for p in o.native.planes] == [a.ctypes.data for a in arrays]


@pytest.mark.parametrize("shape,dtype,name", [((48, 64, 3), np.uint8, "rgb24"), ((48, 64), np.uint8, "gray"),
                                              ((48, 64), np.uint16, "gray16le"), ((48, 64, 4), np.uint8, "rgba")])
def test_single_arrays_become_one_plane_frames(shape: tuple, dtype: type, name: str) -> None:
    arr = np.zeros(shape, dtype)
    t = interop.map(arr, MemoryType.FFMPEG)
    assert t.memory_type is MemoryType.FFMPEG and t.video_frame.format.name == name
    assert t.native.buffer_ptr == arr.ctypes.data and t.shape == shape


def test_read_only_input_gives_read_only_ffmpeg_planes() -> None:
    decoded = interop.map(av.VideoFrame(64, 48, "yuv420p"), MemoryType.CPU)  # read-only views of "decoded" planes
    back = interop.map(decoded, MemoryType.FFMPEG)
    assert [t.data_ptr for t in back.tensors] == [t.data_ptr for t in decoded.tensors]
    assert not np.asarray(back[0]).flags.writeable
    with pytest.raises(interop.InvalidTensorError, match="read-only"):
        interop.map(decoded, MemoryType.FFMPEG, mode=AccessMode.WRITE)


def test_the_frame_can_be_encoded() -> None:
    import io

    planes = _i420(64, 48, 96)
    for p in planes:
        p[...] = 128
    frames = [interop.map(interop.Frame([CPUTensor(p) for p in planes], FrameFormat.I420, 64, 48),
                          MemoryType.FFMPEG).native for _ in range(3)]
    buf = encode(io.BytesIO(), frames, 64, 48, fps=25)
    assert len(buf.getvalue()) > 100
    buf.seek(0)
    decoded = [f.to_ndarray() for f in av.open(buf).decode(video=0)]
    assert len(decoded) == 3 and abs(int(decoded[0].mean()) - 128) <= 1  # the grey planes came through


def test_bad_inputs() -> None:
    with pytest.raises(interop.UnsupportedFormatError, match="RGBX"):
        interop.map(interop.Frame([CPUTensor(np.zeros((4, 4, 4), np.uint8))], FrameFormat.RGBX), MemoryType.FFMPEG)
    with pytest.raises(interop.InvalidTensorError, match="single CPU tensor"):
        interop.map(np.zeros((4, 4, 2), np.float32), MemoryType.FFMPEG)
    strided = np.zeros((8, 16, 3), np.uint8)[:, ::2]
    with pytest.raises(interop.CopyRequiredError):
        interop.map(strided, MemoryType.FFMPEG)
    with interop.copy_meter() as m:
        t = interop.map(strided, MemoryType.FFMPEG, allow_copy=True)
    assert m.copies == 1 and m.bytes == 8 * 8 * 3 and t.shape == (8, 8, 3)
