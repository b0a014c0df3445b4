"""ctypes bindings to the Level Zero loader (libze_loader.so.1): drivers, devices, contexts, USM
allocations, DMA-BUF import/export, and host (system) memory import.

Only the calls interop needs. Every failing call raises ZeError carrying the ze_result_t name; a machine
without the loader or without a driver gets BackendUnavailableError saying which. Memory is owned by
``Allocation`` objects (zeMemFree at ``release()`` or by their finaliser); contexts made here are owned by
``ZeContext`` (zeContextDestroy likewise), contexts borrowed from elsewhere (the OpenVINO NPU plugin's)
are never destroyed by us.

Import of a DMA-BUF fd does not take the fd: Level Zero drivers import it through DRM PRIME, which leaves
the fd open, so the caller keeps its fd open while the allocation lives and closes it afterwards (the DMA
tensor that owns the fd is the imported tensor's parent). An exported fd is new and belongs to the caller.

Import of system memory (``import_system_memory``: ze_external_memory_import_system_memory_t chained to
zeMemAllocHost, the NPU driver's extension that OpenVINO's NPU plugin uses for ``CPU_VA``) makes no new memory:
the allocation is the caller's pages, page-aligned in address and size. zeMemFree ends the import, never the
memory; the caller keeps the memory alive (pass its owner as ``keepalive``) until then.

The loader library is ``libze_loader.so.1``; ``INTEROP_ZE_LOADER`` names another file (a test fallback,
only for where the real loader cannot load a fake driver).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ..errors import BackendUnavailableError, InteropError, InvalidTensorError, UnsupportedTypeError

# ---- constants from ze_api.h (checked against the real header by tests/test_native_level_zero_layout.py) ----
ZE_INIT_FLAG_GPU_ONLY = 1 << 0
ZE_INIT_FLAG_VPU_ONLY = 1 << 1

ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES = 0x1
ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3
ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES = 0xC
ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xD
ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xE
ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15
ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC = 0x16
ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES = 0x17
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC = 0x18
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_FD = 0x19
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD = 0x1A

ZE_EXTERNAL_MEMORY_TYPE_FLAG_OPAQUE_FD = 1 << 0
ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF = 1 << 1
ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED = 1 << 2

# ze_mem_import_system_memory_ext.h: the Level Zero NPU extension OpenVINO's NPU plugin carries (not in Debian's
# libze-dev). tests/fakes/ze/ze_mem_import_system_memory_ext.h copies its declaration; the layout test checks both.
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY = 0x24
ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION = 0x100
#: the plugin's utils::STANDARD_PAGE_SIZE: what "page-aligned" means to the NPU plugin and driver
STANDARD_PAGE_SIZE = 4096

ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS = 1

ZE_MEMORY_TYPE_UNKNOWN = 0
ZE_MEMORY_TYPE_HOST = 1
ZE_MEMORY_TYPE_DEVICE = 2
ZE_MEMORY_TYPE_SHARED = 3
MEMORY_TYPE_NAMES = {ZE_MEMORY_TYPE_UNKNOWN: "unknown", ZE_MEMORY_TYPE_HOST: "host",
                     ZE_MEMORY_TYPE_DEVICE: "device", ZE_MEMORY_TYPE_SHARED: "shared"}

DEVICE_TYPE_NAMES = {1: "GPU", 2: "CPU", 3: "FPGA", 4: "MCA", 5: "VPU"}
ZE_DEVICE_TYPE_VPU = 5

ZE_MAX_DEVICE_NAME = 256
ZE_MAX_DEVICE_UUID_SIZE = 16
ZE_MAX_DRIVER_UUID_SIZE = 16
ZE_MAX_EXTENSION_NAME = 256

RESULT_NAMES: dict[int, str] = {
    0: "ZE_RESULT_SUCCESS", 1: "ZE_RESULT_NOT_READY",
    0x70000001: "ZE_RESULT_ERROR_DEVICE_LOST", 0x70000002: "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY",
    0x70000003: "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", 0x70000004: "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE",
    0x70000005: "ZE_RESULT_ERROR_MODULE_LINK_FAILURE", 0x70000006: "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET",
    0x70000007: "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE", 0x70010000: "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS",
    0x70010001: "ZE_RESULT_ERROR_NOT_AVAILABLE", 0x70020000: "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
    0x70020001: "ZE_RESULT_WARNING_DROPPED_DATA", 0x78000001: "ZE_RESULT_ERROR_UNINITIALIZED",
    0x78000002: "ZE_RESULT_ERROR_UNSUPPORTED_VERSION", 0x78000003: "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE",
    0x78000004: "ZE_RESULT_ERROR_INVALID_ARGUMENT", 0x78000005: "ZE_RESULT_ERROR_INVALID_NULL_HANDLE",
    0x78000006: "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE", 0x78000007: "ZE_RESULT_ERROR_INVALID_NULL_POINTER",
    0x78000008: "ZE_RESULT_ERROR_INVALID_SIZE", 0x78000009: "ZE_RESULT_ERROR_UNSUPPORTED_SIZE",
    0x7800000A: "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT", 0x7800000B: "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT",
    0x7800000C: "ZE_RESULT_ERROR_INVALID_ENUMERATION", 0x7800000D: "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION",
    0x7800000E: "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT", 0x7800000F: "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY",
    0x78000010: "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME", 0x78000011: "ZE_RESULT_ERROR_INVALID_KERNEL_NAME",
    0x78000012: "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME", 0x78000013: "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION",
    0x78000014: "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION", 0x78000015: "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX",
    0x78000016: "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE", 0x78000017: "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE",
    0x78000018: "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED", 0x78000019: "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE",
    0x7800001A: "ZE_RESULT_ERROR_OVERLAPPING_REGIONS", 0x7FF00001: "ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX",
    0x7FF00002: "ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE", 0x7FF00003: "ZE_RESULT_EXP_ERROR_REMOTE_DEVICE",
    0x7800001B: "ZE_RESULT_WARNING_ACTION_REQUIRED", 0x7FFFFFFE: "ZE_RESULT_ERROR_UNKNOWN",
}
ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001


class ZeError(InteropError):
    """A Level Zero call failed. ``result`` is the ze_result_t, ``name`` its name, ``call`` the function."""

    def __init__(self, call: str, result: int, hint: str = ""):
        self.call = call
        self.result = int(result) & 0xFFFFFFFF
        self.name = RESULT_NAMES.get(self.result, f"ze_result_t 0x{self.result:08x}")
        super().__init__(f"{call} failed: {self.name}" + (f"; {hint}" if hint else ""))


# ---- structures (ze_api.h) --------------------------------------------------------------------------------
class ZeBaseDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p)]


class ZeDriverUUID(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint8 * ZE_MAX_DRIVER_UUID_SIZE)]


class ZeDeviceUUID(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint8 * ZE_MAX_DEVICE_UUID_SIZE)]


class ZeDriverProperties(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("uuid", ZeDriverUUID),
                ("driverVersion", ctypes.c_uint32)]


class ZeDriverExtensionProperties(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * ZE_MAX_EXTENSION_NAME), ("version", ctypes.c_uint32)]


class ZeDeviceProperties(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("type", ctypes.c_uint32),
                ("vendorId", ctypes.c_uint32), ("deviceId", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("subdeviceId", ctypes.c_uint32), ("coreClockRate", ctypes.c_uint32),
                ("maxMemAllocSize", ctypes.c_uint64), ("maxHardwareContexts", ctypes.c_uint32),
                ("maxCommandQueuePriority", ctypes.c_uint32), ("numThreadsPerEU", ctypes.c_uint32),
                ("physicalEUSimdWidth", ctypes.c_uint32), ("numEUsPerSubslice", ctypes.c_uint32),
                ("numSubslicesPerSlice", ctypes.c_uint32), ("numSlices", ctypes.c_uint32),
                ("timerResolution", ctypes.c_uint64), ("timestampValidBits", ctypes.c_uint32),
                ("kernelTimestampValidBits", ctypes.c_uint32), ("uuid", ZeDeviceUUID),
                ("name", ctypes.c_char * ZE_MAX_DEVICE_NAME)]


class ZeContextDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ZeCommandQueueDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("ordinal", ctypes.c_uint32),
                ("index", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("mode", ctypes.c_uint32),
                ("priority", ctypes.c_uint32)]


class ZeDeviceMemAllocDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("ordinal", ctypes.c_uint32)]


class ZeHostMemAllocDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ZeMemoryAllocationProperties(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("type", ctypes.c_uint32),
                ("id", ctypes.c_uint64), ("pageSize", ctypes.c_uint64)]


class ZeExternalMemoryImportFd(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("fd", ctypes.c_int)]


class ZeExternalMemoryExportFd(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("fd", ctypes.c_int)]


class ZeExternalMemoryExportDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ZeDeviceExternalMemoryProperties(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("memoryAllocationImportTypes", ctypes.c_uint32),
                ("memoryAllocationExportTypes", ctypes.c_uint32), ("imageImportTypes", ctypes.c_uint32),
                ("imageExportTypes", ctypes.c_uint32)]


class ZeExternalMemoryImportSystemMemory(ctypes.Structure):
    """ze_external_memory_import_system_memory_t (ze_mem_import_system_memory_ext.h); ``stype`` is declared there
    as ze_structure_type_graph_ext_t, an enum (32 bits)."""

    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("pSystemMemory", ctypes.c_void_p),
                ("size", ctypes.c_uint64)]


#: structures of the NPU extension header (checked against tests/fakes/ze/ze_mem_import_system_memory_ext.h)
EXTENSION_STRUCTURES: dict[str, type[ctypes.Structure]] = {
    "ze_external_memory_import_system_memory_t": ZeExternalMemoryImportSystemMemory,
}

#: every Structure here with its C name (the layout test compares them with the real header)
STRUCTURES: dict[str, type[ctypes.Structure]] = {
    "ze_base_desc_t": ZeBaseDesc, "ze_driver_uuid_t": ZeDriverUUID, "ze_device_uuid_t": ZeDeviceUUID,
    "ze_driver_properties_t": ZeDriverProperties, "ze_driver_extension_properties_t": ZeDriverExtensionProperties,
    "ze_device_properties_t": ZeDeviceProperties, "ze_context_desc_t": ZeContextDesc,
    "ze_command_queue_desc_t": ZeCommandQueueDesc,
    "ze_device_mem_alloc_desc_t": ZeDeviceMemAllocDesc, "ze_host_mem_alloc_desc_t": ZeHostMemAllocDesc,
    "ze_memory_allocation_properties_t": ZeMemoryAllocationProperties,
    "ze_external_memory_import_fd_t": ZeExternalMemoryImportFd,
    "ze_external_memory_export_fd_t": ZeExternalMemoryExportFd,
    "ze_external_memory_export_desc_t": ZeExternalMemoryExportDesc,
    "ze_device_external_memory_properties_t": ZeDeviceExternalMemoryProperties,
}

# ---- the loader -------------------------------------------------------------------------------------------
_P = ctypes.c_void_p
_U32P = ctypes.POINTER(ctypes.c_uint32)
_SIGNATURES: dict[str, list[Any]] = {
    "zeInit": [ctypes.c_uint32],
    "zeDriverGet": [_U32P, ctypes.POINTER(_P)],
    "zeDriverGetProperties": [_P, ctypes.POINTER(ZeDriverProperties)],
    "zeDriverGetApiVersion": [_P, _U32P],
    "zeDriverGetExtensionProperties": [_P, _U32P, ctypes.POINTER(ZeDriverExtensionProperties)],
    "zeDeviceGet": [_P, _U32P, ctypes.POINTER(_P)],
    "zeDeviceGetProperties": [_P, ctypes.POINTER(ZeDeviceProperties)],
    "zeDeviceGetExternalMemoryProperties": [_P, ctypes.POINTER(ZeDeviceExternalMemoryProperties)],
    "zeContextCreate": [_P, ctypes.POINTER(ZeContextDesc), ctypes.POINTER(_P)],
    "zeContextDestroy": [_P],
    "zeMemAllocHost": [_P, ctypes.POINTER(ZeHostMemAllocDesc), ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(_P)],
    "zeMemAllocDevice": [_P, ctypes.POINTER(ZeDeviceMemAllocDesc), ctypes.c_size_t, ctypes.c_size_t, _P,
                         ctypes.POINTER(_P)],
    "zeMemAllocShared": [_P, ctypes.POINTER(ZeDeviceMemAllocDesc), ctypes.POINTER(ZeHostMemAllocDesc),
                         ctypes.c_size_t, ctypes.c_size_t, _P, ctypes.POINTER(_P)],
    "zeMemFree": [_P, _P],
    "zeMemGetAllocProperties": [_P, _P, ctypes.POINTER(ZeMemoryAllocationProperties), ctypes.POINTER(_P)],
    "zeMemGetAddressRange": [_P, _P, ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_size_t)],
    "zeCommandListCreateImmediate": [_P, _P, ctypes.POINTER(ZeCommandQueueDesc), ctypes.POINTER(_P)],
    "zeCommandListAppendMemoryCopy": [_P, _P, _P, ctypes.c_size_t, _P, ctypes.c_uint32, _P],
    "zeCommandListDestroy": [_P],
}

_lock = threading.RLock()
_lib: ctypes.CDLL | None = None
_init_results: dict[int, int] = {}


def loader_name() -> str:
    return os.environ.get("INTEROP_ZE_LOADER") or "libze_loader.so.1"


def loader() -> ctypes.CDLL:
    """The loader library with prototypes set; BackendUnavailableError if it is not installed."""
    global _lib
    with _lock:
        if _lib is None:
            name = loader_name()
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                raise BackendUnavailableError(
                    f"the Level Zero loader {name} cannot be loaded ({e}): install it (Debian/Ubuntu: apt install libze1)",
                    backend="level_zero") from e
            for fn, args in _SIGNATURES.items():
                f = getattr(lib, fn)
                f.argtypes = args
                f.restype = ctypes.c_uint32
            _lib = lib
        return _lib


def _check(call: str, result: int, hint: str = "") -> None:
    if result != 0:
        raise ZeError(call, result, hint)


def init(flags: int = 0) -> None:
    """zeInit once per flag set. No driver at all is BackendUnavailableError (the result name included)."""
    lib = loader()
    with _lock:
        if flags not in _init_results:
            _init_results[flags] = int(lib.zeInit(flags))
        r = _init_results[flags]
    if r == ZE_RESULT_ERROR_UNINITIALIZED:
        raise BackendUnavailableError(
            f"zeInit: {RESULT_NAMES[r]}: the Level Zero loader found no driver (an Intel GPU needs "
            f"intel-level-zero-gpu, an Intel NPU needs the linux-npu-driver's libze_intel_npu.so)", backend="level_zero")
    _check("zeInit", r)


def init_early() -> bool:
    """zeInit(0) now, if the loader is installed; True when a driver answered. Never raises.

    The loader keeps the outcome of the first zeInit of the process (loader 1.8: every later zeInit returns
    it). dpctl/SYCL's Level Zero adapter initialises with ZE_INIT_FLAG_GPU_ONLY, which an NPU driver refuses,
    so on a machine whose only Level Zero device is an NPU, initialising SYCL first leaves Level Zero (ours and
    OpenVINO's NPU plugin's) without a driver for the rest of the process. Calling this before dpctl is
    initialised keeps every driver.
    """
    try:
        init(0)
        return True
    except InteropError:
        return False


def _enumerate(call: str, fn: Any, *prefix: Any) -> list[int]:
    n = ctypes.c_uint32(0)
    _check(call, fn(*prefix, ctypes.byref(n), None))
    if n.value == 0:
        return []
    arr = (_P * n.value)()
    _check(call, fn(*prefix, ctypes.byref(n), arr))
    return [int(arr[i] or 0) for i in range(n.value)]


def drivers(flags: int = 0) -> list[int]:
    """Driver handles (after zeInit(flags))."""
    init(flags)
    return _enumerate("zeDriverGet", loader().zeDriverGet)


def devices(driver: int) -> list[int]:
    return _enumerate("zeDeviceGet", loader().zeDeviceGet, _P(driver))


@dataclass(frozen=True)
class DeviceProperties:
    type: str  # "GPU", "VPU" (an NPU) …
    vendor_id: int
    device_id: int
    name: str
    uuid: bytes
    max_mem_alloc_size: int

    @property
    def is_npu(self) -> bool:
        return self.type == "VPU"


def device_properties(device: int) -> DeviceProperties:
    p = ZeDeviceProperties(stype=ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES)
    _check("zeDeviceGetProperties", loader().zeDeviceGetProperties(_P(device), ctypes.byref(p)))
    return DeviceProperties(DEVICE_TYPE_NAMES.get(p.type, str(p.type)), p.vendorId, p.deviceId,
                            p.name.decode(errors="replace"), bytes(p.uuid.id), p.maxMemAllocSize)


def driver_api_version(driver: int) -> tuple[int, int]:
    v = ctypes.c_uint32(0)
    _check("zeDriverGetApiVersion", loader().zeDriverGetApiVersion(_P(driver), ctypes.byref(v)))
    return (v.value >> 16, v.value & 0xFFFF)


def external_memory_import_types(device: int) -> int:
    """zeDeviceGetExternalMemoryProperties' memoryAllocationImportTypes (ZE_EXTERNAL_MEMORY_TYPE_FLAG_*): the NPU
    plugin imports host memory only where ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION is set (zero_init.cpp)."""
    p = ZeDeviceExternalMemoryProperties(stype=ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES)
    _check("zeDeviceGetExternalMemoryProperties", loader().zeDeviceGetExternalMemoryProperties(_P(device), ctypes.byref(p)))
    return int(p.memoryAllocationImportTypes)


def driver_extensions(driver: int) -> dict[str, int]:
    """Extension name -> version (e.g. ZE_extension_external_memory_import_fd)."""
    lib = loader()
    n = ctypes.c_uint32(0)
    _check("zeDriverGetExtensionProperties", lib.zeDriverGetExtensionProperties(_P(driver), ctypes.byref(n), None))
    arr = (ZeDriverExtensionProperties * max(n.value, 1))()
    _check("zeDriverGetExtensionProperties", lib.zeDriverGetExtensionProperties(_P(driver), ctypes.byref(n), arr))
    return {arr[i].name.decode(errors="replace"): arr[i].version for i in range(n.value)}


# ---- contexts ---------------------------------------------------------------------------------------------
def _destroy_context(handle: int) -> None:
    r = loader().zeContextDestroy(_P(handle))
    if r != 0:  # finalisers cannot raise; a live allocation keeps the context (see Allocation)
        import logging

        logging.getLogger("interop").warning("zeContextDestroy: %s", RESULT_NAMES.get(r, hex(r)))


class ZeContext:
    """A Level Zero context handle. ``owned`` contexts are destroyed at ``destroy()`` or by the finaliser;
    borrowed ones (``ZeContext.borrow``, e.g. the OpenVINO NPU plugin's) never are."""

    def __init__(self, handle: int, driver: int | None, *, owned: bool):
        if not handle:
            raise InteropError("a Level Zero context handle must not be NULL")
        self.handle = int(handle)
        self.driver = driver
        self.owned = owned
        self._finalizer = weakref.finalize(self, _destroy_context, self.handle) if owned else None

    @classmethod
    def create(cls, driver: int) -> ZeContext:
        init()
        out = _P()
        desc = ZeContextDesc(stype=ZE_STRUCTURE_TYPE_CONTEXT_DESC)
        _check("zeContextCreate", loader().zeContextCreate(_P(driver), ctypes.byref(desc), ctypes.byref(out)))
        return cls(int(out.value or 0), driver, owned=True)

    @classmethod
    def borrow(cls, handle: int, driver: int | None = None) -> ZeContext:
        """Wrap a context someone else owns (it must outlive everything made here from it)."""
        loader()
        return cls(handle, driver, owned=False)

    def destroy(self) -> None:
        """zeContextDestroy now (owned contexts only). Free its allocations first."""
        if self._finalizer is not None and self._finalizer.alive:
            _check("zeContextDestroy", loader().zeContextDestroy(_P(self.handle)),
                   "free every allocation of the context first")
            self._finalizer.detach()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ZeContext) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        return f"<ZeContext 0x{self.handle:x}{'' if self.owned else ' borrowed'}>"


# ---- allocations ------------------------------------------------------------------------------------------
_live = 0  # allocations made here and not yet freed (the reliability soak reads it)


def live_allocations() -> int:
    return _live


def _free(ctx: ZeContext, ptr: int) -> None:
    global _live
    r = loader().zeMemFree(_P(ctx.handle), _P(ptr))
    with _lock:
        _live -= 1
    if r != 0:
        import logging

        logging.getLogger("interop").warning("zeMemFree(0x%x): %s", ptr, RESULT_NAMES.get(r, hex(r)))


class Allocation:
    """Level Zero memory owned by this object: ``pointer``, ``size``, ``kind`` ("host" | "device" | "shared"),
    ``context``, ``device``, ``imported_fd`` (the DMA-BUF fd it was imported from, not owned, or None).

    zeMemFree runs once, at ``release()`` or when the object is collected; the context stays alive until then.
    """

    def __init__(self, context: ZeContext, pointer: int, size: int, kind: str, device: int | None,
                 imported_fd: int | None = None, keepalive: Any = None, system_memory: bool = False):
        global _live
        self.context = context
        self.pointer = int(pointer)
        self.size = int(size)
        self.kind = kind
        self.device = device
        self.imported_fd = imported_fd
        #: True for an import of the caller's host pages (zeMemFree ends the import, the memory stays the caller's)
        self.system_memory = system_memory
        self._keepalive = keepalive  # e.g. the object owning an imported fd
        with _lock:
            _live += 1
        self._finalizer = weakref.finalize(self, _free, context, self.pointer)

    @property
    def released(self) -> bool:
        return not self._finalizer.alive

    def release(self) -> None:
        self._finalizer()
        self._keepalive = None

    def export_dma_buf(self) -> int:
        """A new DMA-BUF fd of this allocation (the caller owns and closes it)."""
        if self.released:
            raise InvalidTensorError("this Level Zero allocation was freed")
        return export_dma_buf(self.context, self.pointer)

    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "freed" if self.released else f"0x{self.pointer:x}"
        return f"<Allocation {self.kind} {self.size} bytes {state}>"


_KINDS = ("host", "device", "shared")


def _chain(import_fd: int | None, exportable: bool) -> tuple[int | None, list[Any]]:
    """pNext chain for an allocation descriptor: import (DMA-BUF fd) and/or export request."""
    keep: list[Any] = []
    head: int | None = None
    if exportable:
        exp = ZeExternalMemoryExportDesc(stype=ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC,
                                         flags=ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF)
        keep.append(exp)
        head = ctypes.addressof(exp)
    if import_fd is not None:
        if not isinstance(import_fd, int):
            raise UnsupportedTypeError(f"import_fd must be an open file descriptor (an int >= 0), not {import_fd!r}")
        if import_fd < 0:
            raise InvalidTensorError(f"import_fd must be an open file descriptor (an int >= 0), not {import_fd!r}")
        imp = ZeExternalMemoryImportFd(stype=ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_FD, pNext=head,
                                       flags=ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF, fd=import_fd)
        keep.append(imp)
        head = ctypes.addressof(imp)
    return head, keep


def allocate(context: ZeContext, size: int, kind: str = "device", *, device: int | None = None,
             alignment: int = 0, import_fd: int | None = None, exportable: bool = False,
             keepalive: Any = None) -> Allocation:
    """zeMemAllocHost / Device / Shared; with ``import_fd`` the memory is that DMA-BUF's (no copy).

    ``device`` is needed for device and shared memory. ``keepalive`` is held until the memory is freed
    (pass the owner of ``import_fd``).
    """
    if kind not in _KINDS:
        raise UnsupportedTypeError(f"kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    if not isinstance(size, int) or size <= 0:
        raise InvalidTensorError(f"size must be a positive number of bytes, not {size!r}")
    if kind != "host" and not device:
        raise UnsupportedTypeError(f"{kind} memory needs a device handle: pass device=<ze_device_handle_t>")
    lib = loader()
    head, keep = _chain(import_fd, exportable)
    out = _P()
    call = {"host": "zeMemAllocHost", "device": "zeMemAllocDevice", "shared": "zeMemAllocShared"}[kind]
    hint = f"importing DMA-BUF fd {import_fd} of at least {size} bytes" if import_fd is not None else ""
    if kind == "host":
        hd = ZeHostMemAllocDesc(stype=ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, pNext=head)
        r = lib.zeMemAllocHost(_P(context.handle), ctypes.byref(hd), size, alignment, ctypes.byref(out))
    elif kind == "device":
        dd = ZeDeviceMemAllocDesc(stype=ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, pNext=head)
        r = lib.zeMemAllocDevice(_P(context.handle), ctypes.byref(dd), size, alignment, _P(device), ctypes.byref(out))
    else:
        dd = ZeDeviceMemAllocDesc(stype=ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, pNext=head)
        hd = ZeHostMemAllocDesc(stype=ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC)
        r = lib.zeMemAllocShared(_P(context.handle), ctypes.byref(dd), ctypes.byref(hd), size, alignment,
                                 _P(device), ctypes.byref(out))
    del keep
    _check(call, r, hint)
    return Allocation(context, int(out.value or 0), size, kind, device, import_fd, keepalive)


def import_dma_buf(context: ZeContext, fd: int, size: int, kind: str = "device", *, device: int | None = None,
                   keepalive: Any = None) -> Allocation:
    """Import a DMA-BUF fd as Level Zero memory of ``size`` bytes (from the fd's start). The fd stays the
    caller's and must stay open while the allocation lives (pass its owner as ``keepalive``)."""
    return allocate(context, size, kind, device=device, import_fd=fd, keepalive=keepalive)


def page_range(address: int, size: int, page: int = STANDARD_PAGE_SIZE) -> tuple[int, int]:
    """(start, size) of the whole pages holding [address, address + size)."""
    start = address - address % page
    end = -(-(address + size) // page) * page
    return start, end - start


def import_system_memory(context: ZeContext, pointer: int, size: int, *, keepalive: Any = None,
                         write_combined: bool = False) -> Allocation:
    """Import the caller's host pages [pointer, pointer + size) into ``context`` (zeMemAllocHost with
    ze_external_memory_import_system_memory_t chained). No copy: the allocation is that memory. Both must be
    multiples of STANDARD_PAGE_SIZE (InvalidTensorError otherwise, before the driver is asked); the memory must
    stay mapped until the allocation is released (``keepalive`` is held until then)."""
    for what, v in (("pointer", pointer), ("size", size)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InvalidTensorError(f"{what} must be a positive int, not {v!r}")
        if v % STANDARD_PAGE_SIZE:
            raise InvalidTensorError(f"system memory import needs a page-aligned {what} (a multiple of "
                                     f"{STANDARD_PAGE_SIZE}); got {v:#x}: import the whole pages (page_range())")
    imp = ZeExternalMemoryImportSystemMemory(stype=ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY,
                                             pSystemMemory=pointer, size=size)
    hd = ZeHostMemAllocDesc(stype=ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, pNext=ctypes.addressof(imp),
                            flags=ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED if write_combined else 0)
    out = _P()
    r = loader().zeMemAllocHost(_P(context.handle), ctypes.byref(hd), size, STANDARD_PAGE_SIZE, ctypes.byref(out))
    _check("zeMemAllocHost", r, f"importing {size} bytes of system memory at {pointer:#x}")
    return Allocation(context, int(out.value or 0), size, "host", None, None, keepalive, system_memory=True)


@dataclass(frozen=True)
class AllocProperties:
    type: str  # "host" | "device" | "shared" | "unknown"
    id: int
    page_size: int
    device: int | None


def alloc_properties(context: ZeContext, pointer: int) -> AllocProperties:
    """zeMemGetAllocProperties: "unknown" when ``pointer`` is not memory of ``context``."""
    p = ZeMemoryAllocationProperties(stype=ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES)
    dev = _P()
    _check("zeMemGetAllocProperties",
           loader().zeMemGetAllocProperties(_P(context.handle), _P(pointer), ctypes.byref(p), ctypes.byref(dev)))
    return AllocProperties(MEMORY_TYPE_NAMES.get(p.type, str(p.type)), p.id, p.pageSize, int(dev.value or 0) or None)


def export_dma_buf(context: ZeContext, pointer: int) -> int:
    """A new DMA-BUF fd for the allocation holding ``pointer`` (zeMemGetAllocProperties with
    ze_external_memory_export_fd_t chained). The caller owns the fd."""
    exp = ZeExternalMemoryExportFd(stype=ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD,
                                   flags=ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF, fd=-1)
    p = ZeMemoryAllocationProperties(stype=ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
                                     pNext=ctypes.addressof(exp))
    dev = _P()
    _check("zeMemGetAllocProperties",
           loader().zeMemGetAllocProperties(_P(context.handle), _P(pointer), ctypes.byref(p), ctypes.byref(dev)),
           "exporting a DMA-BUF fd")
    if p.type == ZE_MEMORY_TYPE_UNKNOWN:
        raise ZeError("zeMemGetAllocProperties", 0x78000004, f"0x{pointer:x} is not memory of {context!r}")
    if exp.fd < 0:
        raise ZeError("zeMemGetAllocProperties", 0x78000003, "the driver returned no DMA-BUF fd (export unsupported)")
    return int(exp.fd)


def address_range(context: ZeContext, pointer: int) -> tuple[int, int]:
    """(base address, size) of the allocation holding ``pointer``."""
    base = _P()
    size = ctypes.c_size_t(0)
    _check("zeMemGetAddressRange",
           loader().zeMemGetAddressRange(_P(context.handle), _P(pointer), ctypes.byref(base), ctypes.byref(size)))
    return int(base.value or 0), int(size.value)


def memcpy(context: ZeContext, device: int, dst: int, src: int, size: int) -> None:
    """Copy ``size`` bytes between any memory the device reaches (device USM included) and wait for it: a
    synchronous immediate command list (zeCommandListCreateImmediate + zeCommandListAppendMemoryCopy)."""
    if size <= 0:
        return
    lib = loader()
    desc = ZeCommandQueueDesc(stype=ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, mode=ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS)
    lst = _P()
    _check("zeCommandListCreateImmediate",
           lib.zeCommandListCreateImmediate(_P(context.handle), _P(device), ctypes.byref(desc), ctypes.byref(lst)))
    try:
        _check("zeCommandListAppendMemoryCopy",
               lib.zeCommandListAppendMemoryCopy(lst, _P(dst), _P(src), size, None, 0, None))
    finally:
        lib.zeCommandListDestroy(lst)
