"""Page-aligned host memory: CPU tensors and frames that devices can import in place, without a copy.

The NPU plugin imports host memory (``CPU_VA``, Level Zero's system-memory import) only when it starts on a page
boundary and spans whole pages (docs/npu.md). numpy's allocator guarantees neither, so a plain array reaches the
NPU through a copy. ``empty()`` and ``empty_frame()`` allocate from an anonymous ``mmap`` instead: the memory starts
on a page boundary, its size is rounded up to whole pages, and it is zero-filled. It is freed when the last tensor,
frame plane or numpy view over it is gone.
"""

from __future__ import annotations

import errno
import mmap
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidTensorError, ResourceError, UnsupportedTypeError
from .frame import Frame
from .info import TensorInfo, as_int, packed_offsets, plane_infos
from .tensor import _ArrayExport
from .tensors.cpu import CPUTensor, view_bytes
from .types import FrameFormat

PAGE = mmap.PAGESIZE
MAX_ALIGN = 1 << 30

_lock = threading.Lock()
_live = {"blocks": 0}


def live_allocations() -> int:
    """How many page-aligned allocations are alive now (each freed when its last view is gone): a leak check."""
    return _live["blocks"]


def _freed() -> None:
    with _lock:
        _live["blocks"] -= 1


class PageBlock:
    """One anonymous private mapping: ``address`` on an ``align`` boundary, ``size`` bytes (whole pages).

    Every array over it refers to this object; the mapping is unmapped when the last one is gone. One page past
    ``size`` is mapped too and never handed out: anonymous mappings are often placed next to each other, and the
    NPU plugin refuses an import whose next page is part of an existing import, so two blocks' imports never touch.
    """

    __slots__ = ("_mm", "_anchor", "address", "size", "__weakref__")

    def __init__(self, size: int, align: int):
        length = size + max(align - PAGE, 0) + PAGE
        try:
            mm = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except OverflowError:
            raise InvalidTensorError(f"{size} bytes cannot be mapped in this process: check the shape") from None
        except OSError as e:
            raise ResourceError(e.errno or errno.ENOMEM, f"cannot map {length} bytes of page-aligned memory "
                                f"({e.strerror}): free tensors you no longer need, or allocate less") from None
        # numpy's export keeps the address fixed and the mmap open for as long as this block lives
        self._mm = mm
        self._anchor = np.frombuffer(mm, np.uint8)
        base = int(self._anchor.ctypes.data)
        self.address = -(-base // align) * align
        self.size = size
        with _lock:
            _live["blocks"] += 1
        weakref.finalize(self, _freed)

    def array(self) -> np.ndarray:
        """The whole block as a writeable uint8 array that keeps the block alive."""
        iface = {"version": 3, "shape": (self.size,), "typestr": "|u1", "descr": [("", "|u1")],
                 "data": (self.address, False), "strides": None}
        return np.asarray(_ArrayExport(iface, self))

    def __repr__(self) -> str:
        return f"<PageBlock {self.address:#x} {self.size} bytes>"


def _check_align(align: object) -> int:
    if align == "page" and isinstance(align, str):
        return PAGE
    if isinstance(align, str):
        raise InvalidTensorError(f"align must be 'page' or a power of two in bytes, not {align!r}")
    if isinstance(align, (bool, np.bool_)) or not isinstance(align, (int, np.integer)):
        raise UnsupportedTypeError(f"align must be 'page' or a power of two in bytes, not {type(align).__name__}")
    a = int(align)
    if a < 1 or a > MAX_ALIGN or a & (a - 1):
        raise InvalidTensorError(f"align must be 'page' or a power of two from 1 to {MAX_ALIGN} bytes, got {a}")
    return max(a, PAGE)  # the start is always on a page boundary, whatever smaller alignment is asked


def _block(nbytes: int, align: object) -> PageBlock:
    a = _check_align(align)
    return PageBlock(-(-max(nbytes, 1) // PAGE) * PAGE, a)


def empty(shape_or_info: TensorInfo | int | Sequence[int], dtype: Any = None, *, align: object = "page") -> CPUTensor:
    """A CPU tensor over new page-aligned memory (zero-filled), for data that a device imports without a copy.

    ``shape_or_info``: a shape (``dtype`` defaults to uint8) or a TensorInfo (its strides are kept; give no dtype).
    ``align``: ``"page"`` or a power of two in bytes (at least a page is always kept). The memory starts on that
    boundary and spans whole pages; it is freed when the tensor and every numpy view of it are gone.
    ``numpy.asarray(t)`` is a writeable zero-copy view; ``interop.map(t, MemoryType.NPU)`` imports it in place.
    """
    if isinstance(shape_or_info, TensorInfo):
        if dtype is not None:
            raise InvalidTensorError("give the dtype in the TensorInfo, or a shape and a dtype, not both")
        info = shape_or_info
    else:
        shape = (shape_or_info,) if isinstance(shape_or_info, (int, np.integer)) and \
            not isinstance(shape_or_info, (bool, np.bool_)) else shape_or_info
        try:
            dt = np.dtype(np.uint8 if dtype is None else dtype)
        except TypeError as e:
            raise UnsupportedTypeError(f"dtype {dtype!r} is not a numpy dtype: {e}") from None
        info = TensorInfo(shape, dt)  # type: ignore[arg-type]  # TensorInfo validates the shape itself
    block = _block(info.extent, align)
    return CPUTensor(view_bytes(block.array(), 0, info))


def empty_frame(format: FrameFormat, width: int, height: int, *, align: object = "page",
                pitch_align: int = 64) -> Frame:
    """A CPU Frame whose planes follow each other in one new page-aligned allocation (zero-filled).

    Rows are padded to ``pitch_align`` bytes (subsampled chroma at half that pitch, as FFmpeg lays out yuv420p and
    nv12). The first plane starts on the ``align`` boundary and the allocation spans whole pages, so a frame maps to
    the NPU with one import and no copy. Planes are CPU tensors (``numpy.asarray(frame[i])`` writes through);
    the memory is freed when the frame's planes and every view of them are gone.
    """
    from .tensors.dma import MAX_DIMENSION, aligned_pitches

    if not isinstance(format, FrameFormat):
        raise UnsupportedTypeError(f"format must be an interop.FrameFormat (e.g. FrameFormat.NV12), "
                                   f"not {type(format).__name__} {format!r}")
    width, height = as_int(width, "width"), as_int(height, "height")
    if not (1 <= width <= MAX_DIMENSION and 1 <= height <= MAX_DIMENSION):
        raise InvalidTensorError(f"frame size {width}x{height} must be 1 to {MAX_DIMENSION} pixels each way")
    pitches = aligned_pitches(format, width, pitch_align)
    offsets, total = packed_offsets(format, width, height, pitches)
    infos = plane_infos(format, width, height, pitches)
    base = _block(total, align).array()
    planes = [CPUTensor(view_bytes(base, off, inf)) for off, inf in zip(offsets, infos)]
    return Frame(planes, format, width, height)


__all__ = ["PAGE", "PageBlock", "empty", "empty_frame", "live_allocations"]
