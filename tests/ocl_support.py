"""Shared set-up for the OpenCL / OpenCV / USM tests: skips that name what is missing, small kernels."""

from __future__ import annotations

import numpy as np
import pytest

import interop  # noqa: F401  (runtime set-up before pyopencl, dpctl, cv2)
from interop import Context, MemoryType
from interop.errors import BackendUnavailableError

FILL = """
__kernel void fill(__global uchar* a, ulong offset, uchar v) { a[offset + get_global_id(0)] = v; }
__kernel void fill_f(__global float* a, float v) { a[get_global_id(0)] = v; }
__kernel void scale_f(__global float* a, float s) { size_t i = get_global_id(0); a[i] = a[i] * s; }
"""


def need(module: str, what: str):
    return pytest.importorskip(module, reason=f"needs {what} ({module} is not installed)")


def opencl_context():
    need("pyopencl", "pyopencl")
    try:
        return Context.default(MemoryType.OPENCL)
    except BackendUnavailableError as e:
        pytest.skip(f"needs an OpenCL device: {e}")


def umat_context():
    need("cv2", "OpenCV")
    try:
        return Context.default(MemoryType.OPENCV_UMAT)
    except BackendUnavailableError as e:
        pytest.skip(f"needs OpenCV with an OpenCL device: {e}")


def sycl_context():
    need("dpctl", "dpctl")
    opencl_context()
    try:
        return Context.default(MemoryType.USM)
    except BackendUnavailableError as e:
        pytest.skip(f"needs a SYCL device: {e}")


def kernels(ctx):
    return ctx.build(FILL)


def fill_bytes(ctx, buf, offset: int, n: int, value: int) -> None:
    """Write ``value`` into ``n`` bytes of a buffer at ``offset`` with an OpenCL kernel (the device side)."""
    import pyopencl as cl

    k = cl.Kernel(kernels(ctx), "fill")
    k(ctx.queue, (n,), None, buf, np.uint64(offset), np.uint8(value))
    ctx.queue.finish()


def read_bytes(ctx, buf, offset: int, n: int) -> np.ndarray:
    import pyopencl as cl

    out = np.empty(n, np.uint8)
    cl.enqueue_copy(ctx.queue, out, buf, src_offset=offset)
    ctx.queue.finish()
    return out
