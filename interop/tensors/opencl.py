"""OpenCL tensors (pyopencl) on a context shared with OpenCV and dpctl.

``OpenCLContext`` is a cl_context plus one in-order command queue. The default one is OpenCV's own context and
queue wrapped by pyopencl (OpenCV cannot adopt a foreign context from Python, so OpenCV owns it; docs/opencl.md),
and dpctl adopts the same cl_context (``interop.tensors.usm``). Work enqueued by OpenCV, by pyopencl and by
interop's mappers on that queue is ordered without extra synchronisation.

``OpenCLTensor.native`` is the ``pyopencl.Buffer`` of the *whole* allocation; a region lives in ``offset``
(bytes), never in a sub-buffer, whose origin would need device alignment.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    lazy_module,
    register_backend,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import ContextMismatchError, InteropError, InvalidTensorError, UnsupportedTypeError
from ..frame import Frame
from ..info import TensorInfo, contiguous_strides, packed_offsets, plane_infos
from ..tensor import Tensor, _ArrayExport
from ..types import AccessMode, FrameFormat, MemoryType

if TYPE_CHECKING:
    from .cpu import CPUTensor

_lock = threading.RLock()
_live: weakref.WeakSet = weakref.WeakSet()
_contexts: dict[int, OpenCLContext] = {}


cl = lazy_module("pyopencl", "opencl")


class OpenCLContext(Context):
    """A cl_context and one in-order queue. Two OpenCLContexts are equal when their cl_context is the same.

    ``native`` is the ``pyopencl.Context``; ``queue`` the ``pyopencl.CommandQueue``; ``device`` the
    ``pyopencl.Device``; ``source`` says who created the context ('opencv', 'sycl', 'pyopencl').
    """

    memory_type = MemoryType.OPENCL

    def __init__(self, cl_context: Any, queue: Any = None, *, parent: Context | None = None, source: str = "pyopencl"):
        cl_ = cl()
        if not isinstance(cl_context, cl_.Context):
            raise UnsupportedTypeError(f"OpenCLContext needs a pyopencl.Context, not {type(cl_context).__name__}")
        if queue is None:
            queue = cl_.CommandQueue(cl_context)  # in-order by default
        elif queue.context.int_ptr != cl_context.int_ptr:
            raise ContextMismatchError("the command queue belongs to another cl_context than the one given")
        super().__init__(native=cl_context, device=cl_context.devices[0], parent=parent)
        self.queue = queue
        self.source = source
        self._programs: dict[str, Any] = {}

    def key(self) -> Any:
        return self._native.int_ptr

    @property
    def cl_context(self) -> int:
        """The cl_context handle as an int."""
        return int(self._native.int_ptr)

    @property
    def host_shared(self) -> bool:
        """True when the device works in host memory (the CPU device): USE_HOST_PTR buffers are zero-copy."""
        dev = self._device
        return bool(dev.type & cl().device_type.CPU)

    def build(self, source: str) -> Any:
        """A built ``pyopencl.Program`` for ``source``, cached per context."""
        with _lock:
            prg = self._programs.get(source)
            if prg is None:
                import warnings

                with warnings.catch_warnings():  # the Intel compiler's informational build log is not a problem
                    warnings.simplefilter("ignore", cl().CompilerWarning)
                    try:
                        prg = cl().Program(self._native, source).build()
                    except cl().Error:
                        raise
                    except Exception:  # pyopencl's on-disk binary cache is unusable (seen: a corrupt sqlite file)
                        prg = cl().Program(self._native, source).build(cache_dir=False)
                self._programs[source] = prg
            return prg

    def finish(self) -> None:
        self.queue.finish()

    @classmethod
    def from_opencv(cls) -> OpenCLContext:
        """OpenCV's OpenCL context and queue, wrapped by pyopencl (the same cl_context, not a copy)."""
        from .opencv import UMatContext

        ucx = Context.default(MemoryType.OPENCV_UMAT)
        assert isinstance(ucx, UMatContext)
        cl_ = cl()
        ctx = cl_.Context.from_int_ptr(ucx.cl_context)  # retains
        queue = cl_.CommandQueue.from_int_ptr(ucx.cl_queue)
        return cls(ctx, queue, parent=ucx, source="opencv")

    def __repr__(self) -> str:
        try:
            dev = self._device.name.strip()
        except Exception:
            dev = "?"
        return f"<OpenCLContext {self.cl_context:#x} device={dev!r} from {self.source}>"


def context_for(cl_context: Any, queue: Any = None) -> OpenCLContext:
    """The OpenCLContext of a pyopencl.Context: the default one when it is the same cl_context."""
    key = int(cl_context.int_ptr)
    with _lock:
        try:
            default = Context.default(MemoryType.OPENCL)
            if isinstance(default, OpenCLContext) and default.cl_context == key:
                return default
        except InteropError:
            pass
        got = _contexts.get(key)
        if got is None:
            got = OpenCLContext(cl_context, queue)
            _contexts[key] = got
        return got


def _default_context() -> OpenCLContext:
    try:
        return OpenCLContext.from_opencv()
    except InteropError:
        pass  # no OpenCV (or no OpenCL in it): a context of our own on the first CPU device, else any device
    cl_ = cl()
    try:
        platforms = cl_.get_platforms()
    except cl_.Error as e:
        from .. import _runtime
        from ..errors import BackendUnavailableError

        why = "".join(f"; {p}" for p in _runtime.STATE.problems)  # e.g. openvino imported before interop
        raise BackendUnavailableError(f"no OpenCL platform: {e}{why}", backend=BACKEND.name, extra=BACKEND.extra) from e
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        from ..errors import BackendUnavailableError

        raise BackendUnavailableError("no OpenCL device", backend=BACKEND.name, extra=BACKEND.extra)
    dev = next((d for d in devices if d.type & cl_.device_type.CPU and "Intel" in d.platform.name), devices[0])
    return OpenCLContext(cl_.Context([dev]), source="pyopencl")


register_default_context(MemoryType.OPENCL, _default_context)


# ---- layout helpers -----------------------------------------------------------------------------------------


def pitch_linear(info: TensorInfo) -> tuple[int, int, int]:
    """(rows, row_bytes, pitch) of a tensor whose rows are contiguous; InvalidTensorError for other layouts."""
    if info.is_contiguous or info.ndim < 2:
        if not info.is_contiguous:
            raise InvalidTensorError(f"a 1-D strided tensor {info} cannot be copied as rows; make it contiguous")
        return 1, info.nbytes, info.nbytes
    inner = info.shape[1:]
    if tuple(info.strides[1:]) != contiguous_strides(inner, info.itemsize) and math.prod(inner) > 1:
        raise InvalidTensorError(f"{info}: only row-padded layouts (contiguous within a row) can be copied")
    row = math.prod(inner) * info.itemsize
    return info.shape[0], row, info.strides[0]


def _flat_pair(a: TensorInfo, b: TensorInfo, refusal: str) -> bool | None:
    """For a copy between ``a`` and ``b``: None when there is nothing to copy, True when each side is one run of
    bytes, False when rows must be copied one pitch apart. InvalidTensorError (``refusal`` formatted with ``a`` and
    ``b``) when shapes or dtypes differ, or (from pitch_linear) when either side's rows are not contiguous."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise InvalidTensorError(refusal.format(a=a, b=b))
    if a.nbytes == 0:
        return None
    a_rows, b_rows = pitch_linear(a)[0], pitch_linear(b)[0]  # both sides checked, whatever the first gives
    return a_rows == 1 and b_rows == 1


def _region(info: TensorInfo, offset: int) -> tuple[tuple[int, int, int], tuple[int, int], tuple[int, int, int]]:
    """(origin, pitches, region) of a rectangular enqueue_copy over a non-empty region starting ``offset`` bytes
    into its buffer: one row of the whole extent per first-axis index; a single-row side takes the row as pitch."""
    nrows, _row, pitch = pitch_linear(info)
    rows, row = info.shape[0], info.nbytes // info.shape[0]
    pitch = pitch if nrows > 1 else row
    return (offset % pitch, offset // pitch, 0), (pitch, 0), (row, rows, 1)


def enqueue_copy_region(queue: Any, dst: Any, dst_offset: int, dst_info: TensorInfo, src: Any, src_offset: int,
                        src_info: TensorInfo) -> int:
    """Copy the elements of one buffer region into another (both pyopencl Buffers); returns bytes written."""
    cl_ = cl()
    flat = _flat_pair(src_info, dst_info, "cannot copy {a} into {b}: shapes or dtypes differ")
    if flat is None:
        return 0
    if flat:
        cl_.enqueue_copy(queue, dst, src, byte_count=src_info.nbytes, src_offset=src_offset, dst_offset=dst_offset)
    else:
        src_origin, src_pitches, region = _region(src_info, src_offset)
        dst_origin, dst_pitches, _ = _region(dst_info, dst_offset)
        cl_.enqueue_copy(queue, dst, src, src_origin=src_origin, dst_origin=dst_origin, region=region,
                         src_pitches=src_pitches, dst_pitches=dst_pitches)
    return src_info.nbytes


def enqueue_host_copy(queue: Any, buf: Any, buf_offset: int, buf_info: TensorInfo, host: np.ndarray,
                      to_device: bool) -> int:
    """Blocking copy between a buffer region and a host array of the same shape (row-padded layouts on either
    side); returns the bytes written."""
    import ctypes

    cl_ = cl()
    host_info = TensorInfo(host.shape, host.dtype, host.strides)
    flat = _flat_pair(host_info, buf_info, "cannot copy between {b} and a host array {a}")
    if flat is None:
        return 0
    raw: Any = (ctypes.c_char * host_info.extent).from_address(host.__array_interface__["data"][0])
    span = np.frombuffer(raw, np.uint8)
    if flat:
        if to_device:
            cl_.enqueue_copy(queue, buf, span, dst_offset=buf_offset)
        else:
            cl_.enqueue_copy(queue, span, buf, src_offset=buf_offset)
        return buf_info.nbytes
    buffer_origin, buffer_pitches, region = _region(buf_info, buf_offset)
    host_origin, host_pitches, _ = _region(host_info, 0)
    kw = dict(buffer_origin=buffer_origin, host_origin=host_origin, region=region, buffer_pitches=buffer_pitches,
              host_pitches=host_pitches)
    if to_device:
        cl_.enqueue_copy(queue, buf, span, **kw)
    else:
        cl_.enqueue_copy(queue, span, buf, **kw)
    return buf_info.nbytes


# ---- tensors ------------------------------------------------------------------------------------------------


class OpenCLTensor(Tensor):
    """A region of an OpenCL buffer: ``native`` is the whole allocation's ``pyopencl.Buffer``, ``offset`` the
    byte offset of element 0 in it. ``usm_pointer`` is set when the buffer was made over a USM allocation (its
    base address); OpenCL kernels can then take ``usm_pointer + offset`` directly (``set_kernel_arg``).
    """

    memory_type = MemoryType.OPENCL
    HANDLE_KEYS = {"cl_mem": "cl_mem", "offset": "offset"}

    def __init__(self, buffer: Any, info: TensorInfo, *, offset: int = 0, context: OpenCLContext | None = None,
                 parent: Any = None, writable: bool = True, usm_pointer: int | None = None):
        cl_ = cl()
        if not isinstance(buffer, cl_.Buffer):
            raise UnsupportedTypeError(f"OpenCLTensor wraps a pyopencl.Buffer, not {type(buffer).__name__}")
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
            raise InvalidTensorError(f"offset must be a non-negative int, got {offset!r}")
        if isinstance(info, TensorInfo) and int(offset) + info.extent > buffer.size:
            raise InvalidTensorError(
                f"{info} at offset {offset} needs {int(offset) + info.extent} bytes but the cl_mem holds {buffer.size}; "
                f"check the shape, strides and offset given to wrap()")
        if context is None:
            context = context_for(buffer.context)
        elif not isinstance(context, OpenCLContext):
            raise ContextMismatchError(f"an OpenCL tensor needs an OpenCLContext, not {context!r}")
        elif context.cl_context != buffer.context.int_ptr:
            raise ContextMismatchError(
                f"the buffer belongs to cl_context {buffer.context.int_ptr:#x}, not to {context!r}; wrap it without "
                f"context= or with the context it was created in")
        super().__init__(buffer, info, context=context, parent=parent, writable=writable)
        self._offset = int(offset)
        self._usm = usm_pointer
        _live.add(self)

    @property
    def cl_mem(self) -> int:
        """The cl_mem handle of the whole allocation (int)."""
        self._check()
        return int(self._native.int_ptr)

    @property
    def offset(self) -> int:
        """Byte offset of element 0 in the buffer."""
        return self._offset

    @property
    def buffer(self) -> Any:
        return self.native

    @property
    def queue(self) -> Any:
        ctx = self.context
        assert isinstance(ctx, OpenCLContext)
        return ctx.queue

    @property
    def usm_pointer(self) -> int | None:
        """USM address of element 0 when the buffer lies over a USM allocation, else None."""
        return None if self._usm is None else self._usm + self._offset

    def set_kernel_arg(self, kernel: Any, index: int) -> None:
        """Pass this tensor's element 0 as kernel argument ``index``.

        A USM-backed tensor passes its USM pointer (``clSetKernelArgMemPointerINTEL``), so the offset needs no
        extra argument; a plain buffer at offset 0 passes the cl_mem; a plain buffer at another offset cannot
        be passed as one pointer (pass ``cl_mem`` and ``offset`` separately).
        """
        self._check()
        if self._usm is not None:
            from ..native.opencl_usm import usm_functions

            ctx: Any = self._context
            usm_functions(ctx.device.platform.int_ptr).set_kernel_arg(kernel.int_ptr, index, self._usm + self._offset)
        elif self._offset == 0:
            kernel.set_arg(index, self._native)
        else:
            raise InteropError(f"this tensor starts {self._offset} bytes into its cl_mem: pass the buffer and the offset "
                               f"as two kernel arguments (OpenCL buffers cannot be offset without a sub-buffer)")

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        self._check()
        ctx: Any = self._context
        return OpenCLTensor(self._native, info, offset=self._offset + offset, context=ctx, parent=self,
                            writable=self._writable, usm_pointer=self._usm)

    def __repr__(self) -> str:
        if self._released:
            return "<OpenCLTensor released>"
        return f"<OpenCLTensor shape={self._info.shape} dtype={self._info.dtype} cl_mem={self._native.int_ptr:#x} offset={self._offset}>"


def map_flags(mode: AccessMode) -> int:
    mf = cl().map_flags
    return (mf.READ if mode.reads else 0) | (mf.WRITE if mode.writes else 0)


def map_to_host(t: OpenCLTensor, mode: AccessMode, *, writable: bool | None = None) -> CPUTensor:
    """Map ``t``'s region into host memory (clEnqueueMapBuffer on the tensor's queue): a CPU view of it.

    The region is unmapped (which is when WRITE mappings become visible to the device) when the mapped array is
    gone: at release when no numpy view of the tensor outlives it, else when the last view is gone. A view kept
    past release goes on reading the mapped memory, which on a discrete GPU is only valid while mapped.
    """
    from ._fastpath import MappedView
    from .cpu import CPUTensor, view_bytes

    cl_ = cl()
    info = t.info
    w = mode.writes if writable is None else writable
    if info.extent == 0:
        return CPUTensor(np.empty(info.shape, info.dtype), parent=t, writable=w)
    q = t.queue
    arr, _ev = cl_.enqueue_map_buffer(q, t.native, map_flags(mode), t.offset, (info.extent,), np.uint8)
    view = view_bytes(arr, 0, info, writable=w)  # its base holds ``arr``, whose base is the pyopencl MemoryMap
    with _maps_lock:
        _maps[0] += 1
    # ``t`` rides along so that the source (a UMat, a pool buffer) outlives the mapping, not only the cl_mem
    # not at exit: by then the OpenCL runtime may be gone, and the process's mappings go with it anyway
    weakref.finalize(arr, _unmap, arr.base, q, t).atexit = False
    return MappedView.of(view, info, t, w and view.flags.writeable, int(view.__array_interface__["data"][0]))


_maps_lock = threading.Lock()
_maps = [0]


def _unmap(mapping: Any, queue: Any, source: Any) -> None:
    if sys.is_finalizing():  # interpreter teardown: daemon threads are frozen, maybe holding our locks; the OS frees it
        return
    with _maps_lock:
        _maps[0] -= 1
    mapping.release(queue)


def mapped_count() -> int:
    """Host mappings made by map_to_host() and not yet unmapped (leak checks, tests)."""
    return _maps[0]


def buffer_over_host(ctx: OpenCLContext, address: int, nbytes: int, owner: Any, *, read_only: bool) -> Any:
    """A USE_HOST_PTR buffer over host memory (zero-copy on a device that works in host memory).

    The Buffer itself keeps ``owner`` (whatever keeps the memory at ``address`` alive: a numpy view, a mapping, a
    USM allocation) alive: pyopencl holds the ``hostbuf`` of a USE_HOST_PTR buffer for the buffer's lifetime,
    and that hostbuf is an array whose base is ``owner``. So the ``pyopencl.Buffer`` a user takes from
    ``.native`` stays valid after the tensor, the mapping and the source are gone.
    """
    cl_ = cl()
    mf = cl_.mem_flags
    iface = {"version": 3, "shape": (max(nbytes, 1),), "typestr": "|u1", "descr": [("", "|u1")],
             "data": (int(address), False), "strides": None}
    host = np.asarray(_ArrayExport(iface, owner))  # a private alias: pyopencl takes a writeable host pointer
    flags = mf.USE_HOST_PTR | (mf.READ_ONLY if read_only else mf.READ_WRITE)
    return cl_.Buffer(ctx.native, flags, hostbuf=host)


def live_count() -> int:
    """OpenCLTensors alive and not released (leak checks)."""
    return sum(1 for t in list(_live) if not t.released)


# ---- wrap() --------------------------------------------------------------------------------------------------


def wrap_buffer(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
                context: Context | None = None, offset: int = 0) -> Tensor | Frame:
    """A pyopencl Buffer (shapeless: give ``info``, else it is one byte per element) or pyopencl.array.Array."""
    if context is not None and not isinstance(context, OpenCLContext):
        raise UnsupportedTypeError(f"an OpenCL buffer belongs to an OpenCLContext, not {context!r}")
    if class_in(type(obj), "pyopencl.array", "Array"):
        arr_info = TensorInfo(obj.shape, obj.dtype, obj.strides)
        if info is not None and info != arr_info:
            raise InvalidTensorError(f"info {info} does not describe this pyopencl Array ({arr_info}); leave info out")
        if obj.base_data is None:
            raise InvalidTensorError("this pyopencl Array has no buffer (it is empty or uses SVM)")
        ctx = context or context_for(obj.context)
        t = OpenCLTensor(obj.base_data, arr_info, offset=obj.offset, context=ctx, parent=obj)
    else:
        if info is None:
            info = TensorInfo((obj.size,), np.uint8)
        t = OpenCLTensor(obj, info, offset=offset, context=context)  # type: ignore[arg-type]
    if format is not None:
        raise UnsupportedTypeError("wrap(cl.Buffer, format=) is not supported: use interop.tensors.opencl.opencl_frame()")
    return t


def opencl_frame(buffer: Any, format: FrameFormat, width: int, height: int, *, pitches: list[int] | None = None,
                 offset: int = 0, context: OpenCLContext | None = None) -> Frame:
    """A Frame over one OpenCL buffer holding the planes of ``format`` one after another (zero-copy)."""
    offsets, _total = packed_offsets(format, width, height, pitches)
    infos = plane_infos(format, width, height, pitches)
    ctx = context or context_for(buffer.context)
    planes = [OpenCLTensor(buffer, inf, offset=offset + off, context=ctx) for off, inf in zip(offsets, infos)]
    return Frame(planes, format, width, height, context=ctx, native=buffer)


register_wrapper(Wrapper("pyopencl.Buffer", lambda c: class_in(c, "pyopencl", "Buffer"), wrap_buffer, priority=10))
register_wrapper(Wrapper("pyopencl.array.Array", lambda c: class_in(c, "pyopencl.array", "Array"), wrap_buffer, priority=10))


# ---- doctor ---------------------------------------------------------------------------------------------------


def shared_context_report() -> dict[str, Any]:
    """Whether OpenCV, pyopencl and dpctl work on one cl_context (for ``interop doctor``)."""
    out: dict[str, Any] = {}
    ocl = Context.default(MemoryType.OPENCL)
    assert isinstance(ocl, OpenCLContext)
    handles = {"pyopencl": ocl.cl_context}
    try:
        import cv2

        handles["OpenCV"] = int(cv2.UMat.context()) if cv2.ocl.haveOpenCL() else 0
    except ImportError:
        pass
    try:
        sy = Context.default(MemoryType.USM)  # a SYCLContext has the cl_context dpctl runs on (by name: no import)
        if getattr(sy, "cl_context", None) is not None:
            handles["dpctl"] = sy.cl_context  # type: ignore[attr-defined]
    except ImportError:
        pass
    except InteropError as e:
        out["dpctl"] = f"unavailable: {e}"
    names = [n for n in ("OpenCV", "pyopencl", "dpctl") if n in handles]
    same = len(set(handles[n] for n in names)) == 1
    dev = ocl.device
    out["shared context"] = f"{' == '.join(names)}: {same}, cl_context {ocl.cl_context:#x}"
    out["platform"] = dev.platform.name
    out["device"] = dev.name.strip()
    out["queue"] = f"{ocl.queue.int_ptr:#x} (in-order, {ocl.source}'s)"
    out["host memory shared"] = ocl.host_shared
    return out


def _probe() -> list[BackendReport]:
    why = BACKEND.missing()
    if why is not None:
        return [BackendReport(BACKEND.title, False, reason=f"{why} (pyopencl)")]
    cl_ = cl()
    try:
        platforms = cl_.get_platforms()
    except cl_.Error as e:
        return [BackendReport(BACKEND.title, True, f"pyopencl {cl_.VERSION_TEXT}", reason=f"no OpenCL platform: {e}")]
    devices = [f"{d.name.strip()} ({p.name})" for p in platforms for d in p.get_devices()]
    try:
        details = shared_context_report()
    except Exception as e:  # doctor reports, never crashes
        return [BackendReport(BACKEND.title, True, f"pyopencl {cl_.VERSION_TEXT}", devices,
                              reason=f"no usable context: {e}")]
    details["platforms"] = len(platforms)
    return [BackendReport(BACKEND.title, True, f"pyopencl {cl_.VERSION_TEXT}", devices, "A", details=details)]


# Its probe wraps OpenCV's context (made by the UMat probe) to report that the two share one.
BACKEND = register_backend(Backend("opencl", "OpenCL", (MemoryType.OPENCL,), tier="A", extra="opencl",
                                   requires=("pyopencl",), probe=_probe, after=("opencv_umat",)))
