"""CUDA device memory that other APIs can import: the driver's virtual memory management (VMM) calls.

Memory from ``cuMemAlloc`` (torch's and CuPy's allocators, FFmpeg's NVDEC surfaces) has no OS handle. Memory
made with ``cuMemCreate`` asking for ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`` can be exported as an opaque fd
(``cuMemExportToShareableHandle``), which OpenCL imports with ``cl_khr_external_memory_opaque_fd`` (and Vulkan
with ``VK_KHR_external_memory_fd``). The physical allocation is mapped at a reserved virtual address range and
made readable and writable by its device, so CUDA kernels, torch and CuPy use it like any device pointer.

Struct layouts follow cuda.h (CUDA 11 and later): ``CUmemAllocationProp`` is 32 bytes, ``CUmemAccessDesc`` 12.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import c_int, c_size_t, c_uint64, c_void_p
from typing import Any

from ..errors import BackendUnavailableError, InteropError
from .cuda_driver import driver as default_driver

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class MemLocation(ctypes.Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", c_int), ("requestedHandleTypes", c_int), ("location", MemLocation),
                ("win32HandleMetaData", c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", c_int)]


_CALLS = ("cuMemGetAllocationGranularity", "cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess",
          "cuMemExportToShareableHandle", "cuMemUnmap", "cuMemAddressFree", "cuMemRelease")
_bound: set[int] = set()
_lock = threading.Lock()


def _lib(driver: Any) -> Any:
    """The driver's libcuda with the VMM calls' result types set (once per library object)."""
    lib = driver.lib
    if id(lib) not in _bound:
        with _lock:
            for name in _CALLS:
                fn = getattr(lib, name, None)
                if fn is None:
                    raise BackendUnavailableError(f"this NVIDIA driver has no {name} (exportable CUDA memory needs a "
                                                  f"driver for CUDA 10.2 or later)", backend="cuda")
                fn.restype = c_int
            _bound.add(id(lib))
    return lib


def _prop(device: int) -> AllocationProp:
    p = AllocationProp()
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = device
    return p


class ExportableAllocation:
    """``nbytes`` (rounded up to the device's granularity) of device memory on ``device``, mapped at ``ptr``,
    exportable as an opaque fd. ``close()`` (or garbage collection) unmaps and releases it; importers that hold
    it (an OpenCL buffer) keep the physical memory alive until they release it too."""

    def __init__(self, nbytes: int, device: int = 0, *, driver: Any = None):
        if nbytes <= 0:
            raise InteropError(f"an exportable allocation needs a positive size, got {nbytes}")
        d = driver if driver is not None else default_driver()
        lib = _lib(d)
        self._driver, self.device = d, int(device)
        prop = _prop(self.device)
        gran = c_size_t()
        d.push(self.device)
        try:
            d._check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                                      CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity")
            g = max(int(gran.value), 1)
            self.size = -(-int(nbytes) // g) * g
            self.nbytes = int(nbytes)
            handle, va = c_uint64(), c_uint64()
            d._check(lib.cuMemCreate(ctypes.byref(handle), c_size_t(self.size), ctypes.byref(prop), c_uint64(0)),
                     "cuMemCreate")
            self._handle: int | None = int(handle.value)
            self.ptr = 0
            try:
                d._check(lib.cuMemAddressReserve(ctypes.byref(va), c_size_t(self.size), c_size_t(g), c_uint64(0),
                                                 c_uint64(0)), "cuMemAddressReserve")
                self.ptr = int(va.value)
                d._check(lib.cuMemMap(c_uint64(self.ptr), c_size_t(self.size), c_size_t(0), c_uint64(self._handle),
                                      c_uint64(0)), "cuMemMap")
                access = AccessDesc()
                access.location.type, access.location.id = CU_MEM_LOCATION_TYPE_DEVICE, self.device
                access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                d._check(lib.cuMemSetAccess(c_uint64(self.ptr), c_size_t(self.size), ctypes.byref(access), c_size_t(1)),
                         "cuMemSetAccess")
            except BaseException:
                self._free()
                raise
        finally:
            d.pop()
        self.imports: dict[Any, Any] = {}  # importer key (e.g. an OpenCL context) -> what it made of this memory

    def export_fd(self) -> int:
        """A new opaque fd of the allocation (the caller owns it: close it, or hand it to an importer that does)."""
        if self._handle is None:
            raise InteropError("this exportable CUDA allocation was closed")
        fd = c_int(-1)
        lib = _lib(self._driver)
        self._driver._check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), c_uint64(self._handle),
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, c_uint64(0)),
                            "cuMemExportToShareableHandle")
        return int(fd.value)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _free(self) -> None:
        lib = self._driver.lib
        if self.ptr:
            lib.cuMemUnmap(c_uint64(self.ptr), c_size_t(self.size))
            lib.cuMemAddressFree(c_uint64(self.ptr), c_size_t(self.size))
            self.ptr = 0
        if self._handle is not None:
            lib.cuMemRelease(c_uint64(self._handle))
            self._handle = None

    def close(self) -> None:
        """Unmap and release (imports made from it stay valid until their own release)."""
        if self._handle is None:
            return
        self.imports.clear()
        self._driver.push(self.device)
        try:
            self._driver.lib.cuCtxSynchronize()  # no queued kernel may touch the range once it is unmapped
            self._free()
        finally:
            self._driver.pop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass

    def __enter__(self) -> ExportableAllocation:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"ptr={self.ptr:#x}"
        return f"<ExportableAllocation cuda:{self.device} {self.nbytes} bytes {state}>"


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
