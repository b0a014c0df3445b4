"""Shared set-up for the OpenCL / OpenCV / USM tests: default contexts under the one skip policy, small kernels."""

from __future__ import annotations

import numpy as np

import interop  # noqa: F401  (runtime set-up before pyopencl, dpctl, cv2)
from interop import MemoryType
from tests.support import requirements

FILL = """
__kernel void fill(__global uchar* a, ulong offset, uchar v) { a[offset + get_global_id(0)] = v; }
__kernel void fill_f(__global float* a, float v) { a[get_global_id(0)] = v; }
__kernel void scale_f(__global float* a, float s) { size_t i = get_global_id(0); a[i] = a[i] * s; }
"""


def need(module: str, what: str = ""):
    """``import module`` under the one skip policy (a tier A framework that is missing or broken fails)."""
    return requirements.need_module(module)


def opencl_context():
    """The default OpenCL context; no OpenCL platform (tier A) is a failure, not a skip."""
    return requirements.context(MemoryType.OPENCL)


def umat_context():
    """The default OpenCV UMat context (OpenCV on OpenCL, tier A)."""
    return requirements.context(MemoryType.OPENCV_UMAT)


def sycl_context():
    """The default SYCL USM context (dpctl on the OpenCL device, tier A)."""
    requirements.context(MemoryType.OPENCL)
    return requirements.context(MemoryType.USM)


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
