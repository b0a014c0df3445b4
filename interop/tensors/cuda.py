"""CUDA tensors: device memory of any producer (PyAV NVDEC planes, torch, CuPy, ``__cuda_array_interface__``).

``native`` is the producer object. A CUDATensor exports ``__dlpack__`` (legacy or versioned capsules, built here,
so views and planes at offsets export exactly what they describe), ``__dlpack_device__`` and
``__cuda_array_interface__`` (with its ``stream`` key), so ``torch.from_dlpack(t)`` and ``cupy.asarray(t)`` work.

Stream ordering: every tensor knows the stream its producer queued its writes on (``stream``: 1 is the legacy
default stream, FFmpeg's NVDEC copies land there; None means nothing is pending). When a consumer passes its stream
to ``__dlpack__``, work queued later on that stream is made to wait for the producer's (an event, no host wait).
Nothing here imports torch or CuPy; the CUDA driver is loaded on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .._locks import FinalizerLock
from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    module_available,
    register_backend,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import (
    BackendUnavailableError,
    InteropBufferError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo, packed_offsets, plane_infos, plane_layout
from ..meter import record_copy
from ..native import dlpack
from ..native.cuda_driver import CU_STREAM_LEGACY, driver
from ..tensor import Tensor
from ..types import AccessMode, FrameFormat, MemoryType
from ._fastpath import trusted

LEGACY_STREAM = CU_STREAM_LEGACY


def stream_handle(stream: Any) -> int | None:
    """A raw CUstream handle (DLPack convention: 1 legacy default, 2 per-thread default) from an int or a
    torch/CuPy stream object; None stays None ("nothing to order"). FFmpeg's NULL stream (0) is the legacy one."""
    if stream is None:
        return None
    if isinstance(stream, int):
        h = stream
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        h = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):  # cupy.cuda.Stream
        h = int(stream.ptr)
    else:
        raise UnsupportedTypeError(f"a CUDA stream must be an int handle or a torch/CuPy stream, not {type(stream).__name__}")
    return LEGACY_STREAM if h == 0 else h


class CUDAContext(Context):
    """A CUDA device and the stream interop's own copies run on (default: the legacy default stream).

    ``native`` is the stream object given (or its int handle); ``device`` the device ordinal. Two contexts are the
    same when device and stream handle are.
    """

    memory_type = MemoryType.CUDA
    _cache: ClassVar[dict[tuple[int, int], CUDAContext]] = {}
    _lock = threading.Lock()

    def __init__(self, device: int = 0, stream: Any = None):
        if not isinstance(device, int) or device < 0:
            raise UnsupportedTypeError(f"a CUDA device is a non-negative ordinal, not {device!r}")
        h = stream_handle(stream)
        super().__init__(native=stream if stream is not None else LEGACY_STREAM, device=device)
        self.stream = LEGACY_STREAM if h is None else h

    @classmethod
    def get(cls, device: int = 0, stream: Any = None) -> CUDAContext:
        """The shared context of (device, stream): per-frame mapping makes no new context objects."""
        key = (device, stream_handle(stream) or LEGACY_STREAM)
        ctx = cls._cache.get(key)
        if ctx is None:
            with cls._lock:
                ctx = cls._cache.setdefault(key, cls(device, stream))
        return ctx

    def key(self) -> Any:
        return (self._device, self.stream)

    def __repr__(self) -> str:
        return f"<CUDAContext cuda:{self._device} stream={self.stream:#x}>"


register_default_context(MemoryType.CUDA, lambda: CUDAContext.get(0))

_info_cache: dict[tuple[Any, ...], TensorInfo] = {}


def cached_info(shape: tuple[int, ...], dtype: Any, strides: tuple[int, ...] | None) -> TensorInfo:
    """TensorInfo is validated once per layout: decoded frames repeat a handful of layouts."""
    key = (shape, np.dtype(dtype).str, strides)
    info = _info_cache.get(key)
    if info is None:
        info = _info_cache[key] = TensorInfo(shape, dtype, strides)
    return info


class CUDATensor(Tensor):
    """Device memory at ``ptr`` on CUDA device ``device``, laid out as ``info``; ``native`` is the producer.

    ``stream`` is where the producer's writes were queued (None: nothing pending). ``writable=False`` (decoded
    reference frames) sets the read-only flag of versioned DLPack capsules and of ``__cuda_array_interface__``;
    torch has no read-only tensors, so do not write through torch views of decoded frames.
    """

    memory_type = MemoryType.CUDA
    HANDLE_KEYS = {"cuda_ptr": "ptr", "cuda_device": "device_id", "cuda_stream": "stream"}
    _whole = False  # True: exactly the producer's own DLPack view (a whole PyAV plane)

    def __init__(self, native: Any, info: TensorInfo, *, ptr: int, device: int = 0, stream: Any = LEGACY_STREAM,
                 context: Context | None = None, parent: Any = None, writable: bool = True):
        if not isinstance(ptr, int) or ptr < 0:
            raise InvalidTensorError(f"a CUDA device pointer must be a non-negative int, got {ptr!r}")
        if context is not None and context.memory_type is not MemoryType.CUDA:
            raise UnsupportedTypeError(f"a CUDA tensor cannot belong to {context!r}")
        super().__init__(native, info, context=context if context is not None else CUDAContext.get(device),
                         parent=parent, writable=writable)
        self._ptr = ptr
        self._device_id = int(device)
        self._stream = stream_handle(stream)
        self._whole = False  # True: exactly the producer's own DLPack view (a whole PyAV plane)

    @property
    def ptr(self) -> int:
        """Device address of element 0."""
        self._check()
        return self._ptr

    @property
    def device_id(self) -> int:
        self._check()
        return self._device_id

    @property
    def stream(self) -> int | None:
        """The stream the producer's writes are queued on (1 = legacy default), or None when nothing is pending."""
        self._check()
        return self._stream

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        self._check()
        own = self._info
        if offset < 0 or (info.size and offset + info.extent > own.extent):
            raise InvalidTensorError(f"layout {info} at offset {offset} needs {offset + info.extent} bytes but this "
                                     f"CUDA tensor spans {own.extent}; check the shape, strides and offset")
        return CUDATensor(self._native, info, ptr=self._ptr + offset, device=self._device_id, stream=self._stream,
                          context=self._context, parent=self, writable=self._writable)

    # -- stream handshake -----------------------------------------------------------------------------
    def sync_to(self, consumer: Any) -> None:
        """Order ``consumer`` (a stream handle or object; None = legacy default; -1 = no ordering) after the
        producer's pending writes, without waiting on the host."""
        producer = self._stream
        if producer is None or consumer == -1:
            return
        c = LEGACY_STREAM if consumer is None else stream_handle(consumer)
        if c != producer:
            driver().order(self._device_id, producer, c)  # type: ignore[arg-type]

    # -- exports --------------------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        if self._whole and dl_device is None and copy is None and not self._released and \
                (stream is None or stream == self._stream):
            # the per-frame case (torch passes its current stream, the legacy one by default): nothing to order
            return self._native.__dlpack__(stream=None)
        self._check()
        dev = (dlpack.KDL_CUDA, self._device_id)
        if dl_device is not None and tuple(dl_device) != dev:
            raise InteropBufferError(f"this tensor lives on cuda:{self._device_id}; to get it on {tuple(dl_device)} use "
                              f"interop.map(t, MemoryType.CPU, allow_copy=True)")
        if copy:
            raise InteropBufferError("a CUDA tensor exports its own memory (copy=True is not supported); copy on the consumer side")
        if stream is not None and not isinstance(stream, int):
            raise InteropBufferError(f"stream must be an int handle or None, got {type(stream).__name__}")
        self.sync_to(stream)
        if self._whole:
            # The producer's own capsule (PyAV builds it in C; it holds a reference on the AVFrame). It is a
            # legacy capsule even when a versioned one was asked for, which DLPack allows.
            return self._native.__dlpack__(stream=None)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        info = self._info
        return dlpack.make_capsule(self._ptr, info.shape, info.strides, info.dtype, dev, self, versioned=versioned,
                               read_only=not self._writable)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, self._device_id)

    def _own_capsule(self) -> Any:
        """The producer's own DLPack capsule when this tensor is exactly a whole producer plane (an NVDEC plane)
        whose writes are queued on the legacy default stream, so a consumer on that stream has nothing to order;
        else None. ``interop.cuda.torch_views`` uses it per frame, without ``__dlpack__``'s per-call checks."""
        if self._whole and self._stream == LEGACY_STREAM and not self._released:
            return self._native.__dlpack__(stream=None)
        return None

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check()
        info = self._info
        return {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
                "data": (self._ptr, not self._writable), "strides": info.strides, "stream": self._stream}

    def __repr__(self) -> str:
        if self._released:
            return "<CUDATensor released>"
        return f"<CUDATensor cuda:{self._device_id} shape={self._info.shape} dtype={self._info.dtype} ptr={self._ptr:#x}>"


def fast_tensor(native: Any, info: TensorInfo, ptr: int, device: int, stream: int | None, context: Context,
                parent: Any, writable: bool, whole: bool = False) -> CUDATensor:
    """A CUDATensor without re-validation: ``info`` must be interned, ``stream`` a handle or None. ``whole``: the
    tensor is exactly what ``native.__dlpack__(stream=None)`` describes, so exports may use the producer's capsule."""
    t: Any = trusted(CUDATensor, native, info, context, parent, writable)
    t._ptr, t._device_id, t._stream, t._whole = ptr, device, stream, whole
    return t  # type: ignore[no-any-return]


# ---- wrap() --------------------------------------------------------------------------------------------------


def describe(obj: Any) -> tuple[int, TensorInfo, int, int | None, bool]:
    """(pointer, info, device, producer stream, writable) of a CUDA producer, read without importing its framework."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        ptr, ro = cai["data"]
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        info = TensorInfo(shape, dtype, cai.get("strides"))
        dev = obj.__dlpack_device__()[1] if hasattr(obj, "__dlpack_device__") else 0
        # CAI v3: "stream" is where the producer's work is queued; absent or None means nothing to order.
        return int(ptr or 0), info, int(dev), stream_handle(cai.get("stream")), not ro
    # A DLPack-only producer (PyAV planes): ask for a capsule ordered on the legacy stream and read it.
    cap = obj.__dlpack__(stream=None)
    ptr, shape, strides, dtype, (kind, dev), ro = dlpack.read_capsule(cap)
    del cap  # unconsumed: its destructor frees it; the producer object keeps the memory
    if kind not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
        raise UnsupportedTypeError(f"DLPack device type {kind} is not CUDA")
    return ptr, TensorInfo(shape, dtype, strides), int(dev), LEGACY_STREAM, not ro


def wrap_cuda(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
              context: Context | None = None) -> Tensor | Frame:
    """wrap() for CUDA producers; CPU DLPack producers of the same class (a CPU torch tensor) go to the CPU backend."""
    if hasattr(obj, "__dlpack_device__"):
        kind = int(obj.__dlpack_device__()[0])
        if kind in (dlpack.KDL_CPU, dlpack.KDL_CUDA_HOST):
            from .cpu import wrap_cpu

            return wrap_cpu(obj, info=info, format=format, context=context)
        if kind not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
            raise UnsupportedTypeError(f"{type(obj).__name__} lives on DLPack device {tuple(obj.__dlpack_device__())}, "
                                       f"which interop's CUDA backend does not handle")
    if context is not None and context.memory_type is not MemoryType.CUDA:
        raise UnsupportedTypeError(f"CUDA memory cannot belong to {context!r}")
    ptr, own, dev, stream, writable = describe(obj)
    if context is not None and context.device != dev:
        raise UnsupportedTypeError(f"the memory is on cuda:{dev}, the context {context!r} is another device")
    if info is not None:
        if info.extent > max(own.extent, 0) and own.size:
            raise InvalidTensorError(f"{info} spans {info.extent} bytes but the producer's memory spans {own.extent}")
        own = info
    t = CUDATensor(obj, own, ptr=ptr, device=dev, stream=stream, context=context, writable=writable)
    if format is not None:
        return frame_from_tensor(t, format)
    return t


def cuda_frame(planes: list[CUDATensor], format: FrameFormat, width: int, height: int, **kw: Any) -> Frame:
    """A Frame of CUDA planes (NV12/P010: Y and interleaved UV, each with its own pitch)."""
    if not all(isinstance(p, CUDATensor) for p in planes):
        raise InvalidTensorError("cuda_frame() takes CUDATensor planes")
    return Frame(planes, format, width, height, **kw)


def frame_from_tensor(t: CUDATensor, format: FrameFormat, width: int | None = None, height: int | None = None) -> Frame:
    """Split one CUDA image buffer into the planes of ``format`` (zero-copy, views at offsets).

    Packed formats take (H, W, C); YUV formats take (H*3/2, W) buffers (NV12: Y rows then UV rows, same pitch).
    """
    info = t.info
    specs = plane_layout(format)
    if len(specs) == 1:
        return Frame([t], format, info.shape[1], info.shape[0])
    if width is None or height is None:
        if info.ndim != 2 or info.dtype != specs[0].dtype or info.shape[0] * 2 % 3:
            raise InvalidTensorError(f"a {format.name} CUDA buffer must be (H*3/2, W) of {specs[0].dtype}, "
                                     f"got {info.shape} {info.dtype}; or give width and height")
        height, width = info.shape[0] * 2 // 3, info.shape[1]
    pitch = info.strides[0] if info.ndim == 2 else None
    pitches = None if pitch is None else [pitch if s.sub_x == 1 or s.channels else pitch // s.sub_x for s in specs]
    offsets, total = packed_offsets(format, width, height, pitches)
    infos = plane_infos(format, width, height, pitches)
    # each plane must lie inside the buffer (the last one may end short of a full pitch, not past the extent)
    if any(inf.size and off + inf.extent > info.extent for off, inf in zip(offsets, infos)):
        raise InvalidTensorError(f"a {width}x{height} {format.name} frame needs {total} bytes, the buffer spans {info.extent}")
    planes = [t._view(off, inf) for off, inf in zip(offsets, infos)]
    return Frame(planes, format, width, height, context=t.context, native=t.native)


def _is_cuda_producer(cls: type) -> bool:
    if class_in(cls, "interop") or class_in(cls, "numpy") or class_in(cls, "dpctl"):
        return False
    if hasattr(cls, "__sycl_usm_array_interface__"):
        return False
    return hasattr(cls, "__cuda_array_interface__") or (hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"))


# Above the CPU DLPack recogniser (-10): torch/CuPy/PyAV-plane classes hold CPU and CUDA objects; wrap_cuda asks
# __dlpack_device__ and hands CPU ones to the CPU backend.
register_wrapper(Wrapper("CUDA producers (__cuda_array_interface__ / CUDA __dlpack__)", _is_cuda_producer, wrap_cuda,
                         priority=-5))


# The sw_formats of NVDEC frames interop takes (their planes are what PyAV's capsules describe), and the refusal of
# the others: shared by the FFMPEG -> CUDA mapper and interop.cuda.torch_views(vf).
NVDEC_SW_FORMATS = {"nv12": FrameFormat.NV12, "p010le": FrameFormat.P010}


def unsupported_nvdec_format(sw: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(f"NVDEC frames of sw_format {sw} are not supported; nv12 and p010le are: decode "
                                  f"such a stream on the CPU (interop run: leave --nvdec out)")


# ---- array libraries (torch or CuPy, whichever is installed) for device allocations ---------------------------


def array_library() -> str | None:
    """'torch' or 'cupy' (the first installed), or None."""
    for mod in ("torch", "cupy"):
        if module_available(mod):
            return mod
    return None


def device_empty(shape: tuple[int, ...], dtype: np.dtype, device: int) -> tuple[Any, int]:
    """A new C-contiguous device array (torch or CuPy, through its caching allocator) and its pointer."""
    lib = array_library()
    if lib == "torch":
        import torch

        tdt = {np.dtype(k): v for k, v in ((np.uint8, torch.uint8), (np.int8, torch.int8), (np.int16, torch.int16),
                                             (np.uint16, torch.uint16), (np.int32, torch.int32), (np.uint32, torch.uint32),
                                             (np.int64, torch.int64), (np.uint64, torch.uint64), (np.float16, torch.float16),
                                             (np.float32, torch.float32), (np.float64, torch.float64), (np.bool_, torch.bool))}
        if np.dtype(dtype) not in tdt:
            raise InvalidTensorError(f"dtype {dtype} has no torch equivalent")
        arr = torch.empty(shape, dtype=tdt[np.dtype(dtype)], device=f"cuda:{device}")
        return arr, int(arr.data_ptr())
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            arr = cupy.empty(shape, dtype=dtype)
        return arr, int(arr.data.ptr)
    raise BackendUnavailableError("allocating CUDA memory needs torch or CuPy: pip install torch (or cupy-cuda12x)",
                                  backend=BACKEND.name)


def exportable_empty(shape: tuple[int, ...], dtype: Any = np.uint8, device: int = 0) -> CUDATensor:
    """A new C-contiguous CUDA tensor in memory other APIs can import: CUDA virtual-memory allocations exportable
    as an opaque fd (``interop.native.cuda_export``). ``cuda_to_opencl`` maps these to OpenCL without a copy;
    memory from torch, CuPy or NVDEC (``cuMemAlloc``) has no handle to export. torch and CuPy take the tensor
    through DLPack like any other; ``native`` is the ``ExportableAllocation`` (``close()`` frees it)."""
    from ..native.cuda_export import ExportableAllocation

    info = TensorInfo(tuple(int(n) for n in shape), np.dtype(dtype))
    alloc = ExportableAllocation(max(info.nbytes, 1), device)
    return CUDATensor(alloc, info, ptr=alloc.ptr, device=device, stream=None)


def missing_array_library() -> str | None:
    return None if array_library() else "needs torch or CuPy for device allocations: pip install torch (or cupy-cuda12x)"


# ---- copies between host and device: pinned staging buffers, reused -------------------------------------------


def rows_of(info: TensorInfo) -> tuple[int, int, int]:
    """(rows, bytes per row, pitch) of a layout whose inner dimensions are C-contiguous: planes with padded rows."""
    item = info.itemsize
    if info.ndim == 0:
        return 1, item, item
    if info.ndim == 1:
        n = info.shape[0]
        return (1, n * item, n * item) if n <= 1 or info.strides[0] == item else (n, item, info.strides[0])
    inner = TensorInfo(info.shape[1:], info.dtype)
    if inner.size > 1 and not TensorInfo(info.shape[1:], info.dtype, info.strides[1:]).is_contiguous:
        raise InvalidTensorError(f"copying {info} between host and GPU needs C-contiguous rows (only the row pitch may "
                                 f"differ); make the tensor contiguous first")
    return info.shape[0], inner.nbytes, max(info.strides[0], inner.nbytes)


class PinnedPool:
    """Page-locked host blocks in power-of-two sizes, handed out as numpy arrays and taken back when the last view
    of one is gone (so a CPU tensor made from a download stays valid as long as anything uses it)."""

    KEEP = 8  # free blocks kept per size

    def __init__(self, device: int):
        self.device = device
        self._free: dict[int, list[int]] = {}
        self._lock = FinalizerLock()  # _give runs from finalisers: never waits on it
        self.allocated = 0  # blocks ever allocated (tests check reuse)

    def take(self, nbytes: int) -> np.ndarray:
        import ctypes
        import weakref

        cap = 1 << max(16, (max(nbytes, 1) - 1).bit_length())
        with self._lock:
            blocks = self._free.get(cap)
            ptr = blocks.pop() if blocks else 0
        if not ptr:
            ptr = driver().host_alloc(self.device, cap)
            self.allocated += 1
        block = (ctypes.c_uint8 * cap).from_address(ptr)
        holder = np.frombuffer(block, np.uint8, count=max(nbytes, 0))  # type: ignore[call-overload]
        weakref.finalize(holder, self._give, cap, ptr)
        return holder

    def _give(self, cap: int, ptr: int) -> None:
        self._lock.call(self._keep_or_free, cap, ptr)

    def _keep_or_free(self, cap: int, ptr: int) -> Callable[[], None] | None:
        blocks = self._free.setdefault(cap, [])
        if len(blocks) < self.KEEP:
            blocks.append(ptr)
            return None
        return lambda: driver().host_free(ptr)


_pools: dict[int, PinnedPool] = {}


def pinned_pool(device: int = 0) -> PinnedPool:
    pool = _pools.get(device)
    if pool is None:
        pool = _pools.setdefault(device, PinnedPool(device))
    return pool


def host_view(block: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``block`` (tight bytes) seen as a C-contiguous array of ``info``'s shape and dtype."""
    return block[: info.nbytes].view(info.dtype).reshape(info.shape)


def download(t: Any, host: np.ndarray, stream: int, *, sync: bool = True) -> None:
    """Copy the elements of ``t`` (a CUDATensor, or anything with ``ptr``, ``info``, ``device_id``) into the
    C-contiguous host array ``host`` (pinned for speed)."""
    rows, row, pitch = rows_of(t.info)
    driver().copy2d(t.device_id, stream, dst=host.ctypes.data, dst_pitch=row, dst_host=True, src=t.ptr,
                       src_pitch=pitch, src_host=False, width=row, height=rows, sync=sync)


def upload_into(host: np.ndarray, dst_ptr: int, info: TensorInfo, device: int, stream: int, *, sync: bool = True) -> None:
    """Copy the C-contiguous host array ``host`` into device memory laid out as ``info``."""
    rows, row, pitch = rows_of(info)
    driver().copy2d(device, stream, dst=dst_ptr, dst_pitch=pitch, dst_host=False, src=host.ctypes.data,
                       src_pitch=row, src_host=True, width=row, height=rows, sync=sync)


def upload(t: Tensor, ctx: Context, mode: AccessMode, *, parent: Any, name: str = "cpu_to_cuda") -> CUDATensor:
    """Copy CPU tensor ``t`` to a new C-contiguous device array on ``ctx`` (a CUDAContext). The caller counts the
    upload; the write-back of a writing mode (at release) is counted under ``name`` when it runs."""
    src = t.numpy()
    info = cached_info(src.shape, src.dtype, None)
    dev, stream = int(ctx.device), ctx.stream  # type: ignore[attr-defined]
    arr, ptr = device_empty(info.shape, info.dtype, dev)
    if mode.reads:
        stage = host_view(pinned_pool(dev).take(info.nbytes), info)
        np.copyto(stage, src)
        upload_into(stage, ptr, info, dev, stream, sync=True)
    out = CUDATensor(arr, info, ptr=ptr, device=dev, stream=None, context=ctx, parent=parent, writable=True)
    if mode.writes:
        if not t.writable:
            raise InvalidTensorError("the CPU tensor is read-only: map it with AccessMode.READ")

        def write_back() -> None:
            stage = host_view(pinned_pool(dev).take(info.nbytes), info)
            download(_Raw(ptr, info, dev), stage, stream, sync=True)
            np.copyto(src, stage)
            record_copy(name, info.nbytes)

        out.on_release(write_back)
    return out


class _Raw:
    """What download() reads of a tensor, for the write-back that runs after the tensor was released."""

    def __init__(self, ptr: int, info: TensorInfo, device: int):
        self.ptr, self.info, self.device_id = ptr, info, device


# ---- doctor ------------------------------------------------------------------------------------------------


def _detect() -> str | None:
    import glob

    return None if glob.glob("/dev/nvidia[0-9]*") else "no NVIDIA device node (/dev/nvidia0...) on this machine"


def _probe() -> list[BackendReport]:
    libs = [m for m in ("torch", "cupy", "av") if module_available(m)]
    try:
        d = driver()
        devs = d.devices()
        return [BackendReport(BACKEND.title, True, f"driver {d.version()}", devs, "B",
                              None if devs else "the NVIDIA driver reports no CUDA device", {"python": libs})]
    except Exception as e:  # no driver here: a row saying so
        return [BackendReport(BACKEND.title, False, None, [], "B", str(e), {"python": libs})]


# The driver API is loaded with ctypes (interop.native.cuda_driver); torch or CuPy only allocate, so neither is
# required (missing_array_library() says when an allocation needs one).
BACKEND = register_backend(Backend("cuda", "CUDA", (MemoryType.CUDA,), tier="B", probe=_probe, detect=_detect,
                                   hardware="an NVIDIA CUDA GPU"))


# Old public paths of names that moved to interop.cuda (issue 16; docs and benchmarks imported them from here). A
# lazy alias, so importing this module never loads the app-level interop.cuda: tests/test_layering.py allows
# exactly this edge, from this function.
_MOVED = frozenset({"torch_views", "_torch_stream"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from .. import cuda

        return getattr(cuda, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
