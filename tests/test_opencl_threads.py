"""4 threads mapping and releasing on the one shared context (OpenCV queue, pyopencl, dpctl) at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from tests.support.ocl_support import need, opencl_context, sycl_context, umat_context

cv2 = need("cv2", "OpenCV")
cl = need("pyopencl", "pyopencl")
need("dpctl", "dpctl")

THREADS = 4
TIMEOUT_S = 120


def _worker(k: int, cycles: int, errors: list[str]) -> None:
    from interop.tensors.usm import allocate

    try:
        ocl = opencl_context()
        usm = sycl_context()
        inc = cl.Kernel(ocl.build("__kernel void inc(__global uchar* a){ a[get_global_id(0)] += 1; }"), "inc")
        u = cv2.UMat(32, 48, cv2.CV_8UC1, (k,))  # a scalar: a bare int would be read as usage flags
        buf = interop.wrap(cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, 32 * 48), info=TensorInfo((32, 48), np.uint8))
        shared = allocate(TensorInfo((32, 48), np.uint8), "shared", usm)
        shared.native.memset(0)
        for i in range(cycles):
            v = (k * 50 + i) % 200
            with interop.map(buf, MemoryType.CPU, mode=AccessMode.WRITE) as h:  # map/unmap a cl_mem
                h.numpy()[:] = v
            inc(ocl.queue, (32 * 48,), None, buf.native)  # kernel on the shared in-order queue
            with interop.map(buf, MemoryType.CPU) as h:
                if not (h.numpy() == v + 1).all():
                    errors.append(f"thread {k} cycle {i}: OpenCL buffer holds {h.numpy()[0, 0]}, expected {v + 1}")
            cv2.add(u, 1, dst=u)  # OpenCV on the same context
            with interop.map(u, MemoryType.CPU) as h:
                want = (k + i + 1) % 256
                if not (h.numpy() == want).all():
                    errors.append(f"thread {k} cycle {i}: UMat holds {h.numpy()[0, 0]}, expected {want}")
            o = interop.map(shared, MemoryType.OPENCL)  # dpctl USM as a cl_mem
            inc(ocl.queue, (32 * 48,), None, o.native)
            ocl.queue.finish()
            o.release()
            with interop.map(shared, MemoryType.CPU) as h:
                if not (h.numpy() == (i + 1) % 256).all():
                    errors.append(f"thread {k} cycle {i}: USM holds {h.numpy()[0, 0]}, expected {(i + 1) % 256}")
            if len(errors) > 5:
                return
    except Exception as e:  # reported by the main thread
        errors.append(f"thread {k}: {type(e).__name__}: {e}")


def test_four_threads_map_and_release_on_the_shared_context(soak):
    umat_context()
    sycl_context()
    from interop.tensors.usm import allocate  # noqa: F401  (imported before the threads start)

    cycles = 2000 if soak else 60
    errors: list[str] = []
    threads = [threading.Thread(target=_worker, args=(k, cycles, errors), daemon=True) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        pytest.fail(f"deadlock: {stuck} still running after {TIMEOUT_S} s")
    assert not errors, "\n".join(errors[:10])
