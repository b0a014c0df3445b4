"""DMA -> GST: DMA frames (and FramePool frames) become a Gst.Buffer of fd memory over a dup of the DMA fd (same
file), with a GstVideoMeta for plane offsets and pitches; write-through both ways; the pool slot comes back only
when GStreamer frees the buffer; the dup is closed then; a real pipeline consumes the pool's frames."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

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
    g = interop.map(f, MemoryType.GST, mode=AccessMode.WRITE)  # writable memory: a READ mapping is read-only
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
        gc.collect()  # garbage of earlier tests holding fds goes now, not inside the count below
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


_EXIT_PROBE = """
import atexit, os, sys
state = {}
def check():  # registered before interop is imported: runs after interop's exit handlers and pending finalisers
    os.fstat(state["fd"])  # GStreamer's dup of the DMA fd is still open (OSError, printed, if it was closed)
    if ng.live_mappings() != state["mappings"]:
        print("a GST -> CPU mapping was unmapped at exit while a thread read it", file=sys.stderr, flush=True)
atexit.register(check)
import threading
import numpy as np
import pytest
import interop
from interop import FrameFormat, MemoryType
from interop.native import gst as ng
f = interop.Context.default(MemoryType.DMA).alloc_frame(FrameFormat.NV12, 64, 48)
g = interop.map(f, MemoryType.GST)  # fd memory over a dup, held by GStreamer until the process ends
a = np.zeros((48, 64), np.uint8)
h = interop.map(interop.Frame([interop.wrap(a)], FrameFormat.GRAY8), MemoryType.GST)  # host memory wrapped
view = interop.map(g, MemoryType.CPU)  # a live GST -> CPU mapping of the fd memory
state["fd"] = ng.fd_of_memory(ng.peek_memory(ng.pointer_of(g.buffer, "Gst.Buffer"), 0))
state["mappings"] = ng.live_mappings()
KEEP = [f, g, h, view]
cycle = [KEEP]
cycle.append(cycle)  # only the collector at exit frees these
y = np.asarray(view[0])
def read():
    while True:
        int(y.sum())
threading.Thread(target=read, daemon=True).start()  # reading the mapping while the interpreter exits
print("LIVE", flush=True)
"""


def test_interpreter_exit_with_gst_memory_alive_is_clean():
    # exit rule: clean-up at exit never frees what another thread (or GStreamer) may still touch, and prints nothing
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _EXIT_PROBE], capture_output=True, text=True, timeout=120,
                             cwd=root, env={**os.environ, "PYTHONPATH": root})
        assert out.returncode == 0 and "LIVE" in out.stdout, out.stderr[-2000:]
        noise = [ln for ln in out.stderr.splitlines() if ln.strip() and "Warning" not in ln]
        assert not noise, noise[:10]


def test_read_mapping_is_read_only_memory():
    from interop import InvalidTensorError

    f = interop.Context.default(MemoryType.DMA).alloc_frame(FrameFormat.GRAY8, 64, 48)
    g = interop.map(f, MemoryType.GST)
    assert not g[0].writable
    mem = ng.peek_memory(ng.pointer_of(g.buffer, "Gst.Buffer"), 0)
    assert ng.memory_flags(mem) & ng.GST_MEMORY_FLAG_READONLY
    with pytest.raises(InvalidTensorError, match="refused to map this memory for writing"):
        ng.MemoryMapping(mem, True)  # GStreamer itself refuses to write into it
    for allow_copy in (False, True):
        with pytest.raises(InvalidTensorError, match="read-only"):
            interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=allow_copy)
    with interop.map(f, MemoryType.CPU) as r:
        assert not np.asarray(r[0]).any()
