"""map64: map + release of a 64 MiB buffer versus copying it, for each CPU-reachable OpenCL/OpenCV/USM path.

Each case times ``interop.map(...)`` followed by ``release()`` (the whole library path: wrap, route, context
checks, the native map/unmap; for a raw ``cv2.UMat`` also finding its layout, which opencv-python does not expose) against the copy a program would make without interop (``UMat.get()``, an OpenCL read,
a SYCL memcpy, a device-to-device copy), side by side in one run, medians of several repetitions. The target
is map + release <= 1 % of the copy's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import Result, machine, median, skipped

NAME = "map64"
SUMMARY = "map + release of 64 MiB against copying it, on each OpenCL / OpenCV / USM path"
REQUIRES: tuple[tuple[str, str], ...] = (("cv2", "OpenCV"), ("pyopencl", "pyopencl"))
SIZE = 64 << 20


def _time(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm: routes cached, pages touched, kernels built
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return median(out)


def _map_release(obj: Any, to: Any, mode: Any, allow_copy: bool = False) -> Callable[[], None]:
    import interop

    def go() -> None:
        interop.map(obj, to, mode=mode, allow_copy=allow_copy).release()

    return go


def cases() -> tuple[list[tuple[str, Callable[[], Any], Callable[[], Any], str]], list[Result]]:
    """(case, map+release, copy, what the copy is), and the parts that cannot run here."""
    import cv2
    import pyopencl as cl

    import interop
    from interop import AccessMode, Context, MemoryType, TensorInfo
    from interop.tensors.usm import allocate

    rw = AccessMode.READ_WRITE
    ocl: Any = Context.default(MemoryType.OPENCL)
    q = ocl.queue
    host: Any = np.ones(SIZE, np.uint8)
    out: list[tuple[str, Callable[[], Any], Callable[[], Any], str]] = []

    buf = cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, SIZE)
    cl.enqueue_fill_buffer(q, buf, np.ones(1, np.uint8), 0, SIZE)
    q.finish()
    t = interop.wrap(buf, info=TensorInfo((SIZE,), np.uint8))
    out.append(("OpenCL -> CPU", _map_release(t, MemoryType.CPU, rw),
                lambda: cl.enqueue_copy(q, host, buf), "clEnqueueReadBuffer into numpy"))

    u = cv2.UMat(4096, 4096, cv2.CV_8UC4, (1, 2, 3, 4))
    cv2.ocl.finish()
    out.append(("OpenCV UMat -> CPU", _map_release(u, MemoryType.CPU, rw), lambda: u.get(), "UMat.get()"))
    dst = cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, SIZE)
    ubuf: Any = cl.Buffer.from_int_ptr(u.handle(cv2.ACCESS_RW), retain=True)

    def d2d() -> None:
        cl.enqueue_copy(q, dst, ubuf, byte_count=SIZE)
        q.finish()

    out.append(("OpenCV UMat -> OpenCL", _map_release(u, MemoryType.OPENCL, rw), d2d, "device-to-device copy"))
    ut = interop.wrap(u)  # a UMat tensor kept across frames: its layout is found once
    out.append(("UMat tensor -> CPU", _map_release(ut, MemoryType.CPU, rw), lambda: u.get(), "UMat.get()"))
    out.append(("UMat tensor -> OpenCL", _map_release(ut, MemoryType.OPENCL, rw), d2d, "device-to-device copy"))
    mat = cv2.Mat(np.ones((4096, 4096, 4), np.uint8), wrap_channels=True)
    out.append(("OpenCV Mat -> CPU", _map_release(mat, MemoryType.CPU, rw), lambda: np.array(mat, copy=True),
                "numpy copy"))

    a = np.ones(SIZE, np.uint8)
    dev = cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, SIZE)

    def h2d() -> None:
        cl.enqueue_copy(q, dev, a)
        q.finish()

    out.append(("CPU -> OpenCL", _map_release(a, MemoryType.OPENCL, rw, allow_copy=True), h2d,
                "clEnqueueWriteBuffer from numpy"))

    try:
        usm: Any = Context.default(MemoryType.USM)
    except interop.BackendUnavailableError as e:
        return out, [skipped(NAME, "USM", str(e))]
    for kind in ("shared", "host"):
        s = allocate(TensorInfo((SIZE,), np.uint8), kind, usm)
        s.native.memset(1)
        usm.queue.wait()

        def sycl_copy(mem: Any = s.native) -> None:
            usm.queue.memcpy(host, mem, SIZE)

        out.append((f"USM {kind} -> CPU", _map_release(s, MemoryType.CPU, rw), sycl_copy, "SYCL memcpy to numpy"))
        if kind == "shared":
            out.append(("USM shared -> OpenCL", _map_release(s, MemoryType.OPENCL, rw), sycl_copy,
                        "SYCL memcpy (what a separate context would cost)"))
    return out, []


def run(quick: bool = False) -> list[Result]:
    reps = 5 if quick else 21
    where = machine()
    todo, results = cases()
    for case, mapper, copy, what in todo:
        copy_s = _time(copy, max(3, reps // 3))
        map_s = _time(mapper, reps)
        results.append(Result(NAME, case, 100.0 * map_s / copy_s, "% of copy",
                              {"map_release_us": round(map_s * 1e6, 1), "copy_ms": round(copy_s * 1e3, 3),
                               "copy": what, "bytes": SIZE, "target_pct": 1.0, "machine": where}))
    return results
