"""GST -> CPU: numpy views over gst_memory_map'd memory (pointer == the mapped GstMemory's data), write-through,
READ views read-only, shared buffers refused for WRITE, lifetimes past the pipeline, no mapping leak."""

from __future__ import annotations

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


@pytest.mark.parametrize("fmt", ["NV12"])
def test_padded_sample_reaches_openvino_without_a_copy_and_inside_its_memory(fmt):
    # Widths whose rows are padded (50 px: pitch 52 or 152): OpenVINO takes the planes at full pitch only when the
    # mapped memory covers the last row's padding, which the mapping's own extent (host_bounds) tells.
    pipeline, (sample,) = pull_samples(videotest(fmt, 50, 48), 1)
    with interop.copy_meter() as m:
        o = interop.map(sample, MemoryType.OPENVINO)
        cpu = interop.map(sample, MemoryType.CPU)
    assert m.copies == 0
    assert cpu[0].strides[0] > 50  # the rows really are padded
    lo = np.asarray(cpu[0]).__array_interface__["data"][0]  # the Y plane starts the buffer's one memory
    hi = lo + sample.get_buffer().get_size()
    for t in o.tensors:
        start = t.native.data.__array_interface__["data"][0]
        assert lo <= start and start + t.native.get_byte_size() <= hi  # never past the mapped memory
    pipeline.set_state(gst().State.NULL)
