"""The Tensor base class: one strided array in one kind of memory, with its native handle and lifetime."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar

import numpy as np

from .context import Context
from .errors import InteropBufferError, InteropError, InvalidTensorError, UnsupportedTypeError
from .info import TensorInfo, as_int
from .types import MemoryType


def _run_hooks(hooks: list[Callable[[], None]]) -> None:
    if sys.is_finalizing():  # interpreter teardown: daemon threads are frozen, maybe holding our locks; the OS frees it
        return
    # Runs once (weakref.finalize guarantees it), newest first, like nested with-blocks. A hook that raises
    # (a failed write-back) must not stop the older ones (unmap, close an fd): all run, the first error is raised.
    error: BaseException | None = None
    while hooks:
        hook = hooks.pop()
        try:
            hook()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the other hooks ran
            if error is None:
                error = e
    if error is not None:
        raise error


_new = object.__new__


class _ArrayExport:
    """What numpy keeps as ``base`` of a view: the interface dict plus the tensor that owns the memory."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, iface: dict[str, Any], owner: object):
        self.__array_interface__ = iface
        self.owner = owner


class Tensor:
    """One strided array in one memory type.

    ``parent`` keeps whatever the tensor was mapped from alive (the whole chain). ``release()`` (or the end
    of a ``with`` block, or garbage collection) ends the mapping: WRITE mappings write back then. A released
    tensor raises InvalidTensorError when used, but numpy/DLPack views taken from it keep the memory alive
    until the last view is gone.
    """

    memory_type: ClassVar[MemoryType]
    #: DL Streamer handle key -> attribute name of this class
    HANDLE_KEYS: ClassVar[dict[str, str]] = {}
    # Class-level defaults of the lifetime state: tensors built once per plane per frame (the mappers' trusted
    # constructors) leave them unset until release() or on_release() changes them.
    _released: bool = False
    _finalizer: weakref.finalize | None = None
    _hooks: list[Callable[[], None]] | None = None

    def __init__(self, native: Any, info: TensorInfo, *, context: Context | None = None,
                 parent: Tensor | Any | None = None, writable: bool = True):
        if type(info) is not TensorInfo:
            raise InvalidTensorError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
        if context is not None and not isinstance(context, Context):
            raise UnsupportedTypeError(f"context must be an interop.Context or None, not {type(context).__name__}")
        if writable is not True and writable is not False and not isinstance(writable, np.bool_):
            raise UnsupportedTypeError(f"writable must be True or False, not {writable!r}")
        self._native = native
        self._info = info
        self._context = context
        self._parent = parent
        self._writable = bool(writable)
        self._released = False
        # Made on the first on_release(): most tensors own nothing to clean up, and a finaliser is not free on a per-frame path.
        self._finalizer = None
        self._hooks = None

    @classmethod
    def _unchecked(cls, native: Any, info: TensorInfo, context: Context | None, parent: Any, writable: bool) -> Any:
        """An instance of ``cls`` in the state ``__init__`` gives, without its checks: the one unchecked constructor
        of the per-frame paths (mappers' outputs are consistent by construction; ``info`` is validated and
        interned, ``writable`` a bool). Lifetime state comes from the class defaults above; a subclass's own
        state is the caller's to set. tests/test_tensor_ffmpeg.py checks it matches the public constructor."""
        t = _new(cls)
        t._native = native
        t._info = info
        t._context = context
        t._parent = parent
        t._writable = writable
        return t

    @classmethod
    def _unchecked_planes(cls, infos: Any, planes: Any, context: Context | None, parent: Any,
                          specs: Any = None) -> list[Any]:
        """One read-only ``cls`` per plane of a frame, in one call (it runs once per frame, so its per-plane work is
        the constructor's): tensor ``i`` views ``planes[i]`` (``_plane``; ``_index`` = i) with ``infos[i]``, and its
        ``native`` is made on first use (``_native`` None); ``specs[i]``, when given, is how the class shares the
        plane (``_spec``: e.g. OpenVINO's full-pitch shape and element type). The state is ``_unchecked``'s, stored
        in the same order (instances of one class then share one attribute layout)."""
        new = _new
        out = []
        i = 0
        if specs is None:
            for p, info in zip(planes, infos):
                t: Any = new(cls)
                t._native = None
                t._info = info
                t._context = context
                t._parent = parent
                t._writable = False
                t._plane = p
                t._index = i
                out.append(t)
                i += 1
            return out
        for p, info, spec in zip(planes, infos, specs):
            t = new(cls)
            t._native = None
            t._info = info
            t._context = context
            t._parent = parent
            t._writable = False
            t._plane = p
            t._index = i
            t._spec = spec
            out.append(t)
            i += 1
        return out

    # -- lifetime -------------------------------------------------------------------------------------
    def on_release(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once at release (or when garbage-collected). It must not refer to the tensor itself."""
        if self._hooks is None:
            self._hooks = []
            self._finalizer = weakref.finalize(self, _run_hooks, self._hooks)
        self._hooks.append(hook)

    def release(self) -> None:
        """End this mapping now (write back / unmap / close owned handles). Idempotent."""
        if self._released:
            return
        self._released = True
        if self._finalizer is not None:
            self._finalizer()

    @property
    def released(self) -> bool:
        return self._released

    def _check(self) -> None:
        if self._released:
            raise InvalidTensorError(
                f"this {self.memory_type.name} tensor was released; map or wrap the source again to get a new one")

    def __enter__(self) -> Tensor:
        self._check()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    # -- attributes -----------------------------------------------------------------------------------
    @property
    def info(self) -> TensorInfo:
        self._check()
        return self._info

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    @property
    def dtype(self) -> np.dtype:
        return self.info.dtype

    @property
    def strides(self) -> tuple[int, ...]:
        return self.info.strides

    @property
    def context(self) -> Context | None:
        self._check()
        return self._context

    @property
    def parent(self) -> Any:
        return self._parent

    @property
    def native(self) -> Any:
        self._check()
        return self._native

    @property
    def writable(self) -> bool:
        """False for read-only mappings (e.g. a READ view of a decoder's reference frame)."""
        return self._writable

    def handle(self, key: str = "") -> int:
        """A native handle by DL Streamer's key name (``dma_fd``, ``cl_mem``, ``usm_ptr``, ``va_surface_id`` …).

        The value is valid while this tensor lives; on a released tensor this raises InvalidTensorError."""
        self._check()
        if not isinstance(key, str):
            raise UnsupportedTypeError(f"handle() takes a key name such as 'dma_fd' or 'data', not {key!r}")
        keys = dict(self.HANDLE_KEYS)
        if self._host_address() is not None:
            keys.setdefault("data", "data_ptr")
        if key == "" and keys:
            key = next(iter(keys))
        if key not in keys:
            known = ", ".join(keys) or "none"
            raise InvalidTensorError(f"{type(self).__name__} has no handle {key!r}; its handles are: {known}")
        return int(getattr(self, keys[key]))

    @property
    def data_ptr(self) -> int:
        """Host address of the first element, for CPU-reachable tensors; InvalidTensorError once released.

        Every subclass inherits the released check: a stale address handed to C code would read freed memory."""
        self._check()
        addr = self._host_address()
        if addr is None:
            raise InvalidTensorError(
                f"a {self.memory_type.name} tensor is not reachable from the CPU; map it to MemoryType.CPU first")
        return addr

    # -- CPU reach ------------------------------------------------------------------------------------
    def _host_address(self) -> int | None:
        """Address of element 0 in this process, or None when the CPU cannot reach the memory."""
        return None

    def _array_interface(self) -> dict[str, Any]:
        self._check()
        addr = self._host_address()
        if addr is None:
            raise AttributeError("__array_interface__")
        info = self._info
        return {"version": 3, "shape": info.shape, "typestr": info.dtype.str,
                "descr": info.dtype.descr, "data": (addr, not self._writable), "strides": info.strides}

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return self._array_interface()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        # numpy uses __array_interface__ first; this is reached only for memory the CPU cannot see.
        self._check()
        if self._host_address() is None:
            raise InvalidTensorError(
                f"a {self.memory_type.name} tensor is not reachable from the CPU: "
                f"interop.map(t, interop.MemoryType.CPU) first (allow_copy=True if the route copies)")
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=bool(copy))

    def numpy(self) -> np.ndarray:
        """A zero-copy numpy view (read-only for read-only mappings). It keeps this tensor's memory alive."""
        iface = self._array_interface()
        return np.asarray(_ArrayExport(iface, self))

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        self._check()
        if self._host_address() is None:
            raise InteropBufferError(
                f"a {self.memory_type.name} tensor has no DLPack export; map it to CPU or CUDA first")
        if stream is not None:
            raise InteropBufferError("stream must be None for CPU memory")
        kw: dict[str, Any] = {"dl_device": dl_device, "copy": copy}
        if max_version is not None:
            kw["max_version"] = max_version
        # numpy builds the capsule; its deleter drops the view, and the view holds this tensor.
        try:
            return self.numpy().__dlpack__(**kw)
        except BufferError as e:  # a read-only view asked for a legacy capsule, a device other than the CPU
            raise InteropBufferError(f"{e}; ask with max_version=(1, 0) or higher, or map with a WRITE mode") from e
        except (TypeError, ValueError) as e:  # malformed dl_device / copy / max_version
            raise UnsupportedTypeError(f"bad __dlpack__ argument: {e}") from e

    def __dlpack_device__(self) -> tuple[int, int]:
        self._check()
        if self._host_address() is None:
            raise InteropBufferError(
                f"a {self.memory_type.name} tensor has no DLPack device; map it to CPU or CUDA first")
        return (1, 0)  # kDLCPU

    # -- regions --------------------------------------------------------------------------------------
    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        """A tensor over the same memory, ``offset`` bytes further, with ``info``. Subclasses that can, override."""
        raise InteropError(f"{type(self).__name__} does not support regions (crop) of its memory")

    def region(self, x: int, y: int, w: int, h: int) -> Tensor:
        """Zero-copy region of an image plane shaped (H, W) or (H, W, C)."""
        self._check()
        x, y, w, h = (as_int(v, n) for v, n in ((x, "x"), (y, "y"), (w, "w"), (h, "h")))
        info = self._info
        if info.ndim not in (2, 3):
            raise InvalidTensorError(f"region() needs an image plane of shape (H, W) or (H, W, C), not {info.shape}")
        H, W = info.shape[:2]
        if min(x, y) < 0 or w <= 0 or h <= 0 or x + w > W or y + h > H:
            raise InvalidTensorError(f"region x={x} y={y} w={w} h={h} is not inside the {W}x{H} plane")
        offset = y * info.strides[0] + x * info.strides[1]
        return self._view(offset, TensorInfo((h, w) + info.shape[2:], info.dtype, info.strides))

    def __repr__(self) -> str:
        # Never raises: repr() runs in tracebacks and debuggers, on released and half-built tensors alike.
        if self._released:
            return f"<{type(self).__name__} released>"
        if getattr(self, "_info", None) is None:  # __init__ raised part-way
            return f"<{type(self).__name__} not initialised>"
        return f"<{type(self).__name__} {self.memory_type.name} shape={self._info.shape} dtype={self._info.dtype}>"
