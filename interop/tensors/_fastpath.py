"""Trusted, cheap Tensor construction for per-frame mapping paths (FFmpeg, OpenVINO, their CPU views).

``Tensor.__init__`` validates its TensorInfo and builds a ``weakref.finalize`` (about 1.6 us each); on a
per-frame path that makes six tensors that alone costs more than PyAV's own plane views. Tensors built
here take an already-validated (cached) TensorInfo and create the finalizer only when a release hook is
registered, which is the first moment one is needed. Behaviour is otherwise that of ``Tensor``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..context import CPU_CONTEXT, Context
from ..info import TensorInfo
from ..mapper import MemoryMapper
from ..frame import Frame
from ..tensor import Tensor, _run_hooks
from ..types import AccessMode, check_mode
from .cpu import CPUTensor


def _nothing() -> None:
    pass


class LazyFinalizer:
    """Tensor mixin: the weakref finalizer is made by the first ``on_release()``, not by every constructor."""

    def on_release(self, hook: Callable[[], None]) -> None:
        t: Any = self
        if t._finalizer is _nothing:
            t._finalizer = weakref.finalize(self, _run_hooks, t._hooks)
        t._hooks.append(hook)


T = TypeVar("T", bound=Tensor)


def trusted(cls: type[T], native: Any, info: TensorInfo, context: Context | None, parent: Any, writable: bool) -> T:
    """An instance of ``cls`` (a LazyFinalizer Tensor) with the state ``Tensor.__init__`` would give it."""
    t: Any = object.__new__(cls)
    t._native = native
    t._info = info
    t._context = context
    t._parent = parent
    t._writable = writable
    t._released = False
    t._hooks = []
    t._finalizer = _nothing
    return t  # type: ignore[no-any-return]


class CPUView(LazyFinalizer, CPUTensor):
    """A CPUTensor over a view of another tensor's memory, built without re-validating its layout."""

    @classmethod
    def of(cls, array: np.ndarray, info: TensorInfo, parent: Any, writable: bool) -> CPUView:
        return trusted(cls, array, info, CPU_CONTEXT, parent, writable)


def trusted_frame(tensors: list[Tensor], format: Any, width: int, height: int, *, context: Context | None,
                  native: Any, colorspace: Any, color_range: Any, pts: Any, time_base: Any,
                  metadata: dict[str, Any] | None, parent: Any) -> Frame:
    """A Frame with the state ``Frame.__init__`` would give it, for planes built by a mapper (already consistent)."""
    f: Any = object.__new__(Frame)
    f._tensors = tensors
    f._format = format
    f._width = width
    f._height = height
    f._context = context
    f._native = native
    f.colorspace = colorspace
    f.color_range = color_range
    f.pts = pts
    f.time_base = time_base
    f.metadata = {} if metadata is None else metadata
    f._parent = parent
    f._released = False
    return f  # type: ignore[no-any-return]


def derive_frame(f: Frame, tensors: list[Tensor], context: Context | None, native: Any = None) -> Frame:
    """``f.derive(tensors, context=..., native=...)`` without re-validating the planes."""
    return trusted_frame(tensors, f.format, f.width, f.height, context=context, native=native,
                         colorspace=f.colorspace, color_range=f.color_range, pts=f.pts, time_base=f.time_base,
                         metadata=dict(f.metadata) if f.metadata else {}, parent=f)


class FastMapper(MemoryMapper):
    """A MemoryMapper whose per-call checks cost less: the framework import is checked once per class, and
    inputs the mapper recognises itself (``_wrap_input``) skip the generic wrap() dispatch."""

    _ready: ClassVar[bool] = False

    def _require(self) -> None:
        cls = type(self)
        if not cls._ready:
            super()._require()
            cls._ready = True

    def _wrap_input(self, obj: Any) -> Tensor | Frame | None:
        """Wrap a native input this mapper knows (e.g. an av.VideoFrame); None to use interop.wrap()."""
        return None

    def map(self, obj: Tensor | Frame, mode: AccessMode = AccessMode.READ, *, allow_copy: bool = False) -> Any:
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
        if not isinstance(obj, (Tensor, Frame)):
            wrapped = self._wrap_input(obj)
            if wrapped is not None:
                obj = wrapped
        return super().map(obj, mode, allow_copy=allow_copy)
