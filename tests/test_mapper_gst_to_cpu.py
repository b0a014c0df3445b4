"""GST -> CPU: numpy views over gst_memory_map'd memory (pointer == the mapped GstMemory's data), write-through,
READ views read-only, shared buffers refused for WRITE, lifetimes past the pipeline, no mapping leak."""

from __future__ import annotations

import dataclasses
import gc
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, CopyRequiredError, FrameFormat, InteropError, MemoryType
from interop.mapper import Cost
from interop.mappers.gst_to_cpu import GstToCPU
from interop.native import gst as ng
from interop.tensors.gst import NotWritableError, gst, wrap_buffer
from tests.support.requirements import need_module
from tests.test_tensor_gst import decoded_clip, own_buffer, pull_samples, videotest

Gst = gst()  # through interop: it loads GStreamer after ordering the native libraries


def test_views_are_the_mapped_memory_itself():
    p, (sample,) = pull_samples(videotest(), 1)
    buf = sample.get_buffer()
    mem = ng.peek_memory(ng.pointer_of(buf, "Gst.Buffer"), 0)
    c = interop.map(sample, MemoryType.CPU)
    assert c.memory_type is MemoryType.CPU and c.format is FrameFormat.NV12
    m = ng.MemoryMapping(mem, False)  # an independent map of the same GstMemory: same pages
    y, uv = np.asarray(c[0]), np.asarray(c[1])
    assert y.ctypes.data == m.address == c[0].data_ptr
    assert uv.ctypes.data == m.address + c.parent[1].offset
    assert y.strides == c.parent[0].info.strides and not y.flags.writeable and not uv.flags.writeable
    # the bytes are the buffer's (PyGObject's copying map as the witness)
    ok, info = buf.map(Gst.MapFlags.READ)
    assert ok
    raw = np.frombuffer(bytes(info.data), np.uint8)
    buf.unmap(info)
    assert np.array_equal(y[1], raw[y.strides[0]:y.strides[0] + 854])
    m.close()
    p.set_state(Gst.State.NULL)


def test_write_through_both_ways_on_a_buffer_we_own():
    buf, caps = own_buffer(FrameFormat.NV12, 64, 48)
    f = wrap_buffer(buf, caps)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        y = np.asarray(c[0])
        assert y.flags.writeable
        y[3, 5] = 201
        np.asarray(c[1])[2, 1, 1] = 202
    assert buf.extract_dup(3 * 64 + 5, 1) == bytes([201])
    assert buf.extract_dup(64 * 48 + 2 * 64 + 1 * 2 + 1, 1) == bytes([202])
    # a live view keeps the write mapping and a reference on the buffer: GStreamer sees it as shared meanwhile
    assert not ng.is_writable(ng.pointer_of(buf, "Gst.Buffer"))
    del y
    gc.collect()
    assert ng.is_writable(ng.pointer_of(buf, "Gst.Buffer"))
    buf.fill(0, bytes([77]))  # GStreamer's own write, seen by a new mapping
    with interop.map(f, MemoryType.CPU) as r:
        assert np.asarray(r[0])[0, 0] == 77 and np.asarray(r[0])[3, 5] == 201


def test_read_write_tensor_of_a_memory():
    buf = Gst.Buffer.new_allocate(None, 16, None)
    t = interop.wrap(buf.peek_memory(0))
    with interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE) as c:
        np.asarray(c)[:] = np.arange(16, dtype=np.uint8)
    assert buf.extract_dup(0, 16) == bytes(range(16))


def test_write_of_a_shared_buffer_is_refused_then_copied_only_when_allowed():
    p, (sample,) = pull_samples(videotest(), 1)
    # the mapper's own refusal: NotWritableError, a CopyRequiredError and a BufferError
    with pytest.raises(NotWritableError, match="allow_copy=True") as e:
        GstToCPU().map(interop.wrap(sample), AccessMode.WRITE)
    assert isinstance(e.value, CopyRequiredError) and isinstance(e.value, BufferError)
    assert isinstance(e.value, InteropError)
    # routing knows the step copies for this input (input_cost) and refuses the route before mapping
    assert interop.route(sample, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True).cost(
        sample, AccessMode.WRITE) is Cost.COPY
    assert interop.route(sample, MemoryType.CPU).cost(sample) is Cost.ZERO_COPY
    with pytest.raises(CopyRequiredError, match="allow_copy=True") as e2:
        interop.route(sample, MemoryType.CPU, mode=AccessMode.WRITE)
    assert e2.value.step is GstToCPU
    with pytest.raises(CopyRequiredError, match="allow_copy=True") as e2:
        interop.map(sample, MemoryType.CPU, mode=AccessMode.WRITE)
    assert e2.value.step is GstToCPU
    before = bytes(np.asarray(interop.map(sample, MemoryType.CPU)[0])[0])
    with interop.copy_meter() as meter:
        c = interop.map(sample, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)
    assert meter.copies == 1 and meter.bytes == 854 * 480 + 427 * 240 * 2
    np.asarray(c[0])[0, :] = 1  # into the copy
    assert c.parent.native is not sample.get_buffer()
    assert bytes(np.asarray(interop.map(sample, MemoryType.CPU)[0])[0]) == before  # the sample is untouched
    p.set_state(Gst.State.NULL)


def test_read_only_memory_is_refused_for_write():
    buf, caps = own_buffer(FrameFormat.GRAY8, 8, 8)
    other = Gst.Buffer.new()
    other.append_memory(buf.peek_memory(0))  # now the memory is shared by two buffers
    with pytest.raises(CopyRequiredError):  # routing refuses the copying step before mapping
        interop.map(wrap_buffer(buf, caps), MemoryType.CPU, mode=AccessMode.WRITE)
    with pytest.raises(NotWritableError):
        GstToCPU().map(wrap_buffer(buf, caps), AccessMode.WRITE)
    with pytest.raises(NotWritableError):
        GstToCPU().map(buf.peek_memory(0), AccessMode.WRITE)


def test_view_outlives_sample_buffer_and_pipeline():
    p, (sample,) = pull_samples(videotest(n=1), 1)
    c = interop.map(sample, MemoryType.CPU)
    y = np.asarray(c[0])
    want = y.copy()
    assert ng.live_mappings() >= 1
    p.set_state(Gst.State.NULL)
    del sample, c, p
    gc.collect()
    assert np.array_equal(y, want)  # still mapped: the view holds the mapping, which holds buffer and memory
    start = ng.live_mappings()
    del y
    gc.collect()
    assert ng.live_mappings() == start - 1


def test_a_held_view_is_not_overwritten_by_later_frames():
    # videotestsrc's pool has few buffers: without the lock a held frame's memory would carry a later frame
    p = Gst.parse_launch("videotestsrc num-buffers=40 pattern=ball ! video/x-raw,format=GRAY8,width=64,height=48 "
                         "! appsink name=sink sync=false max-buffers=1")
    sink = p.get_by_name("sink")
    p.set_state(Gst.State.PLAYING)
    held = np.asarray(interop.map(sink.emit("try-pull-sample", Gst.SECOND), MemoryType.CPU)[0])
    want = held.copy()
    for _ in range(30):
        s = sink.emit("try-pull-sample", Gst.SECOND)
        assert s is not None
        del s
    assert np.array_equal(held, want)
    p.set_state(Gst.State.NULL)


def test_decoded_clip_maps_zero_copy_and_matches_pyav():
    av = need_module("av")  # PyAV is tier A too (the ffmpeg extra): present wherever these tests run
    p, samples = pull_samples(decoded_clip(), 3)
    with interop.copy_meter() as meter:
        frames = [interop.map(s, MemoryType.CPU) for s in samples]
    assert meter.copies == 0
    from tests.test_tensor_gst import CLIP

    with av.open(str(CLIP)) as c:
        ref = [vf.to_ndarray(format="yuv420p") for _, vf in zip(range(3), c.decode(video=0))]
    for f, r in zip(frames, ref):
        assert np.array_equal(np.asarray(f[0]), r[:480])
    p.set_state(Gst.State.NULL)


def test_no_mapping_or_fd_leak_over_many_buffers():
    n = 300
    p = Gst.parse_launch(f"videotestsrc num-buffers={n} ! video/x-raw,format=I420,width=64,height=48 ! "
                         f"appsink name=sink sync=false max-buffers=4")
    sink = p.get_by_name("sink")
    p.set_state(Gst.State.PLAYING)
    gc.collect()
    start, fds = ng.live_mappings(), len(os.listdir("/proc/self/fd"))
    got = 0
    while True:
        s = sink.emit("try-pull-sample", Gst.SECOND)
        if s is None:
            break
        with interop.map(s, MemoryType.CPU) as c:
            assert np.asarray(c[2]).shape == (24, 32)
        got += 1
    assert got == n
    gc.collect()
    assert ng.live_mappings() == start
    assert len(os.listdir("/proc/self/fd")) <= fds + 2
    p.set_state(Gst.State.NULL)


# ---- the one-step path (interop.map(sample, CPU) once per frame) ----------------------------------------------


def _one_step(sample):
    interop.map(sample, MemoryType.CPU).release()  # the first map goes the general way and learns the one-step route
    return interop.map(sample, MemoryType.CPU)


def test_one_step_map_wraps_nothing_per_frame(monkeypatch):
    # the per-frame cost: no GstFrame/GstTensor is built (PyGObject calls, checks) unless .parent is asked for
    import interop.tensors.gst as tg

    p, (sample,) = pull_samples(videotest(), 1)
    interop.map(sample, MemoryType.CPU).release()
    calls = []
    monkeypatch.setattr(tg, "wrap_buffer", lambda *a, **k: calls.append(a))
    with interop.copy_meter() as meter:
        for _ in range(5):
            with interop.map(sample, MemoryType.CPU) as c:
                for t in c.tensors:
                    np.asarray(t)
    assert calls == [] and meter.copies == 0
    p.set_state(Gst.State.NULL)


def test_one_step_map_equals_the_general_path():
    p, (sample,) = pull_samples(videotest(), 1)
    c = _one_step(sample)
    general = GstToCPU().map(interop.wrap(sample), AccessMode.READ)
    assert type(c) is not type(general)  # the one-step frame
    assert (c.format, c.width, c.height, c.pts, c.time_base, c.colorspace, c.color_range) == \
        (general.format, general.width, general.height, general.pts, general.time_base, general.colorspace,
         general.color_range)
    assert c.metadata == general.metadata and c.metadata["framerate"] == 30
    for a, b in zip(c.tensors, general.tensors):
        assert a.info == b.info and a.data_ptr == b.data_ptr and not np.asarray(a).flags.writeable
        assert np.asarray(a).ctypes.data == a.data_ptr and a.native.ctypes.data == a.data_ptr
        assert a.parent.offset == b.parent.offset and a.parent.memory_ptr == b.parent.memory_ptr
    assert c.parent.native is sample and c.buffer.pts == sample.get_buffer().pts
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(c[0])[0, 0] = 1
    p.set_state(Gst.State.NULL)


def test_one_step_release_unmaps_unless_a_view_lives():
    p, (sample,) = pull_samples(videotest(), 1)
    interop.map(sample, MemoryType.CPU).release()
    gc.collect()
    start = ng.live_mappings()
    c = interop.map(sample, MemoryType.CPU)
    y, uv_native = np.asarray(c[0]), c[1].native
    want_y, want_uv = y.copy(), uv_native.copy()
    assert ng.live_mappings() == start + 1
    c.release()
    with pytest.raises(InteropError):
        np.asarray(c[0])
    assert ng.live_mappings() == start + 1  # the views hold it
    p.set_state(Gst.State.NULL)
    del sample, p
    gc.collect()
    assert np.array_equal(y, want_y) and np.array_equal(uv_native, want_uv)
    del y
    gc.collect()
    assert ng.live_mappings() == start + 1  # the .native array holds the mapping itself
    del uv_native
    gc.collect()
    assert ng.live_mappings() == start
    assert len(c) == 2 and "released" in repr(c)  # the released frame, kept around, holds no mapping


def test_released_planes_refuse_use():
    p, (sample,) = pull_samples(videotest(), 1)
    c = _one_step(sample)
    t = c[0]
    t.release()
    with pytest.raises(InteropError):
        np.asarray(t)
    with pytest.raises(InteropError):
        t.data_ptr  # noqa: B018
    p.set_state(Gst.State.NULL)


def test_too_many_live_mappings_of_one_memory_are_refused_not_corrupted():
    # GStreamer counts a memory's locks in 8 bits without an overflow check: past 255 live maps its state is corrupt
    from interop.errors import ResourceError

    p, (sample,) = pull_samples(videotest(), 1)
    gc.collect()
    start = ng.live_mappings()
    held = []
    with pytest.raises(ResourceError, match="release"):
        for _ in range(400):
            held.append(interop.map(sample, MemoryType.CPU))
    assert 150 < len(held) < 256
    mem = ng.peek_memory(ng.pointer_of(sample.get_buffer(), "Gst.Buffer"), 0)
    for f in held:
        f.release()
    del held, f
    gc.collect()
    assert ng.live_mappings() == start
    assert ng.GstMemoryHead.from_address(mem).lockstate & ng.LOCK_COUNT_MASK <= 1 << 8  # the buffer's own, at most
    with interop.map(sample, MemoryType.CPU) as c:  # and it maps again
        assert np.asarray(c[0]).shape == (480, 854)
    p.set_state(Gst.State.NULL)


def _crop_then_video_meta(buf, fmt, w, h, offsets, strides):
    """Give ``buf`` a GstVideoCropMeta, then a GstVideoMeta: the one-step path must find the video meta past it."""
    import ctypes

    vlib = ctypes.CDLL("libgstvideo-1.0.so.0")
    vlib.gst_video_crop_meta_get_info.restype = ctypes.c_void_p
    glib = ctypes.CDLL("libgstreamer-1.0.so.0")
    glib.gst_buffer_add_meta.restype = ctypes.c_void_p
    glib.gst_buffer_add_meta.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert glib.gst_buffer_add_meta(ng.pointer_of(buf, "Gst.Buffer"), vlib.gst_video_crop_meta_get_info(), None)
    ng.add_video_meta(ng.pointer_of(buf, "Gst.Buffer"), fmt, w, h, offsets, strides)


def test_one_step_reads_the_video_meta_past_other_metas_and_points_into_the_memory():
    # the one-step path reads the buffer's memory and meta list from GStreamer's structs: it must find the same
    # video meta as gst_buffer_get_meta (a crop meta comes first here) and map the same memory
    buf = Gst.Buffer.new_allocate(None, 80 * 72, None)
    _crop_then_video_meta(buf, "NV12", 64, 48, [0, 80 * 48], [80, 80])
    b = ng.pointer_of(buf, "Gst.Buffer")
    head = ng.GstBufferHead.from_address(b)
    assert ng.find_meta(head.item, ng.video_meta_api()) == ng.video_meta_ptr(b) != 0
    assert (head.len, head.mem0) == (ng.n_memory(b), ng.peek_memory(b, 0))
    c = _one_step(buf)
    assert type(c).__name__ == "SampledFrame"  # the one-step frame
    m = ng.MemoryMapping(ng.peek_memory(b, 0), False)
    assert c[0].strides == (80, 1) and c[1].strides == (80, 2, 1)
    assert np.asarray(c[0]).ctypes.data == m.address and np.asarray(c[1]).ctypes.data == m.address + 80 * 48
    c.release()
    m.close()


def test_one_step_views_of_successive_buffers_point_into_each_ones_memory():
    # CPU views share per-address layout entries: each frame's views must still be its own buffer's memory
    p, samples = pull_samples(videotest("I420", 64, 48, n=6), 6)
    frames = [_one_step(s) for s in samples]
    for s, f in zip(samples, frames):
        m = ng.MemoryMapping(ng.peek_memory(ng.pointer_of(s.get_buffer(), "Gst.Buffer"), 0), False)
        want = [m.address + t.offset for t in f.parent.tensors]
        assert [np.asarray(t).ctypes.data for t in f.tensors] == [t.data_ptr for t in f.tensors] == want
        m.close()
    for f in frames:
        f.release()
    p.set_state(Gst.State.NULL)


def test_one_step_without_struct_reads_gives_the_same_frame(monkeypatch):
    # where GStreamer's struct layout is not the one interop knows, the one-step path calls the getters instead
    import interop.tensors.gst as tg

    p, (sample,) = pull_samples(videotest(), 1)
    want = _one_step(sample)
    tg._fast_init()
    monkeypatch.setattr(tg, "_fast", [dataclasses.replace(tg._fast[0], structs=False)])
    buf = Gst.Buffer.new_allocate(None, 80 * 72, None)
    _crop_then_video_meta(buf, "NV12", 64, 48, [0, 80 * 48], [80, 80])
    for obj, c in ((sample, want), (buf, None)):
        got = _one_step(obj)
        assert type(got).__name__ == "SampledFrame"
        if c is not None:
            assert [t.data_ptr for t in got.tensors] == [t.data_ptr for t in c.tensors]
            assert [t.info for t in got.tensors] == [t.info for t in c.tensors]
        else:
            assert got[1].strides == (80, 2, 1) and got[1].data_ptr == got[0].data_ptr + 80 * 48
        got.release()
    want.release()
    p.set_state(Gst.State.NULL)


def test_struct_layout_check_before_gstreamer_is_initialised_does_not_crash():
    """A program's own check, made before anything initialised GStreamer: it made a buffer with no allocator behind
    it and crashed the process (SIGSEGV). It answers False until then (the getters are used: same answers), and runs
    the real check once GStreamer is up."""
    import subprocess
    import sys

    code = ("import interop.native.gst as ng\n"
            "print(ng.struct_layout_ok())\n"
            "from interop.tensors.gst import gst\n"
            "gst()\n"
            "print(ng.struct_layout_ok())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ["False", "True"]


def test_struct_layout_check_catches_a_wrong_layout(monkeypatch):
    import ctypes

    assert ng.struct_layout_ok()  # GStreamer 1.22 (Debian 12): the layout interop reads

    class Shifted(ctypes.Structure):  # caps where the buffer is
        _fields_ = [("_mini", ctypes.c_byte * 72), ("buffer", ctypes.c_void_p), ("caps", ctypes.c_void_p)]

    monkeypatch.setattr(ng, "GstSampleHead", Shifted)
    assert ng._check_layout() is False


# Padded rows (GStreamer aligns each row to 4 bytes): NV12/I420 at width 50 (pitches 52 and 28); RGB/BGR at width 51
# (153 -> 156 bytes, 52 whole pixels). OpenVINO takes a plane at full pitch when the mapped memory covers the last
# row's padding (the mapping's host_bounds), so these reach it without a copy, by either route: interop.map to
# OPENVINO, and the one-step CPU views (what interop run gst: and InferenceTransform feed Inference) mapped on.
PADDED_ZERO_COPY = [("NV12", 50), ("I420", 50), ("RGB", 51), ("BGR", 51), ("RGB", 55)]


@pytest.mark.parametrize(("fmt", "width"), PADDED_ZERO_COPY)
@pytest.mark.parametrize("via_cpu", [False, True])
def test_padded_sample_reaches_openvino_without_a_copy_and_inside_its_memory(fmt, width, via_cpu):
    pipeline, (sample,) = pull_samples(videotest(fmt, width, 48), 1)
    interop.map(sample, MemoryType.CPU).release()  # the next CPU map takes the one-step path
    with interop.copy_meter() as m:
        cpu = interop.map(sample, MemoryType.CPU)
        o = interop.map(cpu if via_cpu else sample, MemoryType.OPENVINO)
    assert m.copies == 0
    assert all(t.strides[0] > t.info.shape[1] * t.info.dtype.itemsize * (t.info.shape[2] if t.info.ndim == 3 else 1)
               for t in cpu.tensors[:1])  # the rows really are padded
    mem = ng.peek_memory(ng.pointer_of(sample.get_buffer(), "Gst.Buffer"), 0)
    mapping = ng.MemoryMapping(mem, False)  # an independent map of the same GstMemory: same pages
    lo, hi = mapping.host_bounds()
    for c, t in zip(cpu.tensors, o.tensors):
        start = t.native.data.__array_interface__["data"][0]
        assert start == c.data_ptr  # the ov.Tensor is the plane itself, at full pitch
        assert lo <= start and start + t.native.get_byte_size() <= hi  # never past the mapped memory
        rows, pitch = t.native.get_shape()[1], t.native.get_shape()[2]
        assert rows == c.info.shape[0] and pitch * t.native.get_shape()[3] * c.info.dtype.itemsize == c.strides[0]
    del o, cpu
    mapping.close()
    pipeline.set_state(gst().State.NULL)


@pytest.mark.parametrize("fmt", ["RGB", "BGR"])
def test_padded_rgb_whose_pitch_is_not_whole_pixels_copies_only_when_allowed_and_counted(fmt):
    # width 50: 150-byte rows padded to 152, which is not a whole number of 3-byte pixels, so no (1, rows, pitch, 3)
    # tensor covers the plane; OpenVINO shares only C-contiguous memory: a copy, refused unless allowed, counted
    pipeline, (sample,) = pull_samples(videotest(fmt, 50, 48), 1)
    with pytest.raises(CopyRequiredError, match="cpu_to_openvino"):
        interop.map(sample, MemoryType.OPENVINO)
    with interop.copy_meter() as m:
        o = interop.map(sample, MemoryType.OPENVINO, allow_copy=True)
    assert m.copies == 1 and m.bytes == 50 * 48 * 3
    with interop.map(sample, MemoryType.CPU) as cpu:
        assert np.array_equal(o[0].native.data.reshape(48, 50, 3), np.asarray(cpu[0]))
    pipeline.set_state(gst().State.NULL)
