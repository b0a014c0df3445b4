"""DMA -> GST: DMA frames (and FramePool frames) become a Gst.Buffer of fd memory over a dup of the DMA fd (same
file), with a GstVideoMeta for plane offsets and pitches; write-through both ways; the pool slot comes back only
when GStreamer frees the buffer; the dup is closed then; a real pipeline consumes the pool's frames."""

from __future__ import annotations

import gc
import os

import numpy as np

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.native import gst as ng
from interop.tensors.dma import FramePool
from interop.tensors.gst import GstFrame, gst

Gst = gst()


def same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def test_fd_memory_over_the_same_file_with_offsets_and_pitches():
    f = interop.Context.default(MemoryType.DMA).alloc_frame(FrameFormat.NV12, 854, 480)
    with interop.copy_meter() as meter:
        g = interop.map(f, MemoryType.GST)
    assert meter.copies == 0 and isinstance(g, GstFrame)
    buf = ng.pointer_of(g.buffer, "Gst.Buffer")
    assert ng.n_memory(buf) == 1
    gfd = ng.fd_of_memory(ng.peek_memory(buf, 0))
    assert gfd is not None and gfd != f[0].fd and same_file(gfd, f[0].fd)
    meta = ng.video_meta(buf)
    assert meta is not None and meta.offsets[:2] == (f[0].offset, f[1].offset)
    assert meta.strides[:2] == (f[0].pitch, f[1].pitch) == (896, 896)


def test_write_through_both_ways():
    f = interop.Context.default(MemoryType.DMA).alloc_frame(FrameFormat.I420, 64, 48)
    g = interop.map(f, MemoryType.GST)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[2])[3, 4] = 99  # DMA -> GStreamer
    with interop.map(g, MemoryType.CPU) as r:
        assert np.asarray(r[2])[3, 4] == 99
    with interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[1, 1] = 42  # GStreamer mapping -> DMA
    with interop.map(f, MemoryType.CPU) as r2:
        assert np.asarray(r2[0])[1, 1] == 42


def test_pool_slot_returns_when_gstreamer_frees_the_buffer_and_the_dup_is_closed():
    with FramePool(FrameFormat.NV12, 64, 48, count=2) as pool:
        fds = len(os.listdir("/proc/self/fd"))
        f = pool.acquire(timeout=1)
        g = interop.map(f, MemoryType.GST)
        assert len(os.listdir("/proc/self/fd")) == fds + 1  # GStreamer's dup
        f.release()
        del f
        gc.collect()
        assert pool.free_count == 1  # GStreamer still holds the buffer: the slot is not back
        del g
        gc.collect()
        assert pool.free_count == 2
        assert len(os.listdir("/proc/self/fd")) == fds


def test_a_pipeline_consumes_pool_frames():
    from interop.elements import AppSrcSink

    got = []
    with FramePool(FrameFormat.NV12, 64, 48, count=3) as pool:
        sink = AppSrcSink("appsrc ! videoconvert ! video/x-raw,format=GRAY8 ! appsink name=out emit-signals=true "
                          "sync=false")
        out = sink.pipeline.get_by_name("out")
        out.connect("new-sample", lambda s: (got.append(s.emit("pull-sample").get_buffer().extract_dup(0, 1)),
                                             Gst.FlowReturn.OK)[1])
        for i in range(6):
            f = pool.acquire(timeout=5)
            with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
                np.asarray(c[0])[:] = 100 + i
            sink.write(f)
            f.release()
        sink.close()
        gc.collect()
        assert pool.free_count == 3
    assert [b[0] for b in got] == [100 + i for i in range(6)]
