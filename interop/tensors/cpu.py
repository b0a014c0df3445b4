"""CPU tensors over numpy arrays (and anything with the buffer protocol or a CPU __dlpack__)."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from ..api import register_exact_wrap
from ..backends import Backend, BackendReport, Wrapper, class_in, register_backend, register_wrapper
from ..context import CPU_CONTEXT, Context
from ..errors import InteropBufferError, InvalidTensorError, UnsupportedTypeError
from ..frame import Frame
from ..info import TensorInfo, as_int, packed_offsets, plane_infos, plane_layout, stacked_height
from ..tensor import Tensor, _ArrayExport
from ..types import FrameFormat, MemoryType, check_bool

_KDL_CPU, _KDL_CUDA_HOST = 1, 3


class CPUTensor(Tensor):
    """Host memory as a numpy array. ``native`` is the very array wrapped (or a view of the parent)."""

    memory_type = MemoryType.CPU
    HANDLE_KEYS = {"data": "data_ptr"}

    def __init__(self, array: np.ndarray, *, context: Context | None = None, parent: Any = None,
                 writable: bool | None = None):
        if not isinstance(array, np.ndarray):
            raise UnsupportedTypeError(f"CPUTensor wraps a numpy.ndarray, not {type(array).__name__}")
        info = info_of(array)
        w = array.flags.writeable if writable is None else (check_bool(writable, "writable") and array.flags.writeable)
        super().__init__(array, info, context=context or CPU_CONTEXT, parent=parent, writable=w)
        self._addr: int | None = None

    def _host_address(self) -> int | None:
        if self._addr is None:
            self._addr = int(self._native.__array_interface__["data"][0])
        return self._addr

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        arr = view_bytes(self.native, offset, info, writable=self._writable)
        return CPUTensor(arr, context=self._context, parent=self, writable=self._writable)


def info_of(array: np.ndarray) -> TensorInfo:
    """TensorInfo of an array, refusing what interop cannot describe (object dtypes, negative strides…)."""
    try:
        return TensorInfo(array.shape, array.dtype, array.strides)  # interned: validated once per layout
    except InvalidTensorError as e:
        raise InvalidTensorError(f"cannot wrap this array: {e}") from None


def view_bytes(base: np.ndarray | memoryview | Any, offset: int, info: TensorInfo, *, writable: bool = True) -> np.ndarray:
    """A numpy view of ``info`` at ``offset`` bytes into ``base``'s memory, checked to fit."""
    if isinstance(base, np.ndarray):
        addr = base.__array_interface__["data"][0]
        lo = addr + min(((s * (d - 1)) if s < 0 else 0) for d, s in zip(base.shape, base.strides)) if base.ndim else addr
        hi = addr + TensorInfo.of(base).extent if base.size else addr
        start = addr + offset
    else:
        mv = memoryview(base)
        arr = np.frombuffer(mv, np.uint8) if mv.nbytes else np.empty(0, np.uint8)
        return view_bytes(arr, offset, info, writable=writable and not mv.readonly)
    if offset < 0:
        raise InvalidTensorError(f"negative offset {offset}")
    if info.size and (start < lo or start + info.extent > hi):
        raise InvalidTensorError(
            f"layout {info} at offset {offset} needs {offset + info.extent} bytes but the buffer has {hi - addr}; "
            f"check the shape, strides and offset")
    iface = {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (start, not (writable and base.flags.writeable)), "strides": info.strides}

    return np.asarray(_ArrayExport(iface, base))


def _as_array(obj: Any) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        dev = obj.__dlpack_device__()[0]
        if int(dev) not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise UnsupportedTypeError(f"DLPack device {tuple(obj.__dlpack_device__())} is not the CPU; "
                                       f"install the backend for that device to wrap it")
        return np.from_dlpack(obj)
    try:
        mv = memoryview(obj)
    except TypeError as e:
        raise UnsupportedTypeError(f"cannot wrap {type(obj).__name__} as CPU memory: it has no buffer protocol") from e
    except (ValueError, BufferError) as e:  # a closed mmap, a released memoryview
        raise InvalidTensorError(
            f"cannot wrap this {type(obj).__name__}: its buffer is not available ({e}); keep the buffer open "
            f"(not closed or released) while interop uses it") from e
    if not mv.c_contiguous:
        # Flattening it to bytes would read the gaps between its elements: refuse rather than give wrong data.
        raise InteropBufferError(
            f"cannot wrap a non-contiguous {type(obj).__name__} (shape {mv.shape}, strides {mv.strides}) as bytes: "
            f"wrap the object it was sliced from, or numpy.asarray() it first to keep its strides")
    try:
        return np.frombuffer(mv, np.uint8) if mv.nbytes else np.empty(0, np.uint8)
    except (ValueError, BufferError) as e:
        raise InvalidTensorError(f"cannot wrap this {type(obj).__name__}: {e}") from e


def wrap_cpu(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
             context: Context | None = None) -> Tensor | Frame:
    """numpy arrays, buffer-protocol objects (bytes, bytearray, mmap, memoryview) and CPU DLPack producers."""
    if context is not None and context.memory_type is not MemoryType.CPU:
        raise UnsupportedTypeError(f"a numpy array is CPU memory; it cannot belong to {context!r}")
    if isinstance(obj, Tensor):
        if obj.memory_type is not MemoryType.CPU:
            raise UnsupportedTypeError("info=/format= re-describe CPU memory only; map the tensor to CPU first")
        arr = obj.numpy()
    else:
        arr = _as_array(obj)
    if info is not None:
        _require_one_block(arr, "info= re-describes the bytes of a buffer")
        arr = view_bytes(arr, 0, info)
    if format is not None:
        return frame_from_array(arr, format)
    return CPUTensor(arr, context=context)


def _require_one_block(arr: np.ndarray, why: str) -> None:
    """Refuse an array whose elements are not one contiguous run of bytes (a column slice, negative strides,
    Fortran order): reading it as a byte buffer would read the gaps between its elements, or read it transposed."""
    if arr.size > 1 and not arr.flags.c_contiguous:
        raise InvalidTensorError(
            f"{why}, but this array is a strided view (shape {arr.shape}, strides {arr.strides}): pass the array it "
            f"was sliced from, or numpy.ascontiguousarray(arr) (a copy)")


def frame_from_array(arr: np.ndarray, format: FrameFormat, width: int | None = None, height: int | None = None) -> Frame:
    """Split one image buffer into the planes of ``format``, zero-copy.

    Packed formats take (H, W, C) arrays, any strides (the plane is the array itself); YUV formats take (H*3/2, W)
    arrays (planes one after another, with the row pitch of the array: columns must be contiguous and rows go
    forward) or, with width/height, any C-contiguous buffer holding tight planes.
    """
    if not isinstance(arr, np.ndarray):
        raise UnsupportedTypeError(f"frame_from_array() takes a numpy.ndarray, not {type(arr).__name__}")
    specs = plane_layout(format)
    if len(specs) == 1:
        spec = specs[0]
        want_ndim = 2 if spec.channels == 0 else 3
        if arr.ndim != want_ndim or (spec.channels and arr.shape[2] != spec.channels) or arr.dtype != spec.dtype:
            raise InvalidTensorError(f"a {format.name} image must be an array shaped (H, W{', ' + str(spec.channels) if spec.channels else ''}) "
                                     f"of {spec.dtype}, got {arr.shape} {arr.dtype}")
        t = CPUTensor(arr)
        return Frame([t], format, arr.shape[1], arr.shape[0])
    if width is None or height is None:
        if arr.ndim != 2:
            raise InvalidTensorError(f"a {format.name} buffer must be 2-D (H*3/2, W), got shape {arr.shape}; or give width and height")
        width, rows = arr.shape[1], arr.shape[0]
        if arr.dtype != specs[0].dtype:
            raise InvalidTensorError(f"a {format.name} buffer must be of {specs[0].dtype}, got {arr.dtype}")
        height = stacked_height(format, rows)  # InvalidTensorError when no height stacks to exactly `rows`
        pitch = arr.strides[0]
        item = arr.dtype.itemsize
        # The chroma planes sit after the luma rows at the array's row pitch: that only describes the array's own
        # bytes when its columns are contiguous and its rows go forward (a column slice would be read as if tight).
        if (width > 1 and arr.strides[1] != item) or pitch < width * item:
            raise InvalidTensorError(
                f"a {format.name} buffer must have contiguous columns and forward rows (strides (pitch >= "
                f"{width * item}, {item})), got strides {arr.strides}: pass the buffer it was sliced from, or "
                f"numpy.ascontiguousarray(arr) (a copy)")
        base = arr
    else:
        width, height = as_int(width, "width"), as_int(height, "height")
        _require_one_block(arr, f"a {format.name} frame given width and height is read as tight planes")
        pitch = None
        base = arr
    pitches = None
    if pitch is not None:
        pitches = [pitch if s.sub_x == 1 or s.channels else pitch // s.sub_x for s in specs]
    offsets, total = packed_offsets(format, width, height, pitches)
    infos = plane_infos(format, width, height, pitches)
    planes = [CPUTensor(view_bytes(base, off, inf)) for off, inf in zip(offsets, infos)]
    return Frame(planes, format, width, height)


def _is_cpu_dlpack(cls: type) -> bool:
    return hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__") and not class_in(cls, "interop")


def _has_buffer(cls: type) -> bool:
    return cls in (bytes, bytearray, memoryview) or class_in(cls, "mmap", "mmap") or hasattr(cls, "__buffer__")


register_wrapper(Wrapper("numpy.ndarray", lambda c: issubclass(c, np.ndarray), wrap_cpu, priority=0))
# wrap(ndarray) with no other argument builds a CPUTensor directly (what the Wrapper above gives): once per frame
register_exact_wrap(np.ndarray, CPUTensor)
register_wrapper(Wrapper("CPU DLPack producers", _is_cpu_dlpack, wrap_cpu, priority=-10))
register_wrapper(Wrapper("buffer-protocol objects", _has_buffer, wrap_cpu, priority=-20))


def _probe() -> list[BackendReport]:
    return [BackendReport("CPU", True, f"numpy {np.__version__}", [platform.processor() or platform.machine()], "A")]


BACKEND = register_backend(Backend("cpu", "CPU", (MemoryType.CPU,), tier="A", probe=_probe))


# ---- host memory shared at full pitch (OpenVINO, FFmpeg) ------------------------------------------------


def buffer_bounds(arr: np.ndarray) -> tuple[int, int] | None:
    """[start, end) addresses of the whole buffer under ``arr`` when it can be found, else None."""
    base: Any = arr
    for _ in range(64):
        nxt = base.base if isinstance(base, np.ndarray) else base.owner if isinstance(base, _ArrayExport) else None
        if nxt is None:
            break
        if isinstance(nxt, Tensor):
            nxt = nxt.native if isinstance(nxt.native, np.ndarray) else None
            if nxt is None:
                return None
        base = nxt
    if isinstance(base, np.ndarray):
        if not (base.flags.c_contiguous or base.flags.f_contiguous):
            return None
        lo = int(base.__array_interface__["data"][0])
        return lo, lo + base.nbytes
    bounds = getattr(base, "host_bounds", None)  # a mapping that knows its extent (GStreamer memory, ...)
    if bounds is not None:
        lo, hi = bounds()
        return int(lo), int(hi)
    try:
        mv = memoryview(base)
    except TypeError:
        return None
    if mv.nbytes == 0:
        return None
    lo = int(np.frombuffer(mv, np.uint8).__array_interface__["data"][0])
    return lo, lo + mv.nbytes


def shareable(arr: np.ndarray, frame_plane: bool) -> np.ndarray | None:
    """A C-contiguous array over the same memory as ``arr`` (``arr`` itself, or its rows at full pitch), or None.

    ``frame_plane`` gives the (1, rows, pitch_elems, C) shape of frame planes. The result may be read-only.
    """
    item = arr.dtype.itemsize
    if arr.ndim in (2, 3):
        channels = arr.shape[2] if arr.ndim == 3 else 1
        pixel = channels * item
        rows, pitch = arr.shape[0], arr.strides[0]
        inner = arr.strides[1:] == ((pixel, item) if arr.ndim == 3 else (item,)) or arr.shape[1] * channels <= 1
        if inner and rows and (rows == 1 or pitch == arr.shape[1] * pixel):  # rows follow each other already
            cols = arr.shape[1]
            return arr.reshape((1, rows, cols, channels) if frame_plane else arr.shape)
        if inner and pitch > 0 and pitch % pixel == 0:
            shape = (rows, pitch // pixel) + ((channels,) if arr.ndim == 3 else ())
            if frame_plane:
                shape = (1, rows, pitch // pixel, channels)
            start = int(arr.__array_interface__["data"][0])
            bounds = buffer_bounds(arr)
            if bounds is not None and bounds[0] <= start and start + rows * pitch <= bounds[1]:
                return _alias(start, shape, arr.dtype, arr, readonly=not arr.flags.writeable)
        return None
    if arr.flags.c_contiguous:
        return arr
    return None


def _alias(address: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any, *, readonly: bool) -> np.ndarray:
    iface = {"version": 3, "shape": shape, "typestr": dtype.str, "descr": dtype.descr,
             "data": (address, readonly), "strides": None}
    return np.asarray(_ArrayExport(iface, owner))
