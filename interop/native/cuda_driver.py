"""The few CUDA driver calls interop makes (``libcuda.so.1`` through ctypes, loaded on first use): primary
contexts, events for stream ordering, pitched 2-D copies, pinned host memory.

Nothing here imports torch or CuPy. ``set_driver`` swaps the binding (tests use a CPU fake).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import c_int, c_size_t, c_uint64, c_void_p
from typing import Any

from ..errors import BackendUnavailableError, InteropError

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
        rc = lib.cuInit(0)
        if rc != 0:  # the library is there but no GPU answers (100: none visible, e.g. a container without its GPUs)
            raise BackendUnavailableError(f"the NVIDIA driver sees no usable GPU (cuInit returned CUresult {rc}; 100 "
                                          f"is no device: is the GPU visible to this process or container?)",
                                          backend="cuda")
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
