"""SYCL USM tensors (dpctl) on the OpenCL context OpenCV owns.

``SYCLContext`` wraps a ``dpctl.SyclQueue``. The default one is built over the shared cl_context (OpenCV's,
as wrapped by pyopencl), so a USM pointer from dpctl is a USM allocation of that very cl_context and OpenCL
kernels take it directly (Intel USM extension). That adoption goes through a DPC++ ABI trick isolated in
``interop.native.sycl_context``; when it fails, the default is a separate dpctl context on the same device
(``shared_with_opencl`` False) and USM <-> OpenCL moves become counted copies.

``USMTensor(native, info, *, pointer, usm_type, context, parent=None, offset=0, writable=True)``: ``native`` is
the allocation object (a dpctl ``MemoryUSM*`` or any object with ``.pointer``), ``pointer`` the allocation's
base address, ``offset`` the bytes from there to element 0. ``.pointer`` (handle ``usm_ptr``) is the address of
element 0. Host and shared allocations are CPU-reachable (numpy, DLPack); device allocations are not.

A USM context (this module's SYCLContext, or the Level Zero backend's) provides ``memcpy(dst, src, nbytes)``
(blocking, addresses as ints) for the copying mappers.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import Any

import numpy as np

from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    register_backend,
    register_wrapper,
    require,
)
from ..context import Context, register_default_context
from ..errors import (
    BackendUnavailableError,
    ContextMismatchError,
    InteropError,
    InvalidTensorError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo
from ..tensor import Tensor, _ArrayExport
from ..types import FrameFormat, MemoryType

log = logging.getLogger("interop")
USM_TYPES = ("host", "shared", "device")
_lock = threading.RLock()
_live: weakref.WeakSet = weakref.WeakSet()
_contexts: dict[Any, SYCLContext] = {}


_mod: Any = None


def dpctl() -> Any:
    global _mod
    if _mod is None:
        if "dpctl" not in sys.modules:
            # Level Zero keeps the first zeInit of the process; SYCL's GPU-only one would hide an NPU from
            # Level Zero (ours and OpenVINO's NPU plugin's), so initialise it for every driver first.
            from ..native.level_zero import init_early

            init_early()
        _mod = require("dpctl", "usm")
    return _mod


class _SUAI:
    """A minimal ``__sycl_usm_array_interface__`` over (pointer, nbytes) so dpctl accepts interior pointers.

    dpctl's ``as_usm_memory`` keeps this object as the memory's ``reference_obj``; ``owner`` (whatever keeps the
    allocation alive) rides on it, so the dpctl memory object handed out as ``.native`` holds the allocation.
    """

    def __init__(self, ptr: int, nbytes: int, queue: Any, readonly: bool = False, owner: Any = None):
        self.owner = owner
        self.__sycl_usm_array_interface__ = {"data": (int(ptr), readonly), "shape": (int(nbytes),), "strides": None,
                                             "typestr": "|u1", "version": 1, "syclobj": queue}


class SYCLContext(Context):
    """A dpctl queue (in-order) and its SYCL context. ``cl_context`` is the native OpenCL context under it
    (int) when the backend is OpenCL, else None; two SYCLContexts over one cl_context are equal."""

    memory_type = MemoryType.USM

    def __init__(self, queue: Any, *, parent: Context | None = None, source: str = "dpctl"):
        d = dpctl()
        if not isinstance(queue, d.SyclQueue):
            raise UnsupportedTypeError(f"SYCLContext needs a dpctl.SyclQueue, not {type(queue).__name__}")
        super().__init__(native=queue, device=queue.sycl_device, parent=parent)
        self.queue = queue
        self.source = source
        self.cl_context: int | None = None
        if queue.sycl_device.backend == d.backend_type.opencl:
            from ..native.sycl_context import SyclABIError, peek_cl_context

            try:
                self.cl_context = peek_cl_context(queue.sycl_context)
            except SyclABIError as e:
                log.info("cannot read the cl_context under a dpctl queue: %s", e)

    @property
    def sycl_context(self) -> Any:
        return self.queue.sycl_context

    def key(self) -> Any:
        if self.cl_context is not None:
            return ("cl", self.cl_context)
        return ("sycl", hash(self.queue.sycl_context))

    @property
    def shared_with_opencl(self) -> bool:
        """True when this SYCL context is the default OpenCL context (one cl_context for OpenCV, pyopencl, dpctl)."""
        try:
            ocl = Context.default(MemoryType.OPENCL)
        except InteropError:
            return False
        # an OpenCLContext, read by its attribute: tensors/opencl and tensors/usm never import each other
        return self.cl_context is not None and self.cl_context == getattr(ocl, "cl_context", None)

    def allocate(self, nbytes: int, usm_type: str = "shared") -> Any:
        """A new dpctl USM allocation of ``nbytes`` on this queue."""
        mem = dpctl().memory
        cls = {"host": mem.MemoryUSMHost, "shared": mem.MemoryUSMShared, "device": mem.MemoryUSMDevice}.get(usm_type)
        if cls is None:
            raise InvalidTensorError(f"usm_type must be one of {USM_TYPES}, not {usm_type!r}")
        return cls(max(int(nbytes), 1), queue=self.queue)

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        """Blocking copy of ``nbytes`` between USM and/or host addresses on this queue."""
        if nbytes <= 0:
            return
        import ctypes

        def obj(ptr: int) -> Any:  # dpctl takes USM through SUAI and host memory through the buffer protocol
            if self.pointer_type(ptr) != "unknown":
                return dpctl().memory.as_usm_memory(_SUAI(ptr, nbytes, self.queue))
            return (ctypes.c_char * nbytes).from_address(ptr)

        self.queue.memcpy(obj(dst), obj(src), nbytes)

    def pointer_type(self, ptr: int) -> str:
        """'host', 'shared', 'device' or 'unknown' for an address in this SYCL context."""
        try:
            m = dpctl().memory.as_usm_memory(_SUAI(ptr, 1, self.queue))
        except Exception:
            return "unknown"
        return str(m.get_usm_type())

    @classmethod
    def from_opencl(cls, ocl: Any) -> SYCLContext:
        """A SYCLContext over the same cl_context as an OpenCLContext (ABI trick; SyclABIError if unsafe)."""
        from ..native.sycl_context import sycl_context_from_cl

        sctx = sycl_context_from_cl(ocl.cl_context)
        d = dpctl()
        q = d.SyclQueue(sctx, sctx.get_devices()[0], property="in_order")
        return cls(q, parent=ocl, source=f"dpctl over {getattr(ocl, 'source', 'pyopencl')}'s cl_context")

    def __repr__(self) -> str:
        cl = f" cl_context={self.cl_context:#x}" if self.cl_context is not None else ""
        return f"<SYCLContext {self._device.name!r}{cl} ({self.source})>"


def _default_context() -> SYCLContext:
    d = dpctl()
    try:
        ocl = Context.default(MemoryType.OPENCL)
        return SYCLContext.from_opencl(ocl)
    except InteropError as e:
        log.warning("dpctl cannot share the OpenCL context (%s); using a separate SYCL context: moves between USM "
                    "and OpenCL will be counted copies", e)
    try:
        q = d.SyclQueue("opencl:cpu", property="in_order")
    except Exception:
        try:
            q = d.SyclQueue(property="in_order")
        except Exception as e:  # dpctl's SyclQueueCreationError: no SYCL device at all in this process
            from .. import _runtime

            why = "; ".join(_runtime.STATE.problems) or (
                "no OpenCL or Level Zero device: install Intel's CPU OpenCL runtime (pip install 'interop-video[opencl]')")
            raise BackendUnavailableError(f"dpctl found no SYCL device ({e}): {why}", backend="usm",
                                          extra="sycl") from e
    return SYCLContext(q, source="dpctl (separate context)")


register_default_context(MemoryType.USM, _default_context)


def context_for_queue(queue: Any) -> SYCLContext:
    """The SYCLContext of a dpctl queue: the default one when it is the same SYCL/OpenCL context."""
    try:
        default = Context.default(MemoryType.USM)
        if isinstance(default, SYCLContext) and default.sycl_context == queue.sycl_context:
            return default
    except InteropError:
        pass
    ctx = SYCLContext(queue)
    with _lock:
        return _contexts.setdefault(ctx.key(), ctx)


# ---- tensors ---------------------------------------------------------------------------------------------------


def host_view(address: int, info: TensorInfo, owner: Any, *, writable: bool) -> np.ndarray:
    """A numpy view of ``info`` at a host-reachable address; ``owner`` is kept alive by the view."""
    iface = {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (int(address), not writable), "strides": info.strides}
    return np.asarray(_ArrayExport(iface, owner))


class USMTensor(Tensor):
    """A tensor in a USM allocation (see the module docstring for the arguments)."""

    memory_type = MemoryType.USM
    HANDLE_KEYS = {"usm_ptr": "pointer", "offset": "offset"}

    def __init__(self, native: Any, info: TensorInfo, *, pointer: int, usm_type: str, context: Context,
                 parent: Any = None, offset: int = 0, writable: bool = True):
        if usm_type not in USM_TYPES:
            raise InvalidTensorError(f"usm_type must be one of {USM_TYPES}, not {usm_type!r}")
        if isinstance(pointer, bool) or not isinstance(pointer, (int, np.integer)) or pointer <= 0:
            raise InvalidTensorError(f"pointer must be a non-null address (int), got {pointer!r}")
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
            raise InvalidTensorError(f"offset must be a non-negative int, got {offset!r}")
        if not isinstance(context, Context) or context.memory_type is not MemoryType.USM:
            raise ContextMismatchError(f"a USM tensor needs a USM context (SYCLContext, LevelZeroContext), not {context!r}")
        size = getattr(native, "nbytes", None)
        if isinstance(info, TensorInfo) and isinstance(size, int) and offset + info.extent > size:
            raise InvalidTensorError(f"{info} at offset {offset} needs {offset + info.extent} bytes but the USM "
                                     f"allocation holds {size}; check the info given to wrap()")
        super().__init__(native, info, context=context, parent=parent, writable=writable)
        self._base = int(pointer)
        self._offset = int(offset)
        self._usm_type = usm_type
        _live.add(self)

    @property
    def pointer(self) -> int:
        """USM address of element 0."""
        self._check()
        return self._base + self._offset

    @property
    def base_pointer(self) -> int:
        return self._base

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def usm_type(self) -> str:
        return self._usm_type

    def _host_address(self) -> int | None:
        return self._base + self._offset if self._usm_type in ("host", "shared") else None

    @property
    def __sycl_usm_array_interface__(self) -> dict[str, Any]:
        self._check()
        info = self._info
        strides = None if info.is_contiguous else tuple(s // info.itemsize for s in info.strides)
        ctx: Any = self._context
        syclobj = getattr(ctx, "queue", None) or ctx.native
        return {"data": (self.pointer, not self._writable), "shape": info.shape, "strides": strides,
                "typestr": info.dtype.str, "version": 1, "syclobj": syclobj, "offset": 0}

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        self._check()
        ctx: Any = self._context
        return USMTensor(self._native, info, pointer=self._base, usm_type=self._usm_type, context=ctx,
                         parent=self, offset=self._offset + offset, writable=self._writable)

    def __repr__(self) -> str:
        if self._released:
            return "<USMTensor released>"
        return f"<USMTensor {self._usm_type} shape={self._info.shape} dtype={self._info.dtype} ptr={self.pointer:#x}>"


def allocate(info: TensorInfo, usm_type: str = "shared", context: SYCLContext | None = None) -> USMTensor:
    """A new USM tensor (dpctl allocation of ``info.extent`` bytes)."""
    ctx = context or Context.default(MemoryType.USM)
    if not isinstance(ctx, SYCLContext):
        raise ContextMismatchError(f"allocate() needs a SYCLContext, not {ctx!r}")
    mem = ctx.allocate(info.extent, usm_type)
    return USMTensor(mem, info, pointer=int(mem._pointer), usm_type=usm_type, context=ctx)


def live_count() -> int:
    """USMTensors alive and not released (leak checks)."""
    return sum(1 for t in list(_live) if not t.released)


# ---- wrap() ----------------------------------------------------------------------------------------------------


def _is_dpctl_memory(cls: type) -> bool:
    return class_in(cls, "dpctl.memory", "MemoryUSMShared", "MemoryUSMHost", "MemoryUSMDevice", "_Memory")


def _has_suai(cls: type) -> bool:
    return hasattr(cls, "__sycl_usm_array_interface__") and not class_in(cls, "interop")


def wrap_usm(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
             context: Context | None = None) -> Tensor | Frame:
    """dpctl USM memory (shapeless: give ``info``, else one byte per element) or any SUAI producer."""
    if format is not None:
        raise UnsupportedTypeError("wrap(USM memory, format=) is not supported; wrap the planes and build a Frame")
    if context is not None and not isinstance(context, SYCLContext):
        raise UnsupportedTypeError(f"dpctl memory belongs to a SYCLContext, not {context!r}")
    if _is_dpctl_memory(type(obj)):
        mem = obj
        if info is None:
            info = TensorInfo((mem.nbytes,), np.uint8)
        ctx = context_for_queue(mem.sycl_queue)
        if context is not None and context != ctx:
            raise ContextMismatchError(f"this USM allocation belongs to {ctx!r}, not {context!r}")
        return USMTensor(mem, info, pointer=int(mem._pointer), usm_type=str(mem.get_usm_type()), context=ctx)
    suai = obj.__sycl_usm_array_interface__
    mem = dpctl().memory.as_usm_memory(obj)  # validates the pointer and finds the allocation type
    dt = np.dtype(suai["typestr"])
    shape = tuple(suai["shape"])
    el_off = int(suai.get("offset", 0) or 0)
    strides = None if suai.get("strides") is None else tuple(s * dt.itemsize for s in suai["strides"])
    got = TensorInfo(shape, dt, strides)
    if info is not None and info != got:
        raise InvalidTensorError(f"info {info} does not describe this array ({got}); leave info out")
    ctx = context_for_queue(mem.sycl_queue)
    return USMTensor(mem, got, pointer=int(suai["data"][0]) + el_off * dt.itemsize, usm_type=str(mem.get_usm_type()),
                     context=ctx, parent=obj, writable=not suai["data"][1])


register_wrapper(Wrapper("dpctl USM memory", _is_dpctl_memory, wrap_usm, priority=10))
register_wrapper(Wrapper("__sycl_usm_array_interface__ producers", _has_suai, wrap_usm, priority=8))


# ---- doctor ----------------------------------------------------------------------------------------------------


def _probe() -> list[BackendReport]:
    why = BACKEND.missing()
    if why is not None:
        return [BackendReport(BACKEND.title, False, reason=f"{why} (dpctl)")]
    d = dpctl()
    try:
        devices = [f"{x.name} ({x.backend.name})" for x in d.get_devices()]
    except Exception as e:
        return [BackendReport(BACKEND.title, True, f"dpctl {d.__version__}", reason=f"no SYCL device: {e}")]
    try:
        ctx = Context.default(MemoryType.USM)
        assert isinstance(ctx, SYCLContext)
        details: dict[str, Any] = {"context": ctx.source, "shared with OpenCL": ctx.shared_with_opencl}
        if ctx.cl_context is not None:
            details["cl_context"] = f"{ctx.cl_context:#x}"
        details["usm types"] = ", ".join(USM_TYPES)
    except Exception as e:
        return [BackendReport(BACKEND.title, True, f"dpctl {d.__version__}", devices, reason=f"no usable queue: {e}")]
    return [BackendReport(BACKEND.title, True, f"dpctl {d.__version__}", devices, "A", details=details)]


# Its probe derives the SYCL queue from the OpenCL context the OpenCL probe reported.
BACKEND = register_backend(Backend("usm", "SYCL USM (dpctl)", (MemoryType.USM,), tier="A", extra="sycl",
                                   requires=("dpctl",), probe=_probe, after=("opencl",)))
