"""CPU -> GST: numpy planes wrapped as a Gst.Buffer without a copy (the memory's data pointer is the array's),
GstVideoMeta for padded pitches, write-through both ways, read-only arrays give read-only memory, the arrays live
until GStreamer frees the buffer, and the buffer goes through a real pipeline untouched."""

from __future__ import annotations

import gc
from fractions import Fraction

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, InvalidTensorError, MemoryType
from interop.native import gst as ng
from interop.tensors.gst import GstFrame, GstTensor, gst

Gst = gst()  # through interop: it loads GStreamer after ordering the native libraries



def padded_nv12(w: int = 854, h: int = 480, pitch: int = 896) -> tuple[np.ndarray, interop.Frame]:
    a = np.zeros((h * 3 // 2, pitch), np.uint8)
    y = a[:h, :w]
    uv = a[h:].reshape(h // 2, pitch // 2, 2)[:, : w // 2 + w % 2]
    return a, interop.Frame([interop.wrap(y), interop.wrap(uv)], FrameFormat.NV12)


def test_planes_become_memories_at_the_arrays_addresses_with_a_video_meta():
    a, f = padded_nv12()
    with interop.copy_meter() as meter:
        g = interop.map(f, MemoryType.GST)
    assert meter.copies == 0
    assert isinstance(g, GstFrame) and g.memory_type is MemoryType.GST and g.parent is f
    assert g.caps.to_string().startswith("video/x-raw, format=(string)NV12, width=(int)854, height=(int)480")
    buf = ng.pointer_of(g.buffer, "Gst.Buffer")
    assert ng.n_memory(buf) == 2
    meta = ng.video_meta(buf)
    assert meta is not None and meta.strides[:2] == (896, 896) and meta.format == "NV12"
    for i, arr in enumerate((a[:480], a[480:])):
        m = ng.MemoryMapping(ng.peek_memory(buf, i), False)
        assert m.address == arr.ctypes.data
        m.close()
    assert isinstance(g[0], GstTensor) and g[0].info.strides == (896, 1) and g[1].info.strides == (896, 2, 1)


def test_write_through_both_ways():
    a, f = padded_nv12(64, 48, 128)
    g = interop.map(f, MemoryType.GST, mode=AccessMode.WRITE)  # writable memory: a READ mapping is read-only
    a[1, 2] = 9  # numpy -> GStreamer
    assert g.buffer.extract_dup(128 + 2, 1) == bytes([9])
    with interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE) as c:  # GStreamer mapping -> numpy
        np.asarray(c[1])[3, 4, 1] = 55
        assert np.asarray(c[0]).ctypes.data == a.ctypes.data
    assert a[48 + 3, 4 * 2 + 1] == 55


def test_arrays_live_until_gstreamer_frees_the_buffer():
    gc.collect()
    start = ng.live_wrapped()
    a, f = padded_nv12(64, 48, 64)
    g = interop.map(f, MemoryType.GST)
    buffer = g.buffer
    assert ng.live_wrapped() == start + 2
    del a, f, g
    gc.collect()
    assert ng.live_wrapped() == start + 2  # the Gst.Buffer still holds the memories, so the arrays stay
    assert buffer.extract_dup(0, 1) == b"\x00"
    del buffer
    gc.collect()
    assert ng.live_wrapped() == start


def test_read_only_arrays_give_read_only_memory():
    a = np.zeros((16, 16), np.uint8)
    a.flags.writeable = False
    src = interop.Frame([interop.wrap(a)], FrameFormat.GRAY8)
    g = interop.map(src, MemoryType.GST)
    assert interop.map(g, MemoryType.CPU)[0].data_ptr == a.ctypes.data
    assert ng.memory_flags(ng.peek_memory(ng.pointer_of(g.buffer, "Gst.Buffer"), 0)) & ng.GST_MEMORY_FLAG_READONLY
    with pytest.raises(InvalidTensorError, match="read-only"):
        interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE)
    with pytest.raises(InvalidTensorError, match="read-only"):
        interop.map(src, MemoryType.GST, mode=AccessMode.WRITE)  # nor mapped for WRITE in the first place


def test_tensor_maps_to_one_memory():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = interop.map(interop.wrap(a), MemoryType.GST)
    assert isinstance(t, GstTensor) and t.info == interop.wrap(a).info
    assert t.buffer.extract_dup(0, 4) == a.tobytes()[:4]
    _refused_then_copied(interop.wrap(a[:, ::2]), "not one contiguous block")


def test_columns_not_contiguous_are_refused():
    a = np.arange(48 * 64 * 3, dtype=np.uint32).astype(np.uint8).reshape(48, 64, 3)
    _refused_then_copied(interop.Frame([interop.wrap(a[:, ::2])], FrameFormat.RGB), "no contiguous rows")


def _refused_then_copied(src, why):
    # cpu_to_gst cannot describe such planes: it says so before routing picks it (input_cost), so interop.map
    # takes a route that copies, refused without allow_copy and counted with it
    from interop.errors import CopyRequiredError, WrongMemoryError
    from interop.mappers.cpu_to_gst import CPUToGst

    with pytest.raises(WrongMemoryError, match=why):
        CPUToGst().cost(src)
    with pytest.raises(WrongMemoryError, match=why):
        CPUToGst().map(src)
    with pytest.raises(CopyRequiredError):
        interop.map(src, MemoryType.GST)
    with interop.copy_meter() as meter:
        g = interop.map(src, MemoryType.GST, allow_copy=True)
    assert meter.copies >= 1 and g.memory_type is MemoryType.GST
    want = np.asarray(src[0] if isinstance(src, interop.Frame) else src)
    with interop.map(g, MemoryType.CPU) as c:
        np.testing.assert_array_equal(np.asarray(c[0] if isinstance(c, interop.Frame) else c), want)


def test_buffer_goes_through_a_pipeline_without_a_copy():
    a, f = padded_nv12(64, 48, 128)
    a[:] = 7
    f.pts, f.time_base = 3, Fraction(1, 30)
    g = interop.map(f, MemoryType.GST)
    assert g.buffer.pts == 100_000_000
    p = Gst.parse_launch("appsrc name=src format=time ! queue ! appsink name=sink sync=false")
    src, sink = p.get_by_name("src"), p.get_by_name("sink")
    src.set_property("caps", g.caps)
    p.set_state(Gst.State.PLAYING)
    assert src.emit("push-buffer", g.buffer) == Gst.FlowReturn.OK
    src.emit("end-of-stream")
    sample = sink.emit("try-pull-sample", 5 * Gst.SECOND)
    assert sample is not None
    out = interop.map(sample, MemoryType.CPU)
    assert out[0].data_ptr == a.ctypes.data and out[0].info.strides == (128, 1)  # the same pages, the same layout
    assert np.asarray(out[1])[0, 0, 0] == 7
    p.set_state(Gst.State.NULL)


@pytest.mark.parametrize("kind", ["frame", "tensor"])
def test_read_mapping_of_a_writable_array_is_read_only_memory(kind):
    # READ outputs are read-only: neither interop nor GStreamer may write through them into the caller's array
    a = np.zeros((16, 16), np.uint8)
    src = interop.Frame([interop.wrap(a)], FrameFormat.GRAY8) if kind == "frame" else interop.wrap(a)
    g = interop.map(src, MemoryType.GST)
    t = g[0] if kind == "frame" else g
    assert not t.writable
    mem = ng.peek_memory(ng.pointer_of(t.buffer, "Gst.Buffer"), 0)
    assert ng.memory_flags(mem) & ng.GST_MEMORY_FLAG_READONLY
    with pytest.raises(InvalidTensorError, match="refused to map this memory for writing"):
        ng.MemoryMapping(mem, True)  # GStreamer itself refuses to write into it
    for allow_copy in (False, True):
        with pytest.raises(InvalidTensorError, match="read-only"):
            interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=allow_copy)
    w = interop.map(src, MemoryType.GST, mode=AccessMode.WRITE)  # a WRITE mapping is writable memory
    with interop.map(w, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0] if kind == "frame" else c)[2, 3] = 7
    assert a[2, 3] == 7
