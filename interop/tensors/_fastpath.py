"""Trusted, cheap Tensor construction for per-frame mapping paths (FFmpeg, OpenVINO, their CPU views).

``Tensor.__init__`` validates its TensorInfo and builds a ``weakref.finalize`` (about 1.6 us each); on a
per-frame path that makes six tensors that alone costs more than PyAV's own plane views. Tensors built
here take an already-validated (cached) TensorInfo and create the finalizer only when a release hook is
registered, which is the first moment one is needed. Behaviour is otherwise that of ``Tensor``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..context import CPU_CONTEXT, Context
from ..info import TensorInfo
from ..tensor import Tensor, _run_hooks
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
