"""Exercise the real dma-buf paths (heap, udmabuf) where the kernel has them: python bench/dma_heap_probe.py

Prints what exists, then allocates, syncs, maps and sends a real dma-buf frame to a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, FramePool
from interop.transport import FrameSender, seqpacket_pair

CHILD = """
import socket, sys, numpy as np, interop
from interop.transport import FrameReceiver
rx = FrameReceiver(socket.socket(fileno=int(sys.argv[1])))
f = rx.recv(timeout=10)
with interop.map(f, interop.MemoryType.CPU, mode=interop.AccessMode.READ_WRITE) as c:
    y = np.asarray(c[0]); print("child: is_dmabuf", f[0].is_dmabuf, "saw", int(y[0, 0]), "synced", f[0].buffer.syncable, flush=True)
    y[:] = 0x5A
f.release()
"""


def main() -> int:
    for p in (nd.HEAP_PATH, "/dev/dma_heap", nd.UDMABUF_PATH):
        print(p, "exists" if os.path.exists(p) else "missing", "rw" if os.access(p, os.R_OK | os.W_OK) else "")
    if os.path.isdir("/dev/dma_heap"):
        print("heaps:", os.listdir("/dev/dma_heap"))
    print("allocators:", nd.available_kinds())
    for kind in nd.available_kinds():
        try:
            fd, got = nd.allocate(1 << 20, kind)
        except Exception as e:
            print(kind, "allocation failed:", e)
            continue
        fi = nd.inspect_fd(fd)
        print(kind, "->", os.readlink(f"/proc/self/fd/{fd}"), fi, "sync:", nd.dma_buf_sync(fd, True, True),
              nd.dma_buf_sync(fd, False, True))
        os.close(fd)
    ctx = DMAContext()
    pool = FramePool(FrameFormat.NV12, 1920, 1080, 2, context=ctx)
    f = pool.acquire()
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[:] = 0x11
    print("pool allocator:", ctx.device, "is_dmabuf:", f[0].is_dmabuf, "syncable:", f[0].buffer.syncable)
    a, b = seqpacket_pair()
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(b.fileno())], pass_fds=[b.fileno()])
    b.close()
    tx = FrameSender(a)
    tx.send(f)
    print("returned:", tx.wait_returned(20), "child rc:", p.wait(20))
    with interop.map(f, MemoryType.CPU) as c:
        print("parent reads child's writes:", bool(np.all(np.asarray(c[0]) == 0x5A)))
    f.release()
    tx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
