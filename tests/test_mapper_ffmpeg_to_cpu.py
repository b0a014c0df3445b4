"""FFMPEG -> CPU: zero-copy, read-only views of decoded planes; WRITE maps a writable copy, counted."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests.ffmpeg_clips import decode

pytest_plugins = ["tests.ffmpeg_clips"]  # the clip fixtures

av = pytest.importorskip("av", reason="needs PyAV (pip install 'interop[ffmpeg]')")

from interop.mappers.ffmpeg_to_cpu import FFmpegToCPU  # noqa: E402
from interop.tensors.ffmpeg import FFmpegTensor  # noqa: E402


def test_route_is_one_zero_copy_step() -> None:
    chain = interop.route(MemoryType.FFMPEG, MemoryType.CPU)
    assert chain.zero_copy and [type(m) for m in chain.mappers] == [FFmpegToCPU]


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
        with pytest.raises(interop.CopyRequiredError, match="writable copy") as e:
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
