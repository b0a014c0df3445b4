"""GST tensors and frames: Gst.Sample / Gst.Buffer / Gst.Memory wrapped over the buffer's own memories.

GStreamer is tier A: these tests never skip (tests/prepare.d/gstreamer.sh installs it; PyGObject comes with
the `gst` extra). The pipelines are real: videotestsrc, and the bundled clip decoded by avdec_h264.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interop
from interop import ColorRange, ColorSpace, FrameFormat, InvalidTensorError, MemoryType, TensorInfo
from interop.errors import UnsupportedFormatError, UnsupportedTypeError
from interop.native import gst as ng
from interop.tensors.gst import GstFrame, GstTensor, caps_for, gst, wrap_buffer

Gst = gst()  # through interop: it loads GStreamer after ordering the native libraries

CLIP = Path(__file__).resolve().parent.parent / "interop" / "data" / "text.mp4"


def pull_samples(desc: str, n: int) -> tuple[Any, list[Any]]:
    """Run ``desc`` (ending in ``appsink name=sink``) and pull ``n`` samples; returns (pipeline, samples)."""
    p = Gst.parse_launch(desc)
    sink = p.get_by_name("sink")
    assert p.set_state(Gst.State.PLAYING) != Gst.StateChangeReturn.FAILURE
    out = []
    for _ in range(n):
        s = sink.emit("try-pull-sample", 5 * Gst.SECOND)
        assert s is not None, f"no sample from {desc}"
        out.append(s)
    return p, out


def videotest(fmt: str = "NV12", w: int = 854, h: int = 480, n: int = 1) -> str:
    return (f"videotestsrc num-buffers={n} pattern=ball ! video/x-raw,format={fmt},width={w},height={h},"
            f"framerate=30/1 ! appsink name=sink sync=false")


def decoded_clip() -> str:
    return f"filesrc location={CLIP} ! qtdemux ! h264parse ! avdec_h264 ! appsink name=sink sync=false"


def own_buffer(fmt: FrameFormat, w: int, h: int) -> tuple[Any, Any]:
    """A writable buffer of tight planes (one memory) and its caps."""
    caps = caps_for(fmt, w, h)
    vi = ng.video_info(ng.pointer_of(caps, "Gst.Caps"))
    assert vi is not None and vi.size > 0
    return Gst.Buffer.new_allocate(None, vi.size, None), caps


def test_sample_is_a_frame_of_planes_at_their_true_offsets_and_strides():
    p, (sample,) = pull_samples(videotest(), 1)
    f = interop.wrap(sample)
    assert isinstance(f, GstFrame) and f.memory_type is MemoryType.GST and f.native is sample
    assert (f.format, f.width, f.height, len(f)) == (FrameFormat.NV12, 854, 480, 2)
    vi = ng.video_info(ng.pointer_of(sample.get_caps(), "Gst.Caps"))
    assert vi is not None and vi.strides[0] >= 854
    y, uv = f[0], f[1]
    assert isinstance(y, GstTensor) and y.info == TensorInfo((480, 854), np.uint8, (vi.strides[0], 1))
    assert uv.info == TensorInfo((240, 427, 2), np.uint8, (vi.strides[1], 2, 1))
    buf = sample.get_buffer()
    assert y.memory_ptr == uv.memory_ptr == ng.peek_memory(ng.pointer_of(buf, "Gst.Buffer"), 0)
    assert (y.offset, uv.offset) == (vi.offsets[0], vi.offsets[1])
    assert y.handle("gst_memory") == y.memory_ptr and y.handle("offset") == 0
    assert f.pts == buf.pts and f.time_base == Fraction(1, 1_000_000_000)
    assert f.metadata["duration"] == buf.duration and f.metadata["framerate"] == Fraction(30, 1)
    assert f.colorspace is ColorSpace.BT601 and f.color_range is ColorRange.LIMITED  # videotestsrc's SD default
    p.set_state(Gst.State.NULL)


@pytest.mark.parametrize("fmt,want,planes", [("I420", FrameFormat.I420, 3), ("RGB", FrameFormat.RGB, 1),
                                             ("BGRx", FrameFormat.BGRX, 1), ("GRAY8", FrameFormat.GRAY8, 1)])
def test_formats(fmt: str, want: FrameFormat, planes: int):
    p, (sample,) = pull_samples(videotest(fmt, 322, 242), 1)
    f = interop.wrap(sample)
    assert f.format is want and len(f) == planes and (f.width, f.height) == (322, 242)
    assert f[0].info.shape[:2] == (242, 322)
    p.set_state(Gst.State.NULL)


def test_decoded_clip_is_i420_with_its_caps_layout():
    p, (sample,) = pull_samples(decoded_clip(), 1)
    f = interop.wrap(sample)
    assert f.format is FrameFormat.I420 and (f.width, f.height) == (640, 480)
    assert [t.info.shape for t in f] == [(480, 640), (240, 320), (240, 320)]
    p.set_state(Gst.State.NULL)


def test_video_meta_gives_the_producers_padded_layout():
    # a producer's padded NV12: 896-byte rows, UV after 480 rows, described only by a GstVideoMeta
    buf = Gst.Buffer.new_allocate(None, 896 * 720, None)
    ng.add_video_meta(ng.pointer_of(buf, "Gst.Buffer"), "NV12", 854, 480, [0, 896 * 480], [896, 896])
    f = interop.wrap(buf)  # no caps needed: the meta says it all
    assert f.format is FrameFormat.NV12 and f[0].info.strides == (896, 1) and f[1].info.strides == (896, 2, 1)
    assert f[1].offset == 896 * 480
    # with caps too: the meta wins for offsets and strides (the caps' GstVideoInfo would say 856)
    g = wrap_buffer(buf, caps_for(FrameFormat.NV12, 854, 480))
    assert g[0].info.strides == (896, 1)
    with pytest.raises(InvalidTensorError, match="contradicts"):
        wrap_buffer(buf, caps_for(FrameFormat.NV12, 640, 480))


def test_buffer_without_caps_or_meta_says_what_to_give():
    buf = Gst.Buffer.new_allocate(None, 100, None)
    with pytest.raises(InvalidTensorError, match="caps"):
        interop.wrap(buf)
    t = interop.wrap(buf, info=TensorInfo((10, 10), np.uint8))  # a buffer of one memory, described by info=
    assert isinstance(t, GstTensor) and t.info.shape == (10, 10)


def test_memory_is_a_tensor_of_bytes():
    buf = Gst.Buffer.new_allocate(None, 64, None)
    mem = buf.peek_memory(0)
    t = interop.wrap(mem)
    assert isinstance(t, GstTensor) and t.native is mem and t.info == TensorInfo((64,), np.uint8)
    assert t.buffer is None and t.memory_index == -1
    assert t.memory_ptr == ng.pointer_of(mem, "Gst.Memory")
    with pytest.raises(InvalidTensorError, match="does not fit"):
        interop.wrap(mem, info=TensorInfo((65,), np.uint8))


def test_compressed_caps_are_refused_with_advice():
    p, (sample,) = pull_samples(f"filesrc location={CLIP} ! qtdemux ! h264parse ! appsink name=sink sync=false", 1)
    with pytest.raises(UnsupportedFormatError, match="not raw video; decode first"):
        interop.wrap(sample)
    with pytest.raises(UnsupportedFormatError):
        interop.map(sample, MemoryType.CPU)
    p.set_state(Gst.State.NULL)


def test_unknown_format_is_refused_with_the_supported_list():
    p, (sample,) = pull_samples(videotest("YUY2", 64, 48), 1)
    with pytest.raises(UnsupportedFormatError, match="YUY2 is not supported.*NV12"):
        interop.wrap(sample)
    p.set_state(Gst.State.NULL)


def test_device_memory_caps_are_refused():
    buf = Gst.Buffer.new_allocate(None, 64 * 48 * 3 // 2, None)
    caps = Gst.Caps.from_string("video/x-raw(memory:NVMM),format=NV12,width=64,height=48")
    with pytest.raises(UnsupportedFormatError, match="memory:NVMM"):
        interop.wrap(Gst.Sample.new(buf, caps, None, None))


def test_plane_across_two_memories_is_refused():
    # a 16x16 GRAY8 plane whose first 100 bytes are in one memory and the rest in another: joining is a copy
    buf = Gst.Buffer.new_allocate(None, 100, None)
    buf.append_memory(Gst.Buffer.new_allocate(None, 156, None).get_all_memory())
    assert ng.n_memory(ng.pointer_of(buf, "Gst.Buffer")) == 2
    with pytest.raises(InvalidTensorError, match="spans 2 GstMemory"):
        wrap_buffer(buf, caps_for(FrameFormat.GRAY8, 16, 16))


def test_planes_in_separate_memories_each_get_their_own():
    # I420 as three memories (as some producers make it): each plane is its own memory, offset 0 in it
    y, u, v = (Gst.Buffer.new_allocate(None, n, None) for n in (64 * 48, 32 * 24, 32 * 24))
    buf = Gst.Buffer.new()
    for b in (y, u, v):
        buf.append_memory(b.get_all_memory())
    f = wrap_buffer(buf, caps_for(FrameFormat.I420, 64, 48))
    assert [t.memory_index for t in f] == [0, 1, 2] and [t.offset for t in f] == [0, 0, 0]


def test_wrong_arguments_are_typed():
    p, (sample,) = pull_samples(videotest(n=1), 1)
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(sample, format=FrameFormat.NV12)
    with pytest.raises(UnsupportedTypeError):
        wrap_buffer(sample)
    p.set_state(Gst.State.NULL)


def test_doctor_row_names_the_version_and_plugins():
    from interop.tensors.gst import _probe

    (row,) = _probe()
    assert row.available, row.reason
    assert Gst.version_string() in (row.version or "") and "libav" in row.details["plugins"]


def test_import_interop_does_not_import_gi():
    code = "import sys, interop; interop.backends.load_all(); print('gi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
