"""ctypes bindings for the OpenCL calls pyopencl does not expose.

* The Intel USM extension (``cl_intel_unified_shared_memory``): ``cl{Host,Device,Shared}MemAllocINTEL``,
  ``clMemBlockingFreeINTEL``, ``clGetMemAllocInfoINTEL``, ``clSetKernelArgMemPointerINTEL`` and
  ``clEnqueueMemcpyINTEL``. Extension functions are looked up per platform with
  ``clGetExtensionFunctionAddressForPlatform`` (pyopencl has no USM API at all).
* ``clGetMemObjectInfo(CL_MEM_HOST_PTR)``, which pyopencl refuses to answer.

Every OpenCL handle here is a plain int (pyopencl's ``int_ptr``). Any ICD loader can take any handle: the
loader dispatches through the object's own dispatch table, so the loader we open need not be the one
pyopencl or OpenCV use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from dataclasses import dataclass
from typing import Any

from .._dist import pip_hint
from ..errors import BackendUnavailableError, InteropError

c_void_p, c_uint, c_int, c_size_t, c_ulong = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t, ctypes.c_ulong

CL_MEM_HOST_PTR = 0x1103
CL_MEM_SIZE = 0x1102
CL_MEM_ALLOC_TYPE_INTEL = 0x419A
CL_MEM_ALLOC_BASE_PTR_INTEL = 0x419B
CL_MEM_ALLOC_SIZE_INTEL = 0x419C
CL_MEM_ALLOC_DEVICE_INTEL = 0x419D
ALLOC_TYPES = {0x4196: "unknown", 0x4197: "host", 0x4198: "device", 0x4199: "shared"}

_lock = threading.Lock()


class OpenCLCallError(InteropError):
    """An OpenCL call made through ctypes returned an error code."""

    def __init__(self, call: str, code: int):
        super().__init__(f"{call} failed with OpenCL error {code}")
        self.call = call
        self.code = code


def _pyopencl_loaders() -> list[str]:
    """The ICD loader a pyopencl wheel bundles (pyopencl.libs/libOpenCL-*.so*): machines with a vendor ICD but no
    system loader have only that one."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.origin:
        return []
    site = os.path.dirname(os.path.dirname(spec.origin))
    return sorted(glob.glob(os.path.join(site, "pyopencl.libs", "libOpenCL*.so*")))


@functools.lru_cache(maxsize=1)
def loader() -> ctypes.CDLL:
    """An OpenCL ICD loader: the one interop's runtime set-up preloaded, else the system's."""
    from .. import _runtime

    candidates = []
    if _runtime.STATE.lib_dir:
        candidates.append(os.path.join(_runtime.STATE.lib_dir, "libOpenCL.so.1"))
    found = ctypes.util.find_library("OpenCL")
    if found:
        candidates.append(found)
    candidates.append("libOpenCL.so.1")
    candidates += _pyopencl_loaders()
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.clGetExtensionFunctionAddressForPlatform.restype = c_void_p
        lib.clGetExtensionFunctionAddressForPlatform.argtypes = [c_void_p, ctypes.c_char_p]
        lib.clGetMemObjectInfo.restype = c_int
        lib.clGetMemObjectInfo.argtypes = [c_void_p, c_uint, c_size_t, c_void_p, c_void_p]
        lib.clRetainContext.argtypes = [c_void_p]
        lib.clReleaseContext.argtypes = [c_void_p]
        return lib
    raise BackendUnavailableError(f"no OpenCL ICD loader (libOpenCL.so.1) found: {pip_hint('opencl')}",
                                  backend="opencl", extra="opencl")


def mem_host_ptr(cl_mem: int) -> int | None:
    """CL_MEM_HOST_PTR of a buffer: the host pointer it was made over with USE_HOST_PTR, else None."""
    v = c_void_p(0)
    err = loader().clGetMemObjectInfo(c_void_p(cl_mem), CL_MEM_HOST_PTR, ctypes.sizeof(v), ctypes.byref(v), None)
    if err:
        raise OpenCLCallError("clGetMemObjectInfo(CL_MEM_HOST_PTR)", err)
    return v.value or None


def mem_size(cl_mem: int) -> int:
    """CL_MEM_SIZE of a memory object, in bytes."""
    v = c_size_t(0)
    err = loader().clGetMemObjectInfo(c_void_p(cl_mem), CL_MEM_SIZE, ctypes.sizeof(v), ctypes.byref(v), None)
    if err:
        raise OpenCLCallError("clGetMemObjectInfo(CL_MEM_SIZE)", err)
    return int(v.value)


def retain_context(cl_context: int) -> None:
    loader().clRetainContext(c_void_p(cl_context))


def release_context(cl_context: int) -> None:
    loader().clReleaseContext(c_void_p(cl_context))


_SIGS: dict[str, tuple[Any, list[Any]]] = {
    "clHostMemAllocINTEL": (c_void_p, [c_void_p, c_void_p, c_size_t, c_uint, ctypes.POINTER(c_int)]),
    "clDeviceMemAllocINTEL": (c_void_p, [c_void_p, c_void_p, c_void_p, c_size_t, c_uint, ctypes.POINTER(c_int)]),
    "clSharedMemAllocINTEL": (c_void_p, [c_void_p, c_void_p, c_void_p, c_size_t, c_uint, ctypes.POINTER(c_int)]),
    "clMemBlockingFreeINTEL": (c_int, [c_void_p, c_void_p]),
    "clGetMemAllocInfoINTEL": (c_int, [c_void_p, c_void_p, c_uint, c_size_t, c_void_p, c_void_p]),
    "clSetKernelArgMemPointerINTEL": (c_int, [c_void_p, c_uint, c_void_p]),
    "clEnqueueMemcpyINTEL": (c_int, [c_void_p, c_uint, c_void_p, c_void_p, c_size_t, c_uint, c_void_p, c_void_p]),
}


@dataclass(frozen=True)
class USMFunctions:
    """The Intel USM entry points of one OpenCL platform."""

    platform: int
    fns: dict[str, Any]

    def _call(self, name: str, *args: object) -> int:
        return self.fns[name](*args)

    def _alloc(self, name: str, args: list, size: int, alignment: int) -> int:
        err = c_int(0)
        ptr = self.fns[name](*args, None, size, alignment, ctypes.byref(err))
        if err.value or not ptr:
            raise OpenCLCallError(name, err.value or -6)
        return int(ptr)

    def host_alloc(self, cl_context: int, size: int, alignment: int = 0) -> int:
        return self._alloc("clHostMemAllocINTEL", [c_void_p(cl_context)], size, alignment)

    def device_alloc(self, cl_context: int, cl_device: int, size: int, alignment: int = 0) -> int:
        return self._alloc("clDeviceMemAllocINTEL", [c_void_p(cl_context), c_void_p(cl_device)], size, alignment)

    def shared_alloc(self, cl_context: int, cl_device: int, size: int, alignment: int = 0) -> int:
        return self._alloc("clSharedMemAllocINTEL", [c_void_p(cl_context), c_void_p(cl_device)], size, alignment)

    def free(self, cl_context: int, ptr: int) -> None:
        err = self._call("clMemBlockingFreeINTEL", c_void_p(cl_context), c_void_p(ptr))
        if err:
            raise OpenCLCallError("clMemBlockingFreeINTEL", err)

    def _info(self, cl_context: int, ptr: int, param: int, ctype: type) -> int:
        v = ctype(0)
        err = self._call("clGetMemAllocInfoINTEL", c_void_p(cl_context), c_void_p(ptr), param, ctypes.sizeof(v),
                         ctypes.byref(v), None)
        if err:
            raise OpenCLCallError("clGetMemAllocInfoINTEL", err)
        return int(v.value or 0)

    def alloc_type(self, cl_context: int, ptr: int) -> str:
        """'host', 'device', 'shared', or 'unknown' when ``ptr`` is not a USM allocation of this context."""
        return ALLOC_TYPES.get(self._info(cl_context, ptr, CL_MEM_ALLOC_TYPE_INTEL, c_uint), "unknown")

    def alloc_base(self, cl_context: int, ptr: int) -> int:
        return self._info(cl_context, ptr, CL_MEM_ALLOC_BASE_PTR_INTEL, c_void_p)

    def alloc_size(self, cl_context: int, ptr: int) -> int:
        return self._info(cl_context, ptr, CL_MEM_ALLOC_SIZE_INTEL, c_size_t)

    def set_kernel_arg(self, cl_kernel: int, index: int, ptr: int) -> None:
        """Pass a USM pointer as kernel argument ``index`` (clSetKernelArgMemPointerINTEL)."""
        err = self._call("clSetKernelArgMemPointerINTEL", c_void_p(cl_kernel), index, c_void_p(ptr))
        if err:
            raise OpenCLCallError("clSetKernelArgMemPointerINTEL", err)

    def memcpy(self, cl_queue: int, dst: int, src: int, size: int, blocking: bool = True) -> None:
        err = self._call("clEnqueueMemcpyINTEL", c_void_p(cl_queue), 1 if blocking else 0, c_void_p(dst), c_void_p(src),
                         size, 0, None, None)
        if err:
            raise OpenCLCallError("clEnqueueMemcpyINTEL", err)


_cache: dict[int, USMFunctions] = {}


def usm_functions(platform: int) -> USMFunctions:
    """The USM entry points of an OpenCL platform (``cl_platform_id`` as int); BackendUnavailableError without them."""
    with _lock:
        got = _cache.get(platform)
        if got is not None:
            return got
        lib = loader()
        fns = {}
        for name, (restype, argtypes) in _SIGS.items():
            addr = lib.clGetExtensionFunctionAddressForPlatform(c_void_p(platform), name.encode())
            if not addr:
                raise BackendUnavailableError(
                    f"the OpenCL platform has no {name} (cl_intel_unified_shared_memory): USM needs Intel's OpenCL "
                    f"runtime ({pip_hint('opencl')}) or an Intel GPU driver", backend="usm", extra="opencl")
            fns[name] = ctypes.CFUNCTYPE(restype, *argtypes)(addr)
        got = USMFunctions(platform, fns)
        _cache[platform] = got
        return got
