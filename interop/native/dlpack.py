"""The DLPack ABI (dlpack.h 1.x) through ctypes: capsules (legacy and versioned) built and read without torch or CuPy.

Any producer (PyAV planes, torch, CuPy, objects with ``__cuda_array_interface__``) can be read the same way, and
interop's own views (regions, planes at offsets) export exactly what they describe.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any

import numpy as np

from .._locks import FinalizerLock
from ..errors import UnsupportedTypeError

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
# _drop() runs from capsule destructors, which the collector may start inside one of these critical sections
_live_lock = FinalizerLock()


def _drop(addr: int | None) -> None:
    if addr:
        _live_lock.call(_forget, addr)


def _forget(addr: int) -> Any:
    entry = _live.pop(addr, None)
    return lambda: entry  # what the capsule kept alive goes after the lock is let go (its finalisers may take locks)


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
