"""interop.cuda's keep-warm helpers: one idle NVDEC decoder held per device, so no close is the process's last one."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest

from interop import cuda as nvdec_warm
from tests.support.requirements import need_module


@pytest.fixture(autouse=True)
def fresh_state():
    nvdec_warm.release_nvdec_warm()
    nvdec_warm._failed.clear()
    yield
    nvdec_warm.release_nvdec_warm()
    nvdec_warm._failed.clear()


class FakeContainer:
    def __init__(self, fail: bool = False):
        self.fail, self.closed, self.decoded = fail, 0, 0

    def decode(self, video=0):
        if self.fail:
            raise RuntimeError("no NVDEC here")
        self.decoded += 1
        yield SimpleNamespace(format=SimpleNamespace(name="cuda"))

    def close(self):
        self.closed += 1


@pytest.fixture
def fake_open(monkeypatch):
    opened: list[tuple[FakeContainer, dict]] = []
    state = {"fail": False}

    def open_nvdec(file, **kw):
        c = FakeContainer(state["fail"])
        opened.append((c, dict(kw, file=file)))
        return c

    monkeypatch.setattr(nvdec_warm, "open_nvdec", open_nvdec)
    return SimpleNamespace(opened=opened, state=state)


def test_the_idle_decoders_clip_is_one_small_h264_picture():
    av = need_module("av")
    with av.open(io.BytesIO(nvdec_warm._tiny_clip())) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        frames = list(c.decode(video=0))
    assert len(frames) == 1 and (frames[0].width, frames[0].height) == (256, 144)


def test_keep_warm_holds_one_decoder_per_device_until_released(fake_open):
    need_module("av")
    nvdec_warm.keep_nvdec_warm(0)
    nvdec_warm.keep_nvdec_warm(0)  # once per device
    nvdec_warm.keep_nvdec_warm(1)
    assert nvdec_warm.nvdec_warm_devices() == [0, 1] and len(fake_open.opened) == 2
    c0, kw0 = fake_open.opened[0]
    # it decoded a picture (FFmpeg makes the NVDEC decoder then), on the asked device, without recursing
    assert c0.decoded == 1 and c0.closed == 0 and kw0["device"] == 0 and kw0["keep_warm"] is False
    assert isinstance(kw0["file"], io.BytesIO) and fake_open.opened[1][1]["device"] == 1
    nvdec_warm.release_nvdec_warm(0)
    assert c0.closed == 1 and nvdec_warm.nvdec_warm_devices() == [1]
    nvdec_warm.release_nvdec_warm()
    assert fake_open.opened[1][0].closed == 1 and nvdec_warm.nvdec_warm_devices() == []


def test_a_decoder_that_fails_is_closed_and_the_error_raised(fake_open):
    need_module("av")
    fake_open.state["fail"] = True
    with pytest.raises(RuntimeError, match="no NVDEC"):
        nvdec_warm.keep_nvdec_warm(0)
    assert fake_open.opened[0][0].closed == 1 and nvdec_warm.nvdec_warm_devices() == []


def test_try_keep_warm_logs_a_failure_once_and_does_not_retry(fake_open, caplog):
    need_module("av")
    fake_open.state["fail"] = True
    with caplog.at_level(logging.INFO, logger="interop"):
        assert nvdec_warm.try_keep_nvdec_warm(0) is False
        assert nvdec_warm.try_keep_nvdec_warm(0) is False
    assert len(fake_open.opened) == 1
    assert [r.getMessage() for r in caplog.records if "idle NVDEC" in r.getMessage()][0].count("no NVDEC here") == 1
    fake_open.state["fail"] = False
    assert nvdec_warm.try_keep_nvdec_warm(1) is True and nvdec_warm.nvdec_warm_devices() == [1]


def test_open_nvdec_keeps_the_device_warm_unless_told_not_to(monkeypatch):
    av = need_module("av")
    from interop.native import cuda_driver as cd
    from tests.support.cuda_fakes import FakeDriver

    asked: list[int] = []
    monkeypatch.setattr(nvdec_warm, "try_keep_nvdec_warm", lambda device=0: asked.append(device) or True)
    monkeypatch.setattr(av, "open", lambda file, hwaccel=None, **kw: SimpleNamespace(streams=SimpleNamespace(video=[])))
    old = cd._driver
    cd.set_driver(FakeDriver())
    try:
        nvdec_warm.open_nvdec("clip.mp4", device=0)
        nvdec_warm.open_nvdec("clip.mp4", device=0, keep_warm=False)
    finally:
        cd.set_driver(old)
    assert asked == [0]


@pytest.mark.gpu
def test_an_idle_nvdec_decoder_is_held_and_decoding_goes_on_beside_it(tmp_path):
    need_module("torch", "cuda")
    from interop.cuda import torch_views
    from tests.support.gpu_clips import make_clip

    clip = make_clip(tmp_path / "h264.mp4")
    nvdec_warm.keep_nvdec_warm(0)
    idle = nvdec_warm._held[0]
    assert nvdec_warm.nvdec_warm_devices() == [0] and idle.streams.video[0].codec_context.is_open
    for _ in range(2):  # decoders come and go beside the idle one
        with nvdec_warm.open_nvdec(str(clip)) as c:
            n = 0
            for vf in c.decode(video=0):
                y, uv = torch_views(vf)
                assert y.data_ptr() == vf.planes[0].buffer_ptr and y.is_cuda
                n += 1
        assert n == 30
    assert nvdec_warm._held[0] is idle  # open_nvdec found the device warm and made no second idle decoder
    nvdec_warm.release_nvdec_warm(0)
    assert nvdec_warm.nvdec_warm_devices() == []


def test_the_old_import_paths_are_aliases_of_interop_cuda():
    """Code written before issue 16 imported these from a mapper, a tensor module and interop.nvdec_warm: the same
    objects, and importing the mapper or the tensor module alone does not load interop.cuda."""
    import subprocess
    import sys

    import interop.nvdec_warm as old_warm
    from interop.mappers import ffmpeg_to_cuda
    from interop.tensors import cuda as tensors_cuda

    for name in ("open_nvdec", "nvdec_frames", "from_video_frame"):
        assert getattr(ffmpeg_to_cuda, name) is getattr(nvdec_warm, name)
    assert tensors_cuda.torch_views is nvdec_warm.torch_views
    for name in ("keep_nvdec_warm", "try_keep_nvdec_warm", "release_nvdec_warm", "nvdec_warm_devices"):
        assert getattr(old_warm, name) is getattr(nvdec_warm, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ffmpeg_to_cuda.nope  # noqa: B018
    code = ("import sys, interop.mappers.ffmpeg_to_cuda, interop.tensors.cuda; "
            "assert 'interop.cuda' not in sys.modules, 'loaded eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
