"""FFMPEG -> OPENVINO: decoded planes as ov.Tensors over the decoder's memory at full pitch, zero-copy."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests.support.ffmpeg_clips import decode
from tests.support.requirements import need_module

av = need_module("av")
ov = need_module("openvino")

from interop.mappers.ffmpeg_to_openvino import FFmpegToOpenVINO  # noqa: E402
from interop.tensors.ffmpeg import FFmpegTensor  # noqa: E402
from interop.tensors.openvino import OpenVINOTensor, get_core  # noqa: E402


def test_route_is_the_direct_step_that_may_copy() -> None:
    chain = interop.route(MemoryType.FFMPEG, MemoryType.OPENVINO)
    assert not chain.zero_copy and chain.may_copy and [type(m) for m in chain.mappers] == [FFmpegToOpenVINO]


def test_decoded_padded_planes_alias_the_decoder_buffers(clip_854) -> None:
    frames = decode(clip_854)
    with interop.copy_meter() as m:
        for vf in frames:
            o = interop.map(vf, MemoryType.OPENVINO)
            assert o.memory_type is MemoryType.OPENVINO and o.format is FrameFormat.I420
            assert (o.width, o.height) == (854, 480)  # the visible size; planes carry the full pitch
            for t, p in zip(o.tensors, vf.planes):
                assert isinstance(t, OpenVINOTensor)
                assert tuple(t.native.shape) == (1, p.height, p.line_size, 1)
                assert t.native.data.ctypes.data == p.buffer_ptr  # OpenVINO reads the decoder's memory
                assert not np.asarray(t).flags.writeable  # the user's view stays read-only
            o.release()
    assert m.copies == 0 and m.bytes == 0


@pytest.mark.parametrize("fmt,shapes", [
    ("nv12", [(1, 48, 64, 1), (1, 24, 32, 2)]),
    ("rgb24", [(1, 48, 64, 3)]),
    ("bgr0", [(1, 48, 64, 4)]),
    ("p010le", [(1, 48, 64, 1), (1, 24, 32, 2)]),
])
def test_formats_keep_channels_last(fmt: str, shapes: list) -> None:
    vf = av.VideoFrame(64, 48, fmt)
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    o = interop.map(vf, MemoryType.OPENVINO)
    for t, p, shape in zip(o.tensors, vf.planes, shapes):
        c, item = shape[3], t.dtype.itemsize
        assert tuple(t.native.shape) == (1, shape[1], p.line_size // (c * item), c)
        assert t.native.data.ctypes.data == p.buffer_ptr


def test_writes_to_the_frame_are_seen_by_openvino() -> None:
    vf = av.VideoFrame(854, 480, "yuv420p")
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    o = interop.map(vf, MemoryType.OPENVINO)
    np.frombuffer(vf.planes[1], np.uint8)[5 * vf.planes[1].line_size + 7] = 201
    assert o[1].native.data[0, 5, 7, 0] == 201


def _plane_mean_model(rows: int, pitch: int, width: int):
    from openvino import opset13 as ops

    x = ops.parameter([1, rows, pitch, 1], ov.Type.u8, name="y")
    crop = ops.slice(x, np.array([0, 0, 0, 0]), np.array([1, rows, width, 1]), np.array([1, 1, 1, 1]))
    mean = ops.reduce_mean(ops.convert(crop, ov.Type.f32), np.array([1, 2, 3]), keep_dims=False)
    return ov.Model([mean], [x], "plane_mean")


def test_openvino_infers_straight_from_the_decoded_plane(clip_854) -> None:
    vf = decode(clip_854)[5]
    o = interop.map(vf, MemoryType.OPENVINO)
    y = o[0]
    _, rows, pitch, _ = y.shape
    compiled = get_core().compile_model(_plane_mean_model(rows, pitch, 854), "CPU",
                                        {"INFERENCE_PRECISION_HINT": "f32"})
    req = compiled.create_infer_request()
    req.set_input_tensor(y.native)
    assert req.get_input_tensor().data.ctypes.data == vf.planes[0].buffer_ptr  # no copy into the request
    req.infer()
    want = vf.to_ndarray()[:480].astype(np.float64).mean()
    assert abs(float(req.get_output_tensor().data[0]) - want) < 1e-2


def test_openvino_tensors_keep_decoded_frames_alive(clip_854) -> None:
    with av.open(str(clip_854)) as cont:
        it = cont.decode(video=0)
        mapped = [interop.map(next(it), MemoryType.OPENVINO) for _ in range(3)]
        want = [f[0].native.data.copy() for f in mapped]
        list(it)
    del it
    gc.collect()
    for f, w in zip(mapped, want):
        np.testing.assert_array_equal(f[0].native.data, w)


def test_pitch_that_is_not_whole_pixels_needs_a_counted_copy() -> None:
    buf = np.zeros((4, 32), np.uint8)  # 32-byte rows: 10 RGB pixels and 2 bytes of padding
    rgb = np.lib.stride_tricks.as_strided(buf, (4, 10, 3), (32, 3, 1))
    vf = av.VideoFrame.from_numpy_buffer(rgb, format="rgb24")
    assert vf.planes[0].line_size == 32
    with pytest.raises(interop.CopyRequiredError):
        interop.map(vf, MemoryType.OPENVINO)
    with interop.copy_meter() as m:
        o = interop.map(vf, MemoryType.OPENVINO, allow_copy=True)
    assert m.copies == 1 and m.bytes == 10 * 4 * 3
    assert tuple(o[0].native.shape) == (1, 4, 10, 3)


def test_write_mode_needs_allow_copy_for_reference_frames(clip_small) -> None:
    with av.open(str(clip_small)) as cont:
        vf = next(cont.decode(video=0))
        with pytest.raises(interop.CopyRequiredError):
            interop.map(vf, MemoryType.OPENVINO, mode=AccessMode.WRITE)
        with interop.copy_meter() as m:
            o = interop.map(vf, MemoryType.OPENVINO, mode=AccessMode.WRITE, allow_copy=True)
        # a writable copy (a new VideoFrame): the decoder's frame is never modified
        assert m.copies == 1 and o[0].native.data.ctypes.data == o.parent.native.planes[0].buffer_ptr
        assert o.parent.native is not vf
        assert np.asarray(o[0]).flags.writeable


def test_hardware_frames_are_refused_naming_the_cuda_route() -> None:
    vf = av.VideoFrame(16, 16, "gray")
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    p = vf.planes[0]
    hw = FFmpegTensor(p, interop.TensorInfo((16, 16), np.uint8, (p.line_size, 1)), hardware=True)
    with pytest.raises(interop.InvalidTensorError, match="CUDA"):
        FFmpegToOpenVINO().map(hw)


def test_output_context_is_honoured() -> None:
    from interop.tensors.openvino import OpenVINOContext

    ctx = OpenVINOContext("CPU")
    o = interop.map(av.VideoFrame(16, 16, "gray"), ctx)
    assert o.context is ctx and o[0].context is ctx


@pytest.mark.parametrize("fmt", ["yuv420p", "nv12", "rgb24", "gray", "p010le", "bgr0"])
def test_the_one_step_path_gives_what_the_general_path_gives(fmt: str) -> None:
    """interop.map(vf, OPENVINO) builds the ov.Tensors straight from the av.VideoFrame (map_native); the
    general path wraps it as FFmpeg tensors first. Both must share the same memory with the same shapes."""
    from interop.tensors.ffmpeg import SourcedFrame

    vf = av.VideoFrame(70, 46, fmt)  # odd widths: padded pitches
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    fast = FFmpegToOpenVINO().map_native(vf, AccessMode.READ, False)
    slow = FFmpegToOpenVINO().map(interop.wrap(vf))
    assert isinstance(fast, SourcedFrame) and type(slow) is interop.Frame
    assert (fast.format, fast.width, fast.height, fast.context, len(fast)) == \
        (slow.format, slow.width, slow.height, slow.context, len(slow))
    for a, b, p in zip(fast, slow, vf.planes):
        assert isinstance(a, OpenVINOTensor) and a.info == b.info and a.writable is b.writable is False
        assert tuple(a.native.shape) == tuple(b.native.shape) and a.native.element_type == b.native.element_type
        assert a.native.data.ctypes.data == b.native.data.ctypes.data == a.data_ptr == p.buffer_ptr
        np.testing.assert_array_equal(a.native.data, b.native.data)
        assert not np.asarray(a).flags.writeable
    assert fast.parent.native is vf and all(t.parent is fast.parent[i] for i, t in enumerate(fast))


def test_one_step_planes_see_writes_and_keep_the_frame_alive() -> None:
    vf = av.VideoFrame(40, 20, "gray")
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    arr = np.frombuffer(vf.planes[0], np.uint8).reshape(20, vf.planes[0].line_size)
    o = FFmpegToOpenVINO().map_native(vf, AccessMode.READ, False)
    assert o is not None
    arr[3, 5] = 77  # a write through the plane is seen by OpenVINO: the same bytes
    assert o[0].native.data[0, 3, 5, 0] == 77
    t = o[0].native
    want = t.data.copy()
    del vf, arr, o
    gc.collect()
    np.testing.assert_array_equal(t.data, want)  # the ov.Tensor still holds the plane's buffer


@pytest.mark.parametrize("one_step", [True, False])
def test_the_ov_tensor_is_made_on_first_use_and_exports_need_none(one_step: bool) -> None:
    vf = av.VideoFrame(40, 20, "yuv420p")
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    o = FFmpegToOpenVINO().map_native(vf, AccessMode.READ, False) if one_step else \
        FFmpegToOpenVINO().map(interop.wrap(vf), AccessMode.READ)
    t = o[1]
    assert t.data_ptr == vf.planes[1].buffer_ptr and np.asarray(t).ctypes.data == vf.planes[1].buffer_ptr
    assert np.from_dlpack(t).ctypes.data == vf.planes[1].buffer_ptr
    assert t._native is None  # numpy and DLPack read the address: no ov.Tensor made for them
    n = t.native
    assert n is t.native and n.data.ctypes.data == vf.planes[1].buffer_ptr  # made once, over the plane
    o.release()
    with pytest.raises(interop.InvalidTensorError, match="released"):
        o[2].native  # noqa: B018 - never made, and now refused: the mapping is over


def test_a_plane_openvino_cannot_share_takes_the_general_path() -> None:
    buf = np.zeros((4, 32), np.uint8)  # 32-byte rows: 10 RGB pixels and 2 bytes of padding
    rgb = np.lib.stride_tricks.as_strided(buf, (4, 10, 3), (32, 3, 1))
    vf = av.VideoFrame.from_numpy_buffer(rgb, format="rgb24")
    assert FFmpegToOpenVINO().map_native(vf, AccessMode.READ, False) is None
    assert FFmpegToOpenVINO().map_native(av.VideoFrame(8, 8, "gray"), AccessMode.WRITE, True) is None


def test_imported_frame_ending_at_its_last_pixel_is_copied_not_read_past() -> None:
    """A frame over a CPU array (CPU -> FFMPEG shares it) whose buffer ends at the last visible pixel: PyAV says the
    plane holds line_size x rows, but OpenVINO sharing it at full pitch would read past the array, so it is copied."""
    flat = np.arange(47 * 64 + 40, dtype=np.uint32).astype(np.uint8)  # the last row stops at its last pixel
    gray = np.lib.stride_tricks.as_strided(flat, (48, 40), (64, 1))
    f = interop.map(gray, MemoryType.FFMPEG)
    assert f.native.buffer_size == 48 * 64 > flat.nbytes  # what PyAV reports
    edge = FFmpegToOpenVINO()
    assert edge.cost(f) is interop.mapper.Cost.COPY
    with pytest.raises(interop.CopyRequiredError):
        edge.map(f)
    with interop.copy_meter() as m:
        o = edge.map(f, allow_copy=True)
    assert m.copies == 1 and np.array_equal(np.asarray(o).reshape(48, 40), gray)
    packed = interop.map(np.zeros((48, 40), np.uint8), MemoryType.FFMPEG)  # no padding to read past: shared
    with interop.copy_meter() as m:
        edge.map(packed)
    assert m.copies == 0
