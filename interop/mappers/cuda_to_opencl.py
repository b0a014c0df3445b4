"""CUDA -> OPENCL on NVIDIA: CUDA memory exported as an opaque fd and imported by OpenCL, zero-copy.

NVIDIA's OpenCL 3.0 implements ``cl_khr_external_memory_opaque_fd``: a buffer made with
``clCreateBufferWithProperties`` over an fd from ``cuMemExportToShareableHandle`` is the same device memory CUDA
kernels, torch and CuPy see. Only CUDA virtual-memory allocations have such an fd: make them with
``interop.tensors.cuda.exportable_empty()``. Memory from ``cuMemAlloc`` (torch's and CuPy's allocators, NVDEC
surfaces) cannot be exported: mapping it copies on the GPU into an exportable buffer, refused unless
``allow_copy=True`` and then counted (and copied back at release for writing modes); the exportable buffers of
that path are pooled, each with its OpenCL import. Because of that worst case
the route asks for ``allow_copy=True`` (``interop.map(t, MemoryType.OPENCL, allow_copy=True)``); the copy meter
shows that exportable tensors were not copied. ``CUDAToOpenCL().map(t)`` maps without asking and refuses copies.

Each allocation is imported once per OpenCL context (the buffer is kept on the allocation). Ordering: at map time
the host waits for the CUDA work queued on the device (any stream) and the buffer is acquired for OpenCL
(``clEnqueueAcquireExternalMemObjectsKHR`` where the platform has it); at release it is released and the OpenCL
queue finished, so CUDA work queued after the release sees OpenCL's writes.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .._locks import FinalizerLock
from ..errors import BackendUnavailableError, ContextMismatchError, InvalidTensorError
from ..mapper import MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.cuda import CUDATensor
from ..tensors.opencl import OpenCLContext, OpenCLTensor
from ..types import AccessMode, MemoryType

EXTENSION = "cl_khr_external_memory_opaque_fd"
_WHY = ("memory from cuMemAlloc (torch, CuPy, NVDEC surfaces) has no handle OpenCL can import; allocate with "
        "interop.tensors.cuda.exportable_empty() to map without a copy")
_lock = threading.Lock()
_found: list[Any] = []  # the OpenCLContext made on the first device with the extension, when the default lacks it


def _has_extension(ctx: Any) -> bool:
    try:
        return EXTENSION in ctx.device.extensions.split()
    except Exception:
        return False


def import_context(given: Any = None) -> Any:
    """The OpenCLContext to import into: ``given`` (checked), else the default one when its device has the
    extension, else one made on the first OpenCL device that has it."""
    from ..context import Context
    from ..errors import InteropError
    from ..tensors.opencl import cl, context_for

    if isinstance(given, OpenCLContext):
        if not _has_extension(given):
            raise ContextMismatchError(f"{given!r} cannot import CUDA memory: its device lacks {EXTENSION} "
                                       f"(NVIDIA's OpenCL has it); map through the CPU with allow_copy=True")
        return given
    try:
        default = Context.default(MemoryType.OPENCL)
        if _has_extension(default):
            return default
    except InteropError:
        pass
    with _lock:
        if not _found:
            cl_ = cl()
            try:
                devices = [d for p in cl_.get_platforms() for d in p.get_devices()]
            except cl_.Error:
                devices = []
            dev = next((d for d in devices if EXTENSION in d.extensions.split()), None)
            if dev is None:
                raise BackendUnavailableError(f"no OpenCL device with {EXTENSION} (NVIDIA's OpenCL has it): CUDA memory "
                                              f"reaches OpenCL through the CPU, with allow_copy=True{_icd_hint()}",
                                              backend="opencl", extra="opencl")
            _found.append(context_for(cl_.Context([dev])))
        return _found[0]


def _icd_hint() -> str:
    """Advice when NVIDIA's OpenCL driver is installed but the ICD loader was not told about it (containers often
    ship libnvidia-opencl.so.1 without /etc/OpenCL/vendors/nvidia.icd)."""
    import ctypes

    try:
        ctypes.CDLL("libnvidia-opencl.so.1")
    except OSError:
        return ""
    return ("; NVIDIA's OpenCL driver (libnvidia-opencl.so.1) is installed but not registered with the ICD loader: "
            "start Python with OCL_ICD_VENDORS set to a folder holding a file nvidia.icd whose one line is "
            "libnvidia-opencl.so.1")


def _sync_device(t: Any) -> None:
    """Wait on the host for all CUDA work queued in the device's primary context: OpenCL cannot wait for a CUDA
    event, and the memory's writers may be on any stream (torch writes on its own; the tensor's recorded stream
    only says where its producer queued)."""
    from ..native.cuda_driver import driver

    d = driver()
    d.push(t.device_id)
    try:
        d._check(d.lib.cuCtxSynchronize(), "cuCtxSynchronize")
    finally:
        d.pop()


def _imported(alloc: Any, ctx: Any) -> Any:
    """The pyopencl.Buffer over the whole allocation in ``ctx`` (imported on first use, then kept)."""
    from ..native.cuda_export import fd_is_open
    from ..native.opencl_external import CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR, import_fd

    buf = alloc.imports.get(ctx.cl_context)
    if buf is None:
        fd = alloc.export_fd()
        try:
            buf = import_fd(ctx.native, CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR, fd, alloc.size, read_only=False,
                            device=ctx.device)
        finally:
            if fd_is_open(fd):  # the implementation keeps its own reference (it did not take the fd)
                os.close(fd)
        alloc.imports[ctx.cl_context] = buf
    return buf


@register
class CUDAToOpenCL(MemoryMapper):
    src = MemoryType.CUDA
    dst = MemoryType.OPENCL
    # The edge's worst case: cuMemAlloc memory is copied on the GPU, so routing asks for allow_copy (as for
    # dma_to_opencl); exportable allocations are mapped without a copy and nothing is counted. A zero-copy edge
    # here would also make CUDA -> OPENCL -> CPU look like a copy-free way to the host, which it is not.
    zero_copy = False
    # Only memory that starts as CUDA can be exportable: CUDA reached from another type (NVDEC surfaces through
    # ffmpeg_to_cuda, uploads through cpu_to_cuda) is cuMemAlloc memory, so this is never a later hop of a route.
    first_only = True
    inputs = (CUDATensor,)
    output_contexts = (OpenCLContext,)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        return self.map_planes([t], mode, allow_copy)[0]

    def map_planes(self, tensors: list[Any], mode: AccessMode, allow_copy: bool) -> list[Tensor]:
        from ..native.cuda_export import ExportableAllocation
        from ..native.opencl_external import enqueue_external

        allocs = []
        for t in tensors:  # refuse what cannot be mapped before anything is imported or copied
            t._check()
            alloc = t.native if isinstance(t.native, ExportableAllocation) else None
            if alloc is not None and alloc.closed:
                raise InvalidTensorError("this CUDA tensor's exportable allocation was closed (its memory is freed); "
                                         "allocate a new one with interop.tensors.cuda.exportable_empty()")
            if alloc is None and not allow_copy:
                self.copying(t.info.nbytes, False, _WHY)
            allocs.append(alloc)
        ctx = import_context(self.out_context() if self.output_context is not None else None)
        out: list[Tensor] = []
        for t, alloc in zip(tensors, allocs):
            src = t
            if alloc is None:
                self.copying(t.info.nbytes, True, _WHY)
                t = self._copy(t)
                alloc = t.native
            _sync_device(t)
            buf = _imported(alloc, ctx)
            enqueue_external(ctx.queue, buf, acquire=True)
            o = OpenCLTensor(buf, t.info, offset=t.ptr - alloc.ptr, context=ctx, parent=src,
                             writable=mode.writes and src.writable)
            o.on_release(self._releaser(ctx, buf, t if t is not src else None, src, mode))
            out.append(o)
        return out

    def _releaser(self, ctx: Any, buf: Any, staged: Any, src: Any, mode: AccessMode) -> Any:
        from ..native.opencl_external import enqueue_external

        name = self.name

        def release() -> None:
            enqueue_external(ctx.queue, buf, acquire=False)
            ctx.queue.finish()  # CUDA work after the release sees what OpenCL wrote
            if staged is not None:
                if mode.writes and src.writable:
                    _copy_2d(staged, src)
                    record_copy(name, src.info.nbytes)
                _give_back(staged.native)

        return release

    @staticmethod
    def _copy(t: Any) -> Any:
        from ..info import TensorInfo

        info = TensorInfo(t.info.shape, t.info.dtype)  # C-contiguous: the pitch is dropped
        alloc = _take_staging(max(info.nbytes, 1), t.device_id)
        dst = CUDATensor(alloc, info, ptr=alloc.ptr, device=t.device_id, stream=None)
        _copy_2d(t, dst)
        return dst


# Exportable buffers for the copying path, reused once their mapping is released: each keeps its OpenCL import,
# so a stream of frames (NVDEC surfaces, torch outputs) costs a GPU copy per map, not an allocation and an import.
_POOL_MAX = 8  # free buffers kept per (device, size)
_pool: dict[tuple[int, int], list[Any]] = {}
_pool_lock = FinalizerLock()  # _give_back is a release hook, so often a finaliser: it never waits on itself


def _take_staging(nbytes: int, device: int) -> Any:
    from ..native.cuda_export import ExportableAllocation

    with _pool_lock:
        free = _pool.get((device, nbytes))
        if free:
            return free.pop()
    return ExportableAllocation(nbytes, device)


def _give_back(alloc: Any) -> None:
    _pool_lock.call(_keep_or_close, alloc)


def _keep_or_close(alloc: Any) -> Any:
    free = _pool.setdefault((alloc.device, alloc.nbytes), [])
    if len(free) < _POOL_MAX and not alloc.closed:
        free.append(alloc)
        return None
    return alloc.close  # after the lock is let go


def staging_count() -> int:
    """Free exportable buffers kept for the copying path (for tests and leak checks)."""
    with _pool_lock:
        return sum(len(v) for v in _pool.values())


def _copy_2d(src: Any, dst: Any) -> None:
    """A synchronous device-to-device copy between two CUDA tensors of one shape whose rows are contiguous."""
    from ..native.cuda_driver import driver
    from ..tensors.cuda import rows_of

    rows, width, src_pitch = rows_of(src.info)
    _, _, dst_pitch = rows_of(dst.info)
    stream = src.stream if src.stream is not None else 1
    driver().copy2d(src.device_id, stream, dst=dst.ptr, dst_pitch=dst_pitch, dst_host=False, src=src.ptr,
                    src_pitch=src_pitch, src_host=False, width=width, height=rows, sync=True)
