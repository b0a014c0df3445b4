"""CPU -> OPENVINO: ov.Tensor(shared_memory=True) over host memory; padded rows exposed at full pitch."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests.support.requirements import need_module

ov = need_module("openvino")

from interop.mappers.cpu_to_openvino import CPUToOpenVINO  # noqa: E402
from interop.tensors.cpu import CPUTensor  # noqa: E402
from interop.tensors.openvino import OpenVINOTensor  # noqa: E402


def test_route_is_one_step_that_may_copy() -> None:
    chain = interop.route(MemoryType.CPU, MemoryType.OPENVINO)
    assert not chain.zero_copy and chain.may_copy and [type(m) for m in chain.mappers] == [CPUToOpenVINO]


def test_contiguous_array_is_shared_both_ways() -> None:
    arr = np.zeros((3, 5, 7), np.float32)
    with interop.copy_meter() as m:
        t = interop.map(arr, MemoryType.OPENVINO)
    assert m.copies == 0
    assert isinstance(t, OpenVINOTensor) and tuple(t.native.shape) == (3, 5, 7)
    assert t.native.data.ctypes.data == arr.ctypes.data
    arr[2, 4, 6] = 1.5
    assert t.native.data[2, 4, 6] == 1.5
    t.native.data[0, 0, 0] = -2
    assert arr[0, 0, 0] == -2


def test_padded_rows_are_exposed_at_full_pitch() -> None:
    base = np.zeros((480, 896), np.uint8)
    view = base[:, :854]
    t = interop.map(view, MemoryType.OPENVINO)
    assert tuple(t.native.shape) == (480, 896) and t.native.data.ctypes.data == base.ctypes.data
    base[479, 853] = 9
    assert t.native.data[479, 853] == 9
    rgb = np.zeros((10, 16, 3), np.uint8)[2:8, 1:12]  # a region: pitch 48 bytes = 16 pixels
    r = interop.map(rgb, MemoryType.OPENVINO)
    assert tuple(r.native.shape) == (6, 16, 3) and r.native.data.ctypes.data == rgb.ctypes.data


def test_padding_outside_the_buffer_needs_a_counted_copy() -> None:
    flat = np.zeros(479 * 896 + 854, np.uint8)  # the last row stops at its last pixel
    view = np.lib.stride_tricks.as_strided(flat, (480, 854), (896, 1))
    with pytest.raises(interop.CopyRequiredError) as e:
        interop.map(view, MemoryType.OPENVINO)
    assert e.value.step is CPUToOpenVINO
    with interop.copy_meter() as m:
        t = interop.map(view, MemoryType.OPENVINO, allow_copy=True)
    assert m.copies == 1 and m.bytes == 480 * 854 and tuple(t.native.shape) == (480, 854)


def test_column_strided_arrays_need_a_copy() -> None:
    arr = np.zeros((8, 8), np.uint16)[:, ::2]
    with pytest.raises(interop.CopyRequiredError):
        interop.map(arr, MemoryType.OPENVINO)
    with interop.copy_meter() as m:
        interop.map(arr, MemoryType.OPENVINO, allow_copy=True)
    assert m.bytes == 8 * 4 * 2


def test_read_only_memory_goes_through_a_private_alias_for_read() -> None:
    arr = np.arange(16, dtype=np.uint8).reshape(4, 4)
    arr.flags.writeable = False
    t = interop.map(arr, MemoryType.OPENVINO)
    assert t.native.data.ctypes.data == arr.ctypes.data and not t.writable
    assert not np.asarray(t).flags.writeable
    with pytest.raises(interop.InvalidTensorError, match="read-only"):
        interop.map(arr, MemoryType.OPENVINO, mode=AccessMode.WRITE)


def test_frames_get_planes_shaped_like_ffmpegs() -> None:
    y = np.zeros((48, 80), np.uint8)[:, :70]
    uv = np.zeros((24, 40, 2), np.uint8)[:, :35]
    f = interop.Frame([CPUTensor(y), CPUTensor(uv)], FrameFormat.NV12, 70, 48)
    o = interop.map(f, MemoryType.OPENVINO)
    assert o.format is FrameFormat.NV12 and (o.width, o.height) == (70, 48)
    assert tuple(o[0].native.shape) == (1, 48, 80, 1) and tuple(o[1].native.shape) == (1, 24, 40, 2)
    assert o[0].native.data.ctypes.data == y.ctypes.data and o[1].native.data.ctypes.data == uv.ctypes.data


def test_decoded_frame_through_cpu_stays_zero_copy() -> None:
    av = need_module("av")
    vf = av.VideoFrame(854, 480, "yuv420p")
    vf.pict_type = 1  # a decoder's frame (an I frame): FFmpeg's buffers hold every padded row
    c = interop.map(vf, MemoryType.CPU)
    with interop.copy_meter() as m:
        o = interop.map(c, MemoryType.OPENVINO)
    assert m.copies == 0
    assert [t.native.data.ctypes.data for t in o.tensors] == [p.buffer_ptr for p in vf.planes]
    assert not np.asarray(o[0]).flags.writeable


def test_one_row_planes_are_shared_as_they_are() -> None:
    """A 2x2 crop of an I420 frame has one-row U/V planes whose pitch is wider than the row."""
    f = interop.wrap(np.arange(12 * 18, dtype=np.uint8).reshape(12, 18), format=FrameFormat.I420)
    crop = f.crop(0, 0, 2, 2)
    o = interop.map(crop, MemoryType.OPENVINO)
    assert tuple(o[1].native.shape) == (1, 1, 1, 1) and tuple(o[0].native.shape) == (1, 2, 18, 1)
    assert [t.native.data.ctypes.data for t in o.tensors] == [t.data_ptr for t in crop.tensors]
    row = np.zeros((4, 10, 3), np.uint8)[1:2, :7]
    t = interop.map(row, MemoryType.OPENVINO)
    assert tuple(t.native.shape) == (1, 7, 3) and t.native.data.ctypes.data == row.ctypes.data
