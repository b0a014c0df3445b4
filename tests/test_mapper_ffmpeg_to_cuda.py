"""FFMPEG -> CUDA: NVDEC frames kept on the GPU become CUDA planes over the same device memory."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.cuda import from_video_frame
from interop.errors import CopyRequiredError, InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError
from interop.mappers.ffmpeg_to_cuda import FFmpegToCUDA
from interop.native import cuda_driver as cd
from interop.native import dlpack as cn
from interop.tensors.cuda import CUDATensor
from tests.support.requirements import need_module


class FakePlane:
    def __init__(self, ptr: int, line_size: int):
        self.buffer_ptr, self.line_size = ptr, line_size
        self.buffer_size = line_size * 64  # room for the fake frames' rows

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None):
        assert stream is None  # PyAV accepts nothing else
        return ("pyav capsule", self.buffer_ptr)


def fake_hw_frame(w=64, h=32, pitch=128, sw="nv12", base=0x7000_0000):
    planes = [FakePlane(base, pitch), FakePlane(base + 0x10000, pitch)]
    return SimpleNamespace(format=SimpleNamespace(name="cuda"), sw_format=SimpleNamespace(name=sw), planes=planes,
                           width=w, height=h, pts=33, time_base=Fraction(1, 30), colorspace=1, color_range=1)


def test_hw_frame_planes_are_the_decoder_pointers_with_pitch():
    vf = fake_hw_frame()
    f = from_video_frame(vf)
    assert f.format is FrameFormat.NV12 and (f.width, f.height) == (64, 32) and f.native is vf and f.pts == 33
    y, uv = f[0], f[1]
    assert isinstance(y, CUDATensor) and y.ptr == vf.planes[0].buffer_ptr and uv.ptr == vf.planes[1].buffer_ptr
    assert y.shape == (32, 64) and y.strides == (128, 1) and uv.shape == (16, 32, 2) and uv.strides == (128, 2, 1)
    assert not y.writable and y.stream == 1 and y.native is vf.planes[0]
    # a whole plane exports PyAV's own capsule (built in C); views export capsules of their own layout
    assert uv.__dlpack__(stream=1, max_version=(1, 0)) == ("pyav capsule", vf.planes[1].buffer_ptr)
    cap = uv.region(2, 1, 4, 3).__dlpack__(stream=1)
    assert cn.read_capsule(cap)[:3] == (vf.planes[1].buffer_ptr + 128 + 4, (3, 4, 2), (128, 2, 1))
    c = f.crop(8, 4, 16, 8)
    assert c[0].ptr == vf.planes[0].buffer_ptr + 4 * 128 + 8 and c[1].ptr == vf.planes[1].buffer_ptr + 2 * 128 + 8


def test_p010_planes_are_uint16():
    f = from_video_frame(fake_hw_frame(sw="p010le", pitch=256))
    assert f.format is FrameFormat.P010 and f[0].dtype == np.uint16 and f[0].strides == (256, 2)
    assert f[1].shape == (16, 32, 2) and f[1].strides == (256, 4, 2)


def test_unsupported_sw_format_and_software_frames_are_refused():
    with pytest.raises(UnsupportedFormatError, match="nv12 and p010le"):
        from_video_frame(fake_hw_frame(sw="yuv410p"))
    sw = SimpleNamespace(format=SimpleNamespace(name="yuv420p"))
    with pytest.raises(InvalidTensorError, match="HWAccel"):
        from_video_frame(sw)


@pytest.mark.parametrize("sw", ["nv12", "p010le"])
def test_one_step_map_gives_what_the_general_path_gives(sw):
    """interop.map(vf, CUDA) builds the CUDA planes straight from the NVDEC frame (map_native); the general path
    maps the FFmpeg frame wrapped first. from_video_frame (nvdec_frames' frames) is the one-step map."""
    from interop.tensors.ffmpeg import SourcedFrame

    vf = fake_hw_frame(sw=sw, pitch=256)
    fast = FFmpegToCUDA().map_native(vf, AccessMode.READ, False)
    ref = FFmpegToCUDA().map_frame(FFmpegToCUDA().map_native(vf, AccessMode.READ, False).parent, AccessMode.READ,
                                   False)  # the FFmpeg frame wrap_video_frame makes (it refuses fakes)
    via = from_video_frame(vf)
    assert isinstance(via, SourcedFrame) and [t.ptr for t in via] == [t.ptr for t in fast]
    keep = object()
    assert from_video_frame(vf, parent=keep).parent is keep
    assert isinstance(fast, SourcedFrame) and fast.native is vf
    assert (fast.format, fast.width, fast.height, fast.context, fast.pts, fast.time_base) == \
        (ref.format, ref.width, ref.height, ref.context, ref.pts, ref.time_base)
    for a, b, p in zip(fast, ref, vf.planes):
        assert isinstance(a, CUDATensor) and a.info == b.info and a.ptr == b.ptr == p.buffer_ptr
        assert (a.device_id, a.stream, a.writable, a.native) == (b.device_id, b.stream, b.writable, b.native)
        assert a.__dlpack__(stream=1) == b.__dlpack__(stream=1) == ("pyav capsule", p.buffer_ptr)
        assert a.__cuda_array_interface__ == b.__cuda_array_interface__
    # the FFmpeg frame in between, made on first ask, is the hardware one the general path makes
    parent = fast.parent
    assert parent.context.device == "cuda:0" and all(t.is_hardware for t in parent) and fast[1].parent is parent[1]
    assert fast.crop(8, 4, 16, 8)[0].ptr == vf.planes[0].buffer_ptr + 4 * 256 + 8 * fast[0].info.itemsize
    fast.release()
    with pytest.raises(InvalidTensorError):
        fast[0].__dlpack__(stream=1)  # a released plane exports nothing
    ft = FFmpegToCUDA()
    assert ft.map_native(vf, AccessMode.READ_WRITE, True) is None  # the general path refuses writes
    assert ft.map_native(fake_hw_frame(sw="yuv410p"), AccessMode.READ, False) is None  # and names the formats
    assert ft.map_native(SimpleNamespace(format=SimpleNamespace(name="yuv420p")), AccessMode.READ, False) is None


def test_torch_views_of_frames_it_cannot_take_say_what_to_do():
    from interop.cuda import torch_views

    with pytest.raises(UnsupportedFormatError, match="nv12 and p010le"):
        torch_views(fake_hw_frame(sw="yuv410p"))
    with pytest.raises(UnsupportedTypeError, match="NVDEC-decoded av.VideoFrame"):
        torch_views(object())
    av = need_module("av")
    vf = av.VideoFrame.from_ndarray(np.zeros((32, 64, 3), np.uint8), format="rgb24")
    with pytest.raises(InvalidTensorError, match="allow_copy=True"):
        torch_views(vf)


def test_route_is_zero_copy_and_tier_b():
    chain = interop.route(MemoryType.FFMPEG, MemoryType.CUDA)
    assert chain.zero_copy and [type(m) for m in chain.mappers] == [FFmpegToCUDA] and FFmpegToCUDA.tier == "B"


def test_software_frame_upload_is_a_copy_refused_by_default():
    av = need_module("av")
    vf = av.VideoFrame.from_ndarray(np.zeros((32, 64, 3), np.uint8), format="rgb24").reformat(format="nv12")
    with pytest.raises(CopyRequiredError, match="cpu_to_cuda"):
        interop.map(vf, MemoryType.CUDA)


# ---- on the GPU ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    need_module("av")
    from tests.support.gpu_clips import make_clip

    return make_clip(tmp_path_factory.mktemp("clips") / "h264.mp4")


@pytest.mark.gpu
def test_nvdec_frames_map_zero_copy_and_match_cpu_decode(clip):
    torch = need_module("torch", "cuda")
    import av

    from tests.support.gpu_clips import nvdec

    with av.open(str(clip)) as c:
        cpu_frames = [f.to_ndarray(format="nv12") for f in c.decode(video=0)]
    n = 0
    with nvdec(clip) as c, interop.copy_meter() as m:
        for i, vf in enumerate(c.decode(video=0)):
            assert vf.format.name == "cuda"
            f = interop.map(vf, MemoryType.CUDA)
            assert f.format is FrameFormat.NV12 and f.memory_type is MemoryType.CUDA
            for t, p in zip(f, vf.planes):
                assert t.ptr == p.buffer_ptr and t.strides[0] == p.line_size
            y = torch.from_dlpack(f[0])
            uv = torch.from_dlpack(f[1])
            assert y.data_ptr() == vf.planes[0].buffer_ptr and uv.data_ptr() == vf.planes[1].buffer_ptr
            h, w = vf.height, vf.width
            assert np.array_equal(y.cpu().numpy(), cpu_frames[i][:h])  # H.264 decoding is bit-exact
            assert np.array_equal(uv.cpu().numpy().reshape(h // 2, w), cpu_frames[i][h:])
            n += 1
    assert n == len(cpu_frames) and m.copies == 0


@pytest.mark.gpu
def test_one_step_and_general_paths_agree_on_nvdec_frames(clip):
    torch = need_module("torch", "cuda")
    from interop.cuda import torch_views
    from interop.tensors.ffmpeg import SourcedFrame
    from tests.support.gpu_clips import nvdec

    with nvdec(clip) as c:
        for vf in c.decode(video=0):
            fast = FFmpegToCUDA().map_native(vf, AccessMode.READ, False)
            slow = FFmpegToCUDA().map(interop.wrap(vf))
            assert isinstance(fast, SourcedFrame) and type(slow) is interop.Frame
            assert isinstance(interop.map(vf, MemoryType.CUDA), SourcedFrame)  # learned after the first map
            for a, b, p in zip(fast, slow, vf.planes):
                assert a.info == b.info and a.ptr == b.ptr == p.buffer_ptr and a.context is b.context
                assert torch.from_dlpack(a).data_ptr() == torch.from_dlpack(b).data_ptr() == p.buffer_ptr
            ys = torch_views(fast)
            assert [v.data_ptr() for v in ys] == [p.buffer_ptr for p in vf.planes]
            assert torch.equal(ys[0], torch.from_dlpack(slow[0]))
            # straight from the av.VideoFrame: the same tensors, on the legacy stream and on a stream of torch's
            direct = torch_views(vf)
            assert [(v.data_ptr(), v.shape, v.stride(), v.dtype) for v in direct] == \
                [(v.data_ptr(), v.shape, v.stride(), v.dtype) for v in ys]
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                ordered = torch_views(vf)
                sums = [int(v.sum()) for v in ordered]  # queued on `side`, after the decoder's copies
            assert [v.data_ptr() for v in ordered] == [p.buffer_ptr for p in vf.planes]
            assert sums == [int(v.sum()) for v in ys]


@pytest.mark.gpu
def test_write_through_torch_is_seen_through_pyav(clip):
    torch = need_module("torch", "cuda")
    from tests.support.gpu_clips import nvdec

    with nvdec(clip) as c:
        vf = next(c.decode(video=0))
        f = interop.map(vf, MemoryType.CUDA)
        y = torch.from_dlpack(f[0])
        y[5, 7] = 201
        raw = torch.from_dlpack(vf.planes[0].__dlpack__(stream=None))
        torch.cuda.synchronize()
        assert int(raw[5, 7]) == 201
        crop = f.crop(16, 8, 32, 16)
        assert torch.from_dlpack(crop[0]).data_ptr() == vf.planes[0].buffer_ptr + 8 * vf.planes[0].line_size + 16


@pytest.mark.gpu
def test_views_outlive_the_decoder_loop(clip):
    torch = need_module("torch", "cuda")
    from tests.support.gpu_clips import nvdec

    kept = []
    with nvdec(clip) as c:
        for vf in c.decode(video=0):
            kept.append((torch.from_dlpack(interop.map(vf, MemoryType.CUDA)[0]), vf.planes[0].buffer_ptr))
    firsts = [y.clone() for y, _ in kept]
    torch.cuda.synchronize()
    assert len({p for _, p in kept}) == len(kept)  # every kept frame holds its own surface
    assert all(torch.equal(a, y) for a, (y, _) in zip(firsts, kept))


@pytest.mark.gpu
def test_hevc_main10_is_p010(tmp_path):
    torch = need_module("torch", "cuda")
    from tests.support.gpu_clips import make_clip, nvdec

    clip10 = make_clip(tmp_path / "hevc10.mp4", "libx265", frames=6, pix_fmt="yuv420p10le")
    with nvdec(clip10) as c:
        vf = next(c.decode(video=0))
        assert vf.sw_format.name == "p010le", f"NVDEC gave {vf.sw_format.name} for HEVC Main10"
        f = interop.map(vf, MemoryType.CUDA)
        assert f.format is FrameFormat.P010 and f[0].dtype == np.uint16
        assert torch.from_dlpack(f[0]).data_ptr() == vf.planes[0].buffer_ptr


@pytest.mark.gpu
def test_write_mode_is_refused_for_decoded_frames(clip):
    from tests.support.gpu_clips import nvdec

    with nvdec(clip) as c:
        vf = next(c.decode(video=0))
        with pytest.raises(InvalidTensorError):
            interop.map(interop.wrap(vf).crop(0, 0, 32, 32), MemoryType.CUDA, mode=AccessMode.WRITE)


@pytest.mark.gpu
def test_cuda_infer_example_runs_without_copies(clip):
    need_module("torch", "cuda")
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("cuda_infer", Path(__file__).parents[1] / "examples" / "cuda_infer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main([str(clip), "--frames", "25", "--check", "--size", "64"])
    assert out["frames"] == 25 and out["copies"] == 0 and out["check_mean_abs_diff"] < 3.0


@pytest.mark.parametrize("primary, options", [((0, False), {"primary_ctx": "1"}), ((4, True), {"primary_ctx": "1"}),
                                              ((0, True), {"primary_ctx": "0", "current_ctx": "1"})])
def test_open_nvdec_copes_with_a_primary_context_made_by_torch(monkeypatch, primary, options):
    av = need_module("av")
    from interop.cuda import open_nvdec
    from tests.support.cuda_fakes import FakeDriver

    d = FakeDriver()
    d.primary = primary
    old = cd._driver
    cd.set_driver(d)
    seen = {}

    def fake_open(file, hwaccel=None, **kw):
        seen["options"], seen["owned"] = dict(hwaccel.options), hwaccel.is_hw_owned
        seen["pushed"] = d.count("push") - d.count("pop")
        return SimpleNamespace(streams=SimpleNamespace(video=[SimpleNamespace(thread_type="SLICE")]))

    monkeypatch.setattr(av, "open", fake_open)
    try:
        c = open_nvdec("clip.mp4", frame_threads=True, keep_warm=False)  # keeping warm: tests/test_nvdec_warm.py
    finally:
        cd.set_driver(old)
    assert seen["options"] == options and seen["owned"] is True
    assert seen["pushed"] == (1 if "current_ctx" in options else 0) and d.count("push") == d.count("pop")
    assert c.streams.video[0].thread_type == "AUTO"


@pytest.mark.gpu
def test_nvdec_frames_decodes_ahead_and_stops_cleanly(clip):
    need_module("torch", "cuda")
    import threading

    from interop.cuda import nvdec_frames, torch_views

    frames = list(nvdec_frames(str(clip), prefetch=4))
    assert len(frames) == 30 and all(f.memory_type is MemoryType.CUDA for f in frames)
    y, uv = torch_views(frames[0])
    assert y.data_ptr() == frames[0].native.planes[0].buffer_ptr
    it = nvdec_frames(str(clip), prefetch=2)
    next(it)
    it.close()  # the worker is unblocked and joined
    assert not [t for t in threading.enumerate() if t.name == "interop-nvdec"]


def test_torch_views_hand_out_pyav_capsules_on_the_legacy_stream_and_order_other_streams(monkeypatch):
    """torch_views on fakes (a stand-in torch whose from_dlpack returns what it is given): on torch's legacy stream
    the planes' own PyAV capsules, for the mapped frame and for the av.VideoFrame alike; on another stream each
    plane is ordered after the decoder's stream first."""
    from interop import cuda as cu
    from tests.support.cuda_fakes import FakeDriver

    current = {"stream": 0}
    fake_torch = SimpleNamespace(from_dlpack=lambda cap: cap)
    monkeypatch.setattr(cu, "_torch", [fake_torch, lambda device: current["stream"]])
    vf = fake_hw_frame(pitch=256)
    caps = [("pyav capsule", p.buffer_ptr) for p in vf.planes]
    f = FFmpegToCUDA().map_native(vf, AccessMode.READ, False)
    assert cu.torch_views(f) == caps and cu.torch_views(vf) == caps
    d = FakeDriver()
    old = cd._driver
    cd.set_driver(d)
    try:
        current["stream"] = 0x5000
        assert cu.torch_views(f) == caps  # whole planes still hand out PyAV's capsules...
        assert [c for c in d.calls if c[0] == "order"] == [("order", 0, 1, 0x5000)] * 2  # ...after ordering
    finally:
        cd.set_driver(old)
    f.release()
    current["stream"] = 0
    with pytest.raises(InvalidTensorError):
        cu.torch_views(f)  # released planes export nothing
