"""FFmpeg tensors: av.VideoFrame planes as interop Tensors at their true pitch, read-only by default."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import interop
from interop import ColorRange, FrameFormat, MemoryType
from tests.support.ffmpeg_clips import decode
from tests.support.requirements import need_module

av = need_module("av")

from interop.tensors.ffmpeg import (  # noqa: E402
    PIXEL_FORMATS,
    FFmpegTensor,
    wrap_video_frame,
)

FORMATS = {  # pixel format -> (FrameFormat, [(plane shape for 854x481, dtype)])
    "yuv420p": (FrameFormat.I420, [((481, 854), np.uint8), ((241, 427), np.uint8), ((241, 427), np.uint8)]),
    "yuvj420p": (FrameFormat.I420, [((481, 854), np.uint8), ((241, 427), np.uint8), ((241, 427), np.uint8)]),
    "nv12": (FrameFormat.NV12, [((481, 854), np.uint8), ((241, 427, 2), np.uint8)]),
    "nv21": (FrameFormat.NV21, [((481, 854), np.uint8), ((241, 427, 2), np.uint8)]),
    "p010le": (FrameFormat.P010, [((481, 854), np.uint16), ((241, 427, 2), np.uint16)]),
    "rgb24": (FrameFormat.RGB, [((481, 854, 3), np.uint8)]),
    "bgr24": (FrameFormat.BGR, [((481, 854, 3), np.uint8)]),
    "rgba": (FrameFormat.RGBA, [((481, 854, 4), np.uint8)]),
    "bgra": (FrameFormat.BGRA, [((481, 854, 4), np.uint8)]),
    "rgb0": (FrameFormat.RGBX, [((481, 854, 4), np.uint8)]),
    "bgr0": (FrameFormat.BGRX, [((481, 854, 4), np.uint8)]),
    "gray": (FrameFormat.GRAY8, [((481, 854), np.uint8)]),
    "gray16le": (FrameFormat.GRAY16, [((481, 854), np.uint16)]),
    "yuv422p": (FrameFormat.I422, [((481, 854), np.uint8), ((481, 427), np.uint8), ((481, 427), np.uint8)]),
    "yuvj422p": (FrameFormat.I422, [((481, 854), np.uint8), ((481, 427), np.uint8), ((481, 427), np.uint8)]),
    "yuv444p": (FrameFormat.I444, [((481, 854), np.uint8)] * 3),
    "yuvj444p": (FrameFormat.I444, [((481, 854), np.uint8)] * 3),
    "yuv420p10le": (FrameFormat.I420_10, [((481, 854), np.uint16), ((241, 427), np.uint16), ((241, 427), np.uint16)]),
    "yuv422p10le": (FrameFormat.I422_10, [((481, 854), np.uint16), ((481, 427), np.uint16), ((481, 427), np.uint16)]),
    "yuv444p10le": (FrameFormat.I444_10, [((481, 854), np.uint16)] * 3),
    "yuv420p12le": (FrameFormat.I420_12, [((481, 854), np.uint16), ((241, 427), np.uint16), ((241, 427), np.uint16)]),
    "gray10le": (FrameFormat.GRAY10, [((481, 854), np.uint16)]),
}


def test_table_covers_every_supported_format() -> None:
    assert set(FORMATS) == set(PIXEL_FORMATS)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_pixel_formats_map_to_planes_at_true_pitch(name: str) -> None:
    vf = av.VideoFrame(854, 481, name)
    f = interop.wrap(vf)
    fmt, planes = FORMATS[name]
    assert isinstance(f, interop.Frame) and f.format is fmt and f.memory_type is MemoryType.FFMPEG
    assert (f.width, f.height) == (854, 481) and f.native is vf
    assert len(f) == len(planes) == len(vf.planes)
    for t, p, (shape, dtype) in zip(f.tensors, vf.planes, planes):
        assert isinstance(t, FFmpegTensor) and t.native.buffer_ptr == p.buffer_ptr  # vf.planes makes new objects
        assert t.shape == shape and t.dtype == dtype
        assert t.strides[0] == p.line_size and t.line_size == p.line_size
        arr = np.asarray(t)
        assert arr.ctypes.data == p.buffer_ptr == t.data_ptr == t.handle("data")
        assert arr.shape == shape and arr.strides[0] == p.line_size
    if name.startswith("yuvj"):
        assert f.color_range is ColorRange.FULL


def test_decoded_odd_size_frame_has_padded_pitch_and_read_only_planes(clip_854) -> None:
    vf = decode(clip_854)[0]
    f = interop.wrap(vf)
    assert f.format is FrameFormat.I420 and (f.width, f.height) == (854, 480)
    y, u, v = f.tensors
    assert y.shape == (480, 854) and y.strides[0] == vf.planes[0].line_size > 854  # padded rows
    assert u.shape == v.shape == (240, 427) and u.strides[0] == vf.planes[1].line_size > 427
    assert not y.writable
    arr = np.asarray(y)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0, 0] = 1  # decoded frames are reference frames
    # the pixels are the frame's own
    np.testing.assert_array_equal(arr, vf.to_ndarray(format="yuv420p")[:480])
    assert f.pts == vf.pts and f.time_base == vf.time_base and isinstance(f.time_base, Fraction)


def test_full_range_and_colour_metadata(clip_yuvj) -> None:
    vf = decode(clip_yuvj)[0]
    assert vf.format.name == "yuvj420p"
    f = interop.wrap(vf)
    assert f.format is FrameFormat.I420 and f.color_range is ColorRange.FULL
    own = av.VideoFrame(16, 16, "yuv420p")
    own.pts, own.time_base = 42, Fraction(1, 90000)
    own.colorspace, own.color_range = 1, 1  # BT.709, limited
    g = interop.wrap(own)
    assert g.pts == 42 and g.time_base == Fraction(1, 90000)
    assert g.colorspace is interop.ColorSpace.BT709 and g.color_range is ColorRange.LIMITED


def test_unsupported_pixel_format_names_the_supported_ones() -> None:
    with pytest.raises(interop.UnsupportedFormatError, match="yuv420p.*nv12") as e:
        interop.wrap(av.VideoFrame(64, 48, "yuv410p"))
    assert "reformat" in str(e.value)


def test_writable_wrap_writes_through_to_the_frame() -> None:
    vf = av.VideoFrame(64, 48, "gray")  # our own frame, not a decoder's
    f = wrap_video_frame(vf, writable=True)
    arr = np.asarray(f[0])
    arr[3, 5] = 77
    assert vf.to_ndarray()[3, 5] == 77


def test_views_keep_frames_alive_after_the_decoder_moves_on(clip_854) -> None:
    import gc

    with av.open(str(clip_854)) as c:
        frames = c.decode(video=0)
        first = [interop.wrap(next(frames)) for _ in range(3)]
        arrays = [np.asarray(f[0]) for f in first]
        want = [a.copy() for a in arrays]
        rest = list(frames)  # decode the remaining frames: the decoder reuses what nobody holds
    assert len(rest) == 9
    del first, rest, frames
    gc.collect()
    for a, w in zip(arrays, want):
        np.testing.assert_array_equal(a, w)


def test_crop_is_an_offset_into_the_same_planes() -> None:
    vf = av.VideoFrame(854, 480, "yuv420p")
    c = interop.wrap(vf).crop(10, 4, 100, 50)
    assert (c.width, c.height) == (100, 50) and c[0].shape == (50, 100) and c[1].shape == (25, 50)
    assert c[0].data_ptr == vf.planes[0].buffer_ptr + 4 * vf.planes[0].line_size + 10
    assert c[1].data_ptr == vf.planes[1].buffer_ptr + 2 * vf.planes[1].line_size + 5
    assert c[0].strides[0] == vf.planes[0].line_size


def test_wrap_refuses_info_and_format_for_video_frames() -> None:
    vf = av.VideoFrame(16, 16, "yuv420p")
    with pytest.raises(interop.UnsupportedTypeError):
        interop.wrap(vf, format=FrameFormat.NV12)
    with pytest.raises(interop.UnsupportedTypeError):
        wrap_video_frame(np.zeros((4, 4), np.uint8))


def test_tensor_constructor_checks_its_input() -> None:
    vf = av.VideoFrame(16, 16, "gray")
    with pytest.raises(interop.UnsupportedTypeError):
        FFmpegTensor(np.zeros(4), interop.TensorInfo((2, 2)))
    with pytest.raises(interop.InvalidTensorError, match="does not fit"):
        FFmpegTensor(vf.planes[0], interop.TensorInfo((17, 16), np.uint8, (vf.planes[0].line_size, 1)))
    t = FFmpegTensor(vf.planes[0], interop.TensorInfo((16, 16), np.uint8, (vf.planes[0].line_size, 1)))
    assert not t.writable and np.asarray(t).ctypes.data == vf.planes[0].buffer_ptr


def test_hardware_planes_are_not_cpu_reachable() -> None:
    vf = av.VideoFrame(16, 16, "gray")
    t = FFmpegTensor(vf.planes[0], interop.TensorInfo((16, 16), np.uint8, (vf.planes[0].line_size, 1)), hardware=True)
    assert t.is_hardware and t.buffer_ptr == vf.planes[0].buffer_ptr
    with pytest.raises(interop.InteropError):
        np.asarray(t)
    with pytest.raises(interop.InvalidTensorError, match="CUDA"):
        t.as_array()


def test_released_frame_refuses_use() -> None:
    f = interop.wrap(av.VideoFrame(16, 16, "yuv420p"))
    t = f[0]
    f.release()
    with pytest.raises(interop.InvalidTensorError):
        _ = t.native


def _missing(fast: object, public: object) -> set[str]:
    """Attributes the public constructor sets that the fast-built object lacks (on itself or its class)."""
    return {k for k in vars(public) if not hasattr(fast, k)}


def test_fast_constructors_match_the_public_ones() -> None:
    """The per-frame fast paths build the state the public constructors give (guards against core drift): every
    attribute __init__ sets is there, on the instance or as a class default of the fast-built class."""
    from interop.tensors._fastpath import CPUView, trusted_frame
    from interop.tensors.cpu import CPUTensor

    vf = av.VideoFrame(16, 16, "gray")
    p = vf.planes[0]
    info = interop.TensorInfo((16, 16), np.uint8, (p.line_size, 1))
    slow = FFmpegTensor(p, info, video_frame=vf, index=0)
    fast = wrap_video_frame(vf)[0]
    assert not _missing(fast, slow) and not _missing(FFmpegTensor._trusted(p, info, 0, False, None, None, False, vf, 0), slow)
    arr = np.zeros((4, 4), np.uint8)
    assert not _missing(CPUView.of(arr, interop.TensorInfo.of(arr), None, True), CPUTensor(arr))
    ts = [CPUTensor(arr)]
    normal = interop.Frame(ts, FrameFormat.GRAY8, 4, 4)
    quick = trusted_frame(ts, FrameFormat.GRAY8, 4, 4, context=None, native=None, colorspace=None,
                          color_range=None, pts=None, time_base=None, metadata=None, parent=None)
    bare = interop.Frame._unchecked(ts, FrameFormat.GRAY8, 4, 4, None, None)
    assert not _missing(quick, normal) and not _missing(bare, normal)
    assert bare.metadata == {} and bare.metadata is not interop.Frame._unchecked(ts, FrameFormat.GRAY8, 4, 4, None,
                                                                                  None).metadata  # not shared
    for got in (quick, bare):  # the values, not only the names, are those of the public constructor
        assert (got.native, got.colorspace, got.pts, got.time_base, got._released) == \
            (normal.native, normal.colorspace, normal.pts, normal.time_base, normal._released)
    for vf in (av.VideoFrame(16, 16, "gray"), av.VideoFrame(16, 16, "yuv420p")):
        mapped = interop.map(vf, MemoryType.CPU)  # one step: frame and CPU views built inline by the mapper
        assert isinstance(mapped, interop.Frame) and isinstance(mapped[0], CPUTensor)
        assert not _missing(mapped[0], CPUTensor(arr)) and not _missing(mapped, normal)
        assert mapped[0].released is False and mapped.metadata == {} and mapped.colorspace == normal.colorspace
        assert mapped.parent.native is vf and mapped[0].parent is mapped.parent[0]  # made on first ask


def test_openvino_planes_match_the_public_constructor() -> None:
    need_module("openvino")
    from interop.tensors.openvino import OpenVINOTensor

    vf = av.VideoFrame(16, 16, "gray")
    mapped = interop.map(vf, MemoryType.OPENVINO)
    public = OpenVINOTensor.from_numpy(np.zeros((1, 16, 16, 1), np.uint8), parent=None)
    assert not _missing(mapped[0], public) and mapped[0].released is False and mapped[0].writable is False
    assert mapped.parent.native is vf and mapped[0].parent is mapped.parent[0]


def test_doctor_reports_ffmpeg() -> None:
    from interop.backends import run_probes

    rows = [r for r in run_probes() if r.name == "FFmpeg"]
    assert rows and rows[0].installed and "PyAV" in (rows[0].version or "")


def test_openvino_request_inputs_are_reused_per_buffer_and_bounded() -> None:
    """Inference's per-buffer request inputs (PlaneInputs): one ov.Tensor per (address, layout), reused, and the
    cache never grows past its LIMIT (an IdentityCache: it starts again when full)."""
    need_module("openvino")
    import openvino as ov

    from interop._cache import IdentityCache
    from interop.inference._inputs import PlaneInputs, frame_inputs

    class Small(PlaneInputs):
        LIMIT = 4

    pi = Small(ov)
    assert isinstance(pi._cache, IdentityCache) and pi._cache.maxsize == 4
    vfs = [av.VideoFrame(64, 48, "yuv420p") for _ in range(3)]  # 9 planes, 9 addresses
    mapped = [interop.map(interop.wrap(vf), MemoryType.OPENVINO) for vf in vfs]
    first, _ = frame_inputs(ov, pi, mapped[0])
    again, shapes = frame_inputs(ov, pi, mapped[0])
    assert all(a is b for a, b in zip(first, again)) and pi.made == 3
    assert shapes[0][:2] == (1, 48) and len(shapes) == 3
    for m in mapped[1:]:
        frame_inputs(ov, pi, m)
    assert len(pi._cache) <= 4 and pi.made == 9


def test_unchecked_planes_match_unchecked_and_the_public_constructor() -> None:
    """Tensor._unchecked_planes (one call per frame) builds per plane what _unchecked builds, read-only, native
    made on first use, in the same attribute order (instances of a class then share one attribute layout)."""
    from interop.mappers.ffmpeg_to_cpu import PlaneView
    from interop.tensors.cpu import CPUTensor

    vf = av.VideoFrame(16, 16, "yuv420p")
    infos = [t.info for t in wrap_video_frame(vf)]
    views = PlaneView._unchecked_planes(infos, vf.planes, None, "src")
    one = PlaneView._unchecked(None, infos[0], None, "src", False)
    one._plane, one._index = vf.planes[0], 0
    assert [list(vars(v)) for v in views] == [list(vars(one))] * 3
    assert [(v._info, v._index, v._writable, v._native, v._parent) for v in views] == \
        [(i, n, False, None, "src") for n, i in enumerate(infos)]
    assert not _missing(views[0], CPUTensor(np.zeros((4, 4), np.uint8))) and views[0].released is False


# ---- frames over foreign memory: PyAV's buffer_size (line_size x rows) overstates it (issue 15) ----------------


def _unpadded_last_row() -> tuple[np.ndarray, np.ndarray]:
    """(buffer, a 24x32 RGB array over it at a 120-byte pitch whose last row ends at the buffer's last byte)."""
    buf = np.arange(23 * 120 + 32 * 3, dtype=np.uint8)
    return buf, np.ndarray((24, 32, 3), np.uint8, buffer=buf, strides=(120, 3, 1))


def _inside(buf: np.ndarray, addr: int, nbytes: int) -> bool:
    lo = buf.__array_interface__["data"][0]
    return lo <= addr and addr + nbytes <= lo + buf.nbytes


def _ov_reads(buf: np.ndarray, out: interop.Frame | interop.Tensor) -> list[tuple[int, int]]:
    """(address, bytes) OpenVINO reads for each plane of ``out``, checked to lie inside ``buf`` or wholly outside it
    (a copy): a plane that starts in the array and ends past it is the bug."""
    reads = []
    lo, hi = buf.__array_interface__["data"][0], buf.__array_interface__["data"][0] + buf.nbytes
    for t in out.tensors if isinstance(out, interop.Frame) else [out]:
        data = t.native.data
        addr, n = data.__array_interface__["data"][0], t.native.byte_size
        assert _inside(buf, addr, n) or addr + n <= lo or addr >= hi, \
            f"OpenVINO reads {n} bytes at +{addr - lo}: past the end of the {buf.nbytes}-byte array"
        reads.append((addr, n))
    return reads


def test_a_users_frame_over_an_array_declares_only_the_array() -> None:
    need_module("openvino")
    buf, a = _unpadded_last_row()
    vf = av.VideoFrame.from_numpy_buffer(a, format="rgb24")
    assert vf.planes[0].buffer_size > buf.nbytes  # PyAV's own figure: line_size x rows
    f = interop.wrap(vf)
    assert f[0].buffer_size <= buf.nbytes and _inside(buf, f[0].data_ptr, f[0].buffer_size)
    assert (np.asarray(f[0]) == a).all()
    # one step (map_native), the general path (a wrapped frame), and through the CPU
    for src in (vf, interop.wrap(vf), interop.map(vf, MemoryType.CPU)):
        with pytest.raises(interop.CopyRequiredError):
            interop.map(src, MemoryType.OPENVINO)
        out = interop.map(src, MemoryType.OPENVINO, allow_copy=True)
        _ov_reads(buf, out)
        assert (np.asarray(out[0]).reshape(a.shape) == a).all()


def test_interop_frames_over_arrays_declare_the_arrays_extent() -> None:
    """CPU -> FFMPEG over an array whose last row is unpadded, then to OpenVINO in one step or through the CPU."""
    need_module("openvino")
    buf, a = _unpadded_last_row()
    f = interop.map(a, MemoryType.FFMPEG)
    assert f.buffer_size <= buf.nbytes and _inside(buf, f.data_ptr, f.buffer_size)
    for src in (f, interop.map(f, MemoryType.CPU)):
        out = interop.map(src, MemoryType.OPENVINO, allow_copy=True)
        _ov_reads(buf, out)
    # an array with room for the last row's padding in its buffer is still shared at full pitch, zero-copy
    big = np.zeros((24, 40, 3), np.uint8)
    g = interop.map(big[:, :32], MemoryType.FFMPEG)
    assert g.buffer_size == big.nbytes
    with interop.copy_meter() as m:
        out = interop.map(interop.map(g, MemoryType.CPU), MemoryType.OPENVINO)
    assert m.copies == 0 and _inside(big, out.native.data.__array_interface__["data"][0], out.native.byte_size)


def test_decoded_frames_keep_pyavs_buffer_size() -> None:
    vf = decode(Path(interop.__file__).parent / "data" / "text.mp4")[0]
    assert vf.pict_type != 0  # a decoder's frame: FFmpeg allocated line_size x rows and more
    f = interop.wrap(vf)
    assert [t.buffer_size for t in f.tensors] == [p.buffer_size for p in vf.planes]
    assert all(type(t.native).__name__ == "VideoPlane" for t in f.tensors)
