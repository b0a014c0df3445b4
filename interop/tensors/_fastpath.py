"""Cheap construction of the tensors and frames a mapper builds once per frame (FFmpeg, OpenVINO, CPU views).

A mapper's outputs are consistent by construction (plane layouts come from a per-format cache), so they skip
re-validation: ``Tensor.__init__`` is called with an interned TensorInfo, and frames are built without
``Frame.__init__``'s checks. tests/test_tensor_ffmpeg.py checks that the state of these objects matches what
the public constructors give, so a change in the core classes shows up there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from ..context import CPU_CONTEXT, Context
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import MemoryMapper
from ..tensor import Tensor
from ..types import AccessMode, check_mode
from .cpu import CPUTensor

T = TypeVar("T", bound=Tensor)


def trusted(cls: type[T], native: Any, info: TensorInfo, context: Context | None, parent: Any, writable: bool) -> T:
    """An instance of ``cls`` in the state ``Tensor.__init__`` gives (``info`` already validated and interned)."""
    t: Any = _new(cls)
    t._native = native
    t._info = info
    t._context = context
    t._parent = parent
    t._writable = writable
    t._released = False
    t._finalizer = None  # made by the first on_release(), as Tensor does
    t._hooks = None
    return t  # type: ignore[no-any-return]


_new = object.__new__


class CPUView(CPUTensor):
    """A CPUTensor over a view of another tensor's memory; ``info`` is the array's own (already validated)."""

    def __init__(self, array: np.ndarray, info: TensorInfo, parent: Any, writable: bool, address: int | None = None):
        Tensor.__init__(self, array, info, context=CPU_CONTEXT, parent=parent, writable=writable)
        self._addr = address

    @classmethod
    def of(cls, array: np.ndarray, info: TensorInfo, parent: Any, writable: bool, address: int | None = None) -> CPUView:
        t = trusted(cls, array, info, CPU_CONTEXT, parent, writable)
        t._addr = address
        return t


class MappedView(CPUView):
    """A CPU view over a mapping (DMA mmap, OpenCL map, VA derived image). numpy views of it hold the mapping's
    array, not this tensor, and release() drops the tensor's own reference: the mapping (and a pool buffer under
    it) stays alive exactly while views exist; its owner unmaps in a finaliser on that array."""

    @property
    def __array_interface__(self) -> dict[str, Any]:  # numpy then asks __array__, whose views hold the mapping
        raise AttributeError("__array_interface__")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        if copy:
            return np.array(arr, dtype=dtype, copy=True)
        return arr if dtype is None or np.dtype(dtype) == arr.dtype else arr.astype(dtype)

    def numpy(self) -> np.ndarray:
        self._check()
        return self._native.view()  # type: ignore[no-any-return]

    def release(self) -> None:
        if self._released:
            return
        super().release()
        self._native = None  # the mapping's array now lives exactly as long as the views taken from it


def trusted_frame(tensors: Sequence[Tensor], format: Any, width: int, height: int, *, context: Context | None,
                  native: Any, colorspace: Any, color_range: Any, pts: Any, time_base: Any,
                  metadata: dict[str, Any] | None, parent: Any) -> Frame:
    """A Frame with the state ``Frame.__init__`` would give it, for planes built by a mapper (already consistent)."""
    f: Any = object.__new__(Frame)
    f._tensors = list(tensors)
    f._format = format
    f._width = width
    f._height = height
    f._context = context
    f._native = native
    f._attr_src = None
    f._colorspace = colorspace
    f._color_range = color_range
    f._pts = pts
    f._time_base = time_base
    f.metadata = {} if metadata is None else metadata
    f._parent = parent
    f._released = False
    return f  # type: ignore[no-any-return]


def derive_frame(f: Frame, tensors: Sequence[Tensor], context: Context | None, native: Any = None) -> Frame:
    """``f.derive(tensors, context=..., native=...)`` without re-validating the planes."""
    out = trusted_frame(tensors, f._format, f._width, f._height, context=context, native=native,
                        colorspace=None, color_range=None, pts=None, time_base=None,
                        metadata=dict(f.metadata) if f.metadata else {}, parent=f)
    out._copy_attrs(f)  # a pending attribute source stays pending
    return out


class FastMapper(MemoryMapper):
    """A MemoryMapper whose native inputs it recognises itself (``_wrap_input``) skip wrap()'s generic dispatch."""

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
