"""Cheap construction of the tensors and frames a mapper builds once per frame (FFmpeg, OpenVINO, CPU views).

A mapper's outputs are consistent by construction (plane layouts come from a per-format cache), so they skip
re-validation through the core classes' one unchecked constructor each, ``Tensor._unchecked`` and
``Frame._unchecked``: the state is declared there, nowhere else. tests/test_tensor_ffmpeg.py checks that the state
of these objects matches what the public constructors give, so a change in the core classes shows up there.
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
    """``cls._unchecked(...)``: an instance of ``cls`` in the state ``Tensor.__init__`` gives (``info`` already
    validated and interned)."""
    return cls._unchecked(native, info, context, parent, writable)  # type: ignore[no-any-return]


class CPUView(CPUTensor):
    """A CPUTensor over a view of another tensor's memory; ``info`` is the array's own (already validated)."""

    def __init__(self, array: np.ndarray, info: TensorInfo, parent: Any, writable: bool, address: int | None = None):
        Tensor.__init__(self, array, info, context=CPU_CONTEXT, parent=parent, writable=writable)
        self._addr = address

    @classmethod
    def of(cls, array: np.ndarray, info: TensorInfo, parent: Any, writable: bool, address: int | None = None) -> CPUView:
        t = cls._unchecked(array, info, CPU_CONTEXT, parent, writable)
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
    f = Frame._unchecked(list(tensors), format, width, height, context, parent, metadata)
    if native is not None:
        f._native = native
    if colorspace is not None or color_range is not None or pts is not None or time_base is not None:
        f._colorspace, f._color_range, f._pts, f._time_base = colorspace, color_range, pts, time_base
    return f  # type: ignore[no-any-return]


def derive_frame(f: Frame, tensors: Sequence[Tensor], context: Context | None, native: Any = None) -> Frame:
    """``f.derive(tensors, context=..., native=...)`` without re-validating the planes."""
    out = Frame._unchecked(list(tensors), f._format, f._width, f._height, context, f,
                           dict(f.metadata) if f.metadata else None)
    if native is not None:
        out._native = native
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

