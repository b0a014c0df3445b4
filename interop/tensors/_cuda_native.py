"""ctypes plumbing for CUDA tensors: DLPack capsules (legacy and versioned) and the few CUDA driver calls needed.

Nothing here imports torch or CuPy. The driver (``libcuda.so.1``) is loaded on first use only; DLPack capsules are
built and read with ctypes, so any producer (PyAV planes, torch, CuPy, objects with ``__cuda_array_interface__``)
can be exported the same way and our tensors' views (regions, planes at offsets) export what they describe.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import (
    POINTER,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InteropError, UnsupportedTypeError

# ---- DLPack ABI (dlpack.h 1.x) -------------------------------------------------------------------------------

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
USED_LEGACY, USED_VERSIONED = b"used_dltensor", b"used_dltensor_versioned"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", _Deleter),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_api.PyCapsule_IsValid.restype = c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, c_char_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
# The capsule destructor gets the dying capsule: take it as a raw pointer, never as a Python object.
_IsValidRaw = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))

_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_CODE_KINDS = {0: "i", 1: "u", 2: "f", 6: "b"}

# managed-tensor address -> (ctypes block, keep-alive object); the deleter drops the entry
_live: dict[int, tuple[Any, Any]] = {}
_live_lock = threading.Lock()


def _drop(addr: int | None) -> None:
    if addr:
        with _live_lock:
            _live.pop(addr, None)


@_Deleter
def _deleter(addr: int | None) -> None:  # called by the consumer, from any thread (ctypes takes the GIL)
    try:
        _drop(addr)
    except Exception:  # interpreter shutdown: nothing left to free
        pass


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(cap: int) -> None:
    # An unconsumed capsule still carries its original name: then we own the tensor and free it.
    try:
        for name in (LEGACY, VERSIONED):
            if _IsValidRaw(cap, name):
                _drop(_GetPointerRaw(cap, name))
                return
    except Exception:
        pass


_DESTRUCTOR = ctypes.cast(_capsule_destructor, c_void_p)


def dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    code = _DTYPE_CODES.get(dtype.kind)
    if code is None:
        raise BufferError(f"dtype {dtype} has no DLPack code")
    return code, dtype.itemsize * 8


def make_capsule(ptr: int, shape: tuple[int, ...], strides_bytes: tuple[int, ...], dtype: np.dtype,
                 device: tuple[int, int], keep: Any, *, versioned: bool, read_only: bool = False) -> Any:
    """A fresh DLPack capsule over ``ptr`` that keeps ``keep`` alive until the consumer's deleter runs."""
    n = len(shape)
    item = dtype.itemsize
    code, bits = dl_dtype(dtype)
    dims = (c_int64 * max(n, 1))(*shape)
    steps = (c_int64 * max(n, 1))(*[s // item for s in strides_bytes])
    m: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = m.dl_tensor
    t.data = ptr
    t.device.device_type, t.device.device_id = device
    t.ndim = n
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = dims
    t.strides = steps
    t.byte_offset = 0
    m.deleter = _deleter
    if versioned:
        m.version.major, m.version.minor = 1, 0
        m.flags = FLAG_READ_ONLY if read_only else 0
    addr = ctypes.addressof(m)
    with _live_lock:
        _live[addr] = ((m, dims, steps), keep)
    return _api.PyCapsule_New(addr, VERSIONED if versioned else LEGACY, _DESTRUCTOR)


def live_capsules() -> int:
    """How many capsules we made are still held by a consumer (or unconsumed): leak checks use it."""
    with _live_lock:
        return len(_live)


def read_capsule(cap: Any) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, np.dtype, tuple[int, int], bool]:
    """(data pointer incl. byte_offset, shape, strides in bytes or None, dtype, device, read_only) of a capsule.

    The capsule is only read: it is not renamed, so its destructor still frees it when it is dropped.
    """
    if _api.PyCapsule_IsValid(cap, VERSIONED):
        mv = ctypes.cast(_api.PyCapsule_GetPointer(cap, VERSIONED), POINTER(DLManagedTensorVersioned)).contents
        t, ro = mv.dl_tensor, bool(mv.flags & FLAG_READ_ONLY)
    elif _api.PyCapsule_IsValid(cap, LEGACY):
        t = ctypes.cast(_api.PyCapsule_GetPointer(cap, LEGACY), POINTER(DLManagedTensor)).contents.dl_tensor
        ro = False
    else:
        raise UnsupportedTypeError("not an unconsumed DLPack capsule")
    kind = _CODE_KINDS.get(t.dtype.code)
    if kind is None or t.dtype.lanes != 1:
        raise UnsupportedTypeError(f"DLPack dtype code {t.dtype.code} lanes {t.dtype.lanes} is not supported")
    dtype = np.dtype("bool") if kind == "b" else np.dtype(f"{kind}{t.dtype.bits // 8}")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim)) if t.strides else None
    return (t.data or 0) + t.byte_offset, shape, strides, dtype, (t.device.device_type, t.device.device_id), ro


# ---- the CUDA driver, loaded on first use ------------------------------------------------------------------

CU_STREAM_LEGACY, CU_STREAM_PER_THREAD = 1, 2
_CU_EVENT_DISABLE_TIMING = 2
_CU_MEMORYTYPE_HOST, _CU_MEMORYTYPE_DEVICE = 1, 2


class _Memcpy2D(ctypes.Structure):
    _fields_ = [("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcMemoryType", c_int), ("srcHost", c_void_p),
                ("srcDevice", c_uint64), ("srcArray", c_void_p), ("srcPitch", c_size_t),
                ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstMemoryType", c_int), ("dstHost", c_void_p),
                ("dstDevice", c_uint64), ("dstArray", c_void_p), ("dstPitch", c_size_t),
                ("WidthInBytes", c_size_t), ("Height", c_size_t)]


class Driver:
    """The CUDA driver calls interop needs: primary contexts, events, 2-D copies, pinned host memory."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise BackendUnavailableError("the CUDA backend needs an NVIDIA driver (libcuda.so.1 was not found)",
                                          backend="cuda") from e
        self.lib = lib
        for name in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
                     "cuEventCreate", "cuEventRecord", "cuStreamWaitEvent", "cuEventSynchronize",
                     "cuStreamSynchronize", "cuMemcpy2DAsync_v2", "cuMemHostAlloc", "cuMemFreeHost",
                     "cuDeviceGetCount", "cuDeviceGetName", "cuDriverGetVersion", "cuPointerGetAttribute",
                     "cuDevicePrimaryCtxGetState"):
            getattr(lib, name).restype = c_int
        self._check(lib.cuInit(0), "cuInit")
        self._ctx: dict[int, c_void_p] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise InteropError(f"CUDA driver call {what} failed with CUresult {rc}")

    def context(self, device: int) -> c_void_p:
        ctx = self._ctx.get(device)
        if ctx is None:
            with self._lock:
                dev = c_int()
                self._check(self.lib.cuDeviceGet(ctypes.byref(dev), c_int(device)), "cuDeviceGet")
                ctx = c_void_p()
                # The primary context is the one torch, CuPy and PyAV (primary_ctx=1) all use.
                self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
                self._ctx[device] = ctx
        return ctx

    def primary_state(self, device: int) -> tuple[int, bool]:
        """(flags, active) of the device's primary context."""
        dev = c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), c_int(device)), "cuDeviceGet")
        flags, active = ctypes.c_uint(), c_int()
        self._check(self.lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)),
                    "cuDevicePrimaryCtxGetState")
        return int(flags.value), bool(active.value)

    def push(self, device: int) -> None:
        self._check(self.lib.cuCtxPushCurrent_v2(self.context(device)), "cuCtxPushCurrent")

    def pop(self) -> None:
        self.lib.cuCtxPopCurrent_v2(ctypes.byref(c_void_p()))

    def _event(self, device: int) -> c_void_p:
        evs = getattr(self._local, "events", None)
        if evs is None:
            evs = self._local.events = {}
        ev = evs.get(device)
        if ev is None:
            ev = c_void_p()
            self._check(self.lib.cuEventCreate(ctypes.byref(ev), _CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            evs[device] = ev
        return ev

    def order(self, device: int, producer: int, consumer: int) -> None:
        """Make work queued later on ``consumer`` wait for what is queued now on ``producer`` (no host wait)."""
        self.push(device)
        try:
            ev = self._event(device)
            self._check(self.lib.cuEventRecord(ev, c_void_p(producer)), "cuEventRecord")
            self._check(self.lib.cuStreamWaitEvent(c_void_p(consumer), ev, 0), "cuStreamWaitEvent")
        finally:
            self.pop()

    def record(self, device: int, stream: int) -> c_void_p:
        """A new event recorded on ``stream`` (the caller keeps it, e.g. to know when a staging buffer is free)."""
        self.push(device)
        try:
            ev = c_void_p()
            self._check(self.lib.cuEventCreate(ctypes.byref(ev), _CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            self._check(self.lib.cuEventRecord(ev, c_void_p(stream)), "cuEventRecord")
            return ev
        finally:
            self.pop()

    def wait_event(self, device: int, ev: c_void_p) -> None:
        self.push(device)
        try:
            self._check(self.lib.cuEventSynchronize(ev), "cuEventSynchronize")
        finally:
            self.pop()

    def copy2d(self, device: int, stream: int, *, dst: int, dst_pitch: int, dst_host: bool, src: int, src_pitch: int,
               src_host: bool, width: int, height: int, sync: bool) -> None:
        """A pitched copy of ``height`` rows of ``width`` bytes, queued on ``stream`` (and waited for if ``sync``)."""
        c = _Memcpy2D()
        c.srcMemoryType = _CU_MEMORYTYPE_HOST if src_host else _CU_MEMORYTYPE_DEVICE
        c.dstMemoryType = _CU_MEMORYTYPE_HOST if dst_host else _CU_MEMORYTYPE_DEVICE
        if src_host:
            c.srcHost = src
        else:
            c.srcDevice = src
        if dst_host:
            c.dstHost = dst
        else:
            c.dstDevice = dst
        c.srcPitch, c.dstPitch, c.WidthInBytes, c.Height = src_pitch, dst_pitch, width, height
        self.push(device)
        try:
            self._check(self.lib.cuMemcpy2DAsync_v2(ctypes.byref(c), c_void_p(stream)), "cuMemcpy2DAsync")
            if sync:
                self._check(self.lib.cuStreamSynchronize(c_void_p(stream)), "cuStreamSynchronize")
        finally:
            self.pop()

    def host_alloc(self, device: int, nbytes: int) -> int:
        """Page-locked host memory, usable by every context (CU_MEMHOSTALLOC_PORTABLE)."""
        self.push(device)
        try:
            p = c_void_p()
            self._check(self.lib.cuMemHostAlloc(ctypes.byref(p), c_size_t(max(nbytes, 1)), 1), "cuMemHostAlloc")
            return int(p.value or 0)
        finally:
            self.pop()

    def host_free(self, ptr: int) -> None:
        self.lib.cuMemFreeHost(c_void_p(ptr))

    def devices(self) -> list[str]:
        n = c_int()
        self._check(self.lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        out = []
        for i in range(n.value):
            dev = c_int()
            self.lib.cuDeviceGet(ctypes.byref(dev), c_int(i))
            buf = ctypes.create_string_buffer(256)
            self.lib.cuDeviceGetName(buf, 256, dev)
            out.append(buf.value.decode(errors="replace"))
        return out

    def version(self) -> str:
        v = c_int()
        self.lib.cuDriverGetVersion(ctypes.byref(v))
        return f"{v.value // 1000}.{v.value % 1000 // 10}"


_driver: Driver | None = None
_driver_lock = threading.Lock()


def driver() -> Driver:
    """The process's CUDA driver binding (BackendUnavailableError where there is no NVIDIA driver)."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = Driver()
    return _driver


def set_driver(d: Any) -> None:
    """Replace the driver binding (tests use a fake that records calls)."""
    global _driver
    _driver = d
