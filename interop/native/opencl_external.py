"""OpenCL buffers over memory another API exported as an OS handle (``cl_khr_external_memory``).

``clCreateBufferWithProperties`` (OpenCL 3.0) takes the handle as a property: a dma-buf fd
(``cl_khr_external_memory_dma_buf``) or an opaque fd (``cl_khr_external_memory_opaque_fd``, what CUDA's
``cuMemExportToShareableHandle`` and Vulkan export). Such buffers are acquired before OpenCL commands use them and
released after (``clEnqueue{Acquire,Release}ExternalMemObjectsKHR``), which orders OpenCL's use against the
other API's; the extension functions are looked up per platform.
"""

from __future__ import annotations

import ctypes
from ctypes import c_int32, c_uint, c_uint64, c_void_p
from typing import Any

from ..errors import InteropError
from .opencl_usm import loader

CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR = 0x2060
CL_EXTERNAL_MEMORY_HANDLE_DMA_BUF_KHR = 0x2067
CL_MEM_DEVICE_HANDLE_LIST_KHR = 0x2051
CL_MEM_DEVICE_HANDLE_LIST_END_KHR = 0
CL_MEM_READ_WRITE, CL_MEM_READ_ONLY = 1, 4


def import_fd(ctx: Any, handle_type: int, fd: int, size: int, *, read_only: bool, device: Any = None) -> Any:
    """A ``pyopencl.Buffer`` of ``size`` bytes over the memory behind ``fd`` in pyopencl context ``ctx``;
    ``device`` (a pyopencl.Device) names the device the import is for (required for opaque fds on a context
    with several devices)."""
    import pyopencl as cl

    lib = loader()
    fn = lib.clCreateBufferWithProperties
    fn.restype = c_void_p
    fn.argtypes = [c_void_p, ctypes.POINTER(c_uint64), c_uint64, ctypes.c_size_t, c_void_p, ctypes.POINTER(c_int32)]
    items = [handle_type, fd]
    if device is not None:
        items += [CL_MEM_DEVICE_HANDLE_LIST_KHR, int(device.int_ptr), CL_MEM_DEVICE_HANDLE_LIST_END_KHR]
    items.append(0)
    props = (c_uint64 * len(items))(*items)
    err = c_int32(0)
    mem = fn(c_void_p(ctx.int_ptr), props, CL_MEM_READ_ONLY if read_only else CL_MEM_READ_WRITE, size, None,
             ctypes.byref(err))
    if err.value != 0 or not mem:
        raise InteropError(f"importing fd {fd} (handle type {handle_type:#x}) into OpenCL failed (error {err.value})")
    return cl.Buffer.from_int_ptr(mem, retain=False)


_Enqueue = ctypes.CFUNCTYPE(c_int32, c_void_p, c_uint, ctypes.POINTER(c_void_p), c_uint, c_void_p, c_void_p)
_functions: dict[int, tuple[Any, Any] | None] = {}


def _acquire_release(platform: int) -> tuple[Any, Any] | None:
    if platform not in _functions:
        lib = loader()
        got = [lib.clGetExtensionFunctionAddressForPlatform(c_void_p(platform), name)
               for name in (b"clEnqueueAcquireExternalMemObjectsKHR", b"clEnqueueReleaseExternalMemObjectsKHR")]
        _functions[platform] = (_Enqueue(got[0]), _Enqueue(got[1])) if all(got) else None
    return _functions[platform]


def enqueue_external(queue: Any, buffer: Any, acquire: bool) -> bool:
    """Acquire (or release) ``buffer`` for OpenCL on ``queue``; False when the platform has no such call."""
    fns = _acquire_release(int(queue.device.platform.int_ptr))
    if fns is None:
        return False
    mem = c_void_p(buffer.int_ptr)
    rc = fns[0 if acquire else 1](c_void_p(queue.int_ptr), 1, ctypes.byref(mem), 0, None, None)
    if rc != 0:
        raise InteropError(f"clEnqueue{'Acquire' if acquire else 'Release'}ExternalMemObjectsKHR failed with OpenCL "
                           f"error {rc}")
    return True
