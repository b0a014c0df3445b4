"""Interpreter exit while daemon threads are inside DMA calls: the process exits with status 0, never a signal.

At exit, weakref.finalize runs every finaliser still pending. Those that unmap a buffer or close its fd would pull
memory from under a daemon thread that is still reading a view or waiting in ``FramePool.acquire()`` (and is woken
by a frame returned at exit); the OS reclaims mappings and fds when the process ends, so the library leaves them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """
import threading, time
import numpy as np
import interop
from interop import AccessMode, FrameFormat, MemoryType, TensorInfo
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, DMATensor, FramePool, frame_from_fds
started = threading.Barrier(2, timeout=10)

def spin(fn):
    def run():
        started.wait()
        while True:
            fn()
    threading.Thread(target=run, daemon=True).start()
"""

SCENARIOS = {
    # a daemon thread reads a numpy view of a pool frame mapped to the CPU
    "read_view": """
pool = FramePool(FrameFormat.NV12, 640, 480, 2)
f = pool.acquire()
c = interop.map(f, MemoryType.CPU)
y = np.asarray(c[0])
spin(lambda: int(y.sum()))
""",
    # a daemon thread writes through a WRITE mapping
    "write_view": """
pool = FramePool(FrameFormat.NV12, 640, 480, 1)
f = pool.acquire()
c = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE)
y = np.asarray(c[0])
spin(lambda: y.fill(7))
""",
    # a daemon thread waits in acquire() on an exhausted pool; the frames are held by the main module
    "acquire_exhausted": """
pool = FramePool(FrameFormat.NV12, 640, 480, 2)
held = [pool.acquire(), pool.acquire()]
views = [interop.map(f, MemoryType.CPU) for f in held]
def take():
    g = pool.acquire()
    with interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0]).fill(3)
    g.release()
spin(take)
""",
    # a daemon thread cycles acquire / map / fill / commit / release on a pool with free buffers
    "pool_cycle": """
pool = FramePool(FrameFormat.NV12, 320, 240, 2)
keep = pool.acquire()
def cycle():
    g = pool.acquire(timeout=5)
    with interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0]).fill(1)
    pool.commit(g)
    g.release()
spin(cycle)
""",
    # a daemon thread reads a view of a caller's fd wrapped with from_fd
    "read_from_fd": """
fd = nd.memfd_alloc(1 << 20)
t = DMATensor.from_fd(fd, info=TensorInfo((1024, 1024), np.uint8))
c = interop.map(t, MemoryType.CPU)
a = np.asarray(c)
spin(lambda: int(a.sum()))
""",
    # a daemon thread maps, reads and drops views of a frame over a caller's fd (mappings come and go)
    "map_unmap": """
fd = nd.memfd_alloc(1 << 20)
f = frame_from_fds(fd, FrameFormat.NV12, 512, 512)
def once():
    with interop.map(f, MemoryType.CPU) as c:
        int(np.asarray(c[0]).sum())
spin(once)
""",
    # a daemon thread allocates frames and reads them
    "alloc_frames": """
ctx = DMAContext()
def once():
    g = ctx.alloc_frame(FrameFormat.NV12, 256, 256)
    with interop.map(g, MemoryType.CPU) as c:
        int(np.asarray(c[0]).sum())
spin(once)
""",
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_exit_while_a_daemon_thread_uses_dma_memory(name):
    code = textwrap.dedent(_PRELUDE) + SCENARIOS[name] + "started.wait()\ntime.sleep(0.05)\n"
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (
            f"{name}: exit status {p.returncode}"
            f"{' (' + signal.Signals(-p.returncode).name + ')' if p.returncode < 0 else ''}\n{p.stderr[-2000:]}")
