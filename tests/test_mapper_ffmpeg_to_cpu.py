"""FFMPEG -> CPU: zero-copy, read-only views of decoded planes; WRITE maps a writable copy, counted."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests.support.ffmpeg_clips import decode
from tests.support.requirements import need_module

av = need_module("av")

from interop.mappers.ffmpeg_to_cpu import FFmpegToCPU  # noqa: E402
from interop.tensors.ffmpeg import FFmpegTensor  # noqa: E402


def test_route_is_one_step_that_may_copy() -> None:
    chain = interop.route(MemoryType.FFMPEG, MemoryType.CPU)
    assert not chain.zero_copy and chain.may_copy and [type(m) for m in chain.mappers] == [FFmpegToCPU]


def test_decoded_planes_map_zero_copy_and_read_only(clip_854) -> None:
    frames = decode(clip_854)
    with interop.copy_meter() as m:
        for vf in frames:
            c = interop.map(vf, MemoryType.CPU)
            assert c.memory_type is MemoryType.CPU and c.format is FrameFormat.I420
            assert (c.width, c.height) == (854, 480) and c.pts == vf.pts
            for t, p in zip(c.tensors, vf.planes):
                arr = t.native
                assert isinstance(arr, np.ndarray)
                assert arr.ctypes.data == p.buffer_ptr  # same memory, plane by plane
                assert arr.strides[0] == p.line_size and not arr.flags.writeable
            np.testing.assert_array_equal(np.asarray(c[0]), vf.to_ndarray()[:480])
            with pytest.raises(ValueError):
                np.asarray(c[1])[0, 0] = 0
            c.release()
    assert m.copies == 0 and m.bytes == 0


def test_write_is_refused_without_allow_copy(clip_small) -> None:
    with av.open(str(clip_small)) as cont:
        vf = next(cont.decode(video=0))
        with pytest.raises(interop.CopyRequiredError, match="copies in mode WRITE") as e:
            interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE)
        assert e.value.step is FFmpegToCPU


@pytest.mark.parametrize("mode", [AccessMode.WRITE, AccessMode.READ_WRITE])
def test_write_copies_a_reference_frame_once_and_counts_it(clip_small, mode: AccessMode) -> None:
    with av.open(str(clip_small)) as cont:
        frames = cont.decode(video=0)
        next(frames)
        vf = next(frames)  # the decoder still references it
        before = [p.buffer_ptr for p in vf.planes]
        ro = interop.map(vf, MemoryType.CPU)  # a READ view taken before the WRITE map
        want = np.asarray(ro[0]).copy()
        nbytes = sum(p.width * p.height for p in vf.planes)
        with interop.copy_meter() as m:
            c = interop.map(vf, MemoryType.CPU, mode=mode, allow_copy=True)
        assert [p.buffer_ptr for p in vf.planes] == before  # the decoder's frame is never modified
        assert m.copies == 1 and m.bytes == nbytes and m.records[0].mapper == "ffmpeg_to_cpu"
        copy = c.parent.native  # the writable copy: a new VideoFrame
        assert copy is not vf and [t.native.ctypes.data for t in c.tensors] == [p.buffer_ptr for p in copy.planes]
        y = c[0].native
        assert y.flags.writeable and np.array_equal(y, want)
        y[1, 2] = 250
        assert copy.to_ndarray()[1, 2] == 250  # writes land in the copy
        assert np.array_equal(np.asarray(ro[0]), want)  # the earlier view still reads the decoded frame
        list(frames)  # the decoder moves on and recycles its buffers
        assert np.array_equal(np.asarray(ro[0]), want)


def test_frames_we_own_are_written_in_place_when_wrapped_writable() -> None:
    from interop.tensors.ffmpeg import wrap_video_frame

    vf = av.VideoFrame(64, 48, "yuv420p")  # we own its buffers: say so, and nothing is copied
    before = [p.buffer_ptr for p in vf.planes]
    with interop.copy_meter() as m:
        c = interop.map(wrap_video_frame(vf, writable=True), MemoryType.CPU, mode=AccessMode.WRITE)
    assert m.copies == 0 and [p.buffer_ptr for p in vf.planes] == before
    c[2].native[0, 0] = 17
    assert vf.planes[2].buffer_ptr == c[2].data_ptr
    assert np.frombuffer(vf.planes[2], np.uint8)[0] == 17


def test_views_outlive_the_decoder_and_the_frames(clip_854) -> None:
    with av.open(str(clip_854)) as cont:
        it = cont.decode(video=0)
        views = [interop.map(next(it), MemoryType.CPU) for _ in range(4)]
        want = [[t.native.copy() for t in f.tensors] for f in views]
        arrays = [[t.native for t in f.tensors] for f in views]
        list(it)
    del views, it
    gc.collect()
    for arrs, ws in zip(arrays, want):
        for a, w in zip(arrs, ws):
            np.testing.assert_array_equal(a, w)


def test_release_ends_the_mapping_but_not_the_numpy_views() -> None:
    vf = av.VideoFrame(32, 32, "gray")
    c = interop.map(vf, MemoryType.CPU)
    arr = np.asarray(c[0])
    c.release()
    with pytest.raises(interop.InvalidTensorError):
        c[0]
    assert arr.shape == (32, 32) and arr.ctypes.data == vf.planes[0].buffer_ptr


def test_single_plane_tensor_and_crop() -> None:
    vf = av.VideoFrame(100, 60, "nv12")
    f = interop.wrap(vf)
    t = interop.map(f[1], MemoryType.CPU)
    assert t.shape == (30, 50, 2) and t.data_ptr == vf.planes[1].buffer_ptr and t.parent is f[1]
    region = interop.map(f.crop(10, 6, 20, 10), MemoryType.CPU)
    assert region[0].data_ptr == vf.planes[0].buffer_ptr + 6 * vf.planes[0].line_size + 10
    assert region[1].shape == (5, 10, 2)
    with pytest.raises(interop.InvalidTensorError, match="whole frame"):
        interop.map(f.crop(10, 6, 20, 10)[0], MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)


def test_hardware_frames_are_refused_naming_the_cuda_route() -> None:
    vf = av.VideoFrame(16, 16, "gray")
    p = vf.planes[0]
    hw = FFmpegTensor(p, interop.TensorInfo((16, 16), np.uint8, (p.line_size, 1)), hardware=True)
    with pytest.raises(interop.InvalidTensorError, match="MemoryType.CUDA"):
        FFmpegToCPU().map(hw)


def test_bad_inputs() -> None:
    with pytest.raises(interop.InvalidTensorError):
        FFmpegToCPU().map(np.zeros((4, 4), np.uint8))  # a CPU tensor is not FFmpeg memory
    with pytest.raises(interop.UnsupportedTypeError):
        interop.map(av.VideoFrame(16, 16, "gray"), MemoryType.CPU, mode="read")  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["yuv420p", "nv12", "rgb24", "gray", "p010le", "bgr0"])
def test_the_one_step_path_gives_what_the_general_path_gives(fmt: str) -> None:
    """interop.map(vf, CPU) builds the CPU frame straight from the av.VideoFrame (map_native); the general path
    wraps it as FFmpeg tensors first. Both must give the same planes over the same memory."""
    from interop.tensors.ffmpeg import SourcedFrame

    vf = av.VideoFrame(70, 46, fmt)  # odd widths: padded pitches
    fast = FFmpegToCPU().map_native(vf, AccessMode.READ, False)
    slow = FFmpegToCPU().map(interop.wrap(vf))
    assert isinstance(fast, SourcedFrame) and type(slow) is interop.Frame
    assert (fast.format, fast.width, fast.height, fast.context, fast.memory_type, len(fast)) == \
        (slow.format, slow.width, slow.height, slow.context, slow.memory_type, len(slow))
    assert (fast.pts, fast.time_base, fast.colorspace, fast.color_range) == \
        (slow.pts, slow.time_base, slow.colorspace, slow.color_range)
    for a, b, p in zip(fast, slow, vf.planes):
        assert a.info == b.info and a.data_ptr == b.data_ptr == p.buffer_ptr + 0
        assert a.writable is b.writable is False and a.context is b.context
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert not a.numpy().flags.writeable and not np.asarray(a).flags.writeable
        assert a.numpy().ctypes.data == np.asarray(a).ctypes.data == p.buffer_ptr
    # the FFmpeg frame in between is made on first ask, once, and the planes' parents are its planes
    assert fast.parent.native is vf and fast.parent is fast.parent
    assert all(isinstance(t.parent, FFmpegTensor) and t.parent is fast.parent[i] for i, t in enumerate(fast))
    crop = fast.crop(2, 2, 8, 8)
    assert crop.parent is fast and crop[0].data_ptr == fast[0].data_ptr + 2 * fast[0].strides[0] + 2 * fast[0].strides[1]
    fast.metadata["k"] = 1
    assert fast.metadata == {"k": 1}
    fast.release()
    with pytest.raises(interop.InvalidTensorError):
        fast[0]


def test_interop_map_takes_the_one_step_path_only_where_it_applies() -> None:
    from interop.tensors.ffmpeg import SourcedFrame

    vf = av.VideoFrame(32, 32, "yuv420p")
    interop.map(vf, MemoryType.CPU).release()  # the first map of this class learns the one-step path
    assert isinstance(interop.map(vf, MemoryType.CPU), SourcedFrame)
    m = FFmpegToCPU()
    assert m.map_native(vf, AccessMode.WRITE, True) is None  # writes copy: the general path counts them
    # a destination context or an unsupported format: the general path, with its errors
    assert type(interop.map(vf, interop.Context.default(MemoryType.CPU))) is interop.Frame
    with pytest.raises(interop.UnsupportedFormatError, match="yuv410p"):
        interop.map(av.VideoFrame(16, 16, "yuv410p"), MemoryType.CPU)
    with pytest.raises(interop.UnsupportedFormatError, match="yuv410p"):
        m.map_native(av.VideoFrame(16, 16, "yuv410p"), AccessMode.READ, False)


def test_one_step_views_see_writes_to_the_frame() -> None:
    vf = av.VideoFrame(40, 20, "yuv420p")
    f = FFmpegToCPU().map_native(vf, AccessMode.READ, False)
    assert f is not None
    for i, p in enumerate(vf.planes):  # a write through PyAV's plane is read through the CPU view: the same bytes
        np.frombuffer(p, np.uint8)[3 * p.line_size + 5] = 100 + i
        assert f[i].numpy()[3, 5] == 100 + i and f[i].data_ptr == p.buffer_ptr
