"""GST -> CPU: numpy views of a Gst.Buffer's memories, mapped in place with ``gst_memory_map``. Zero-copy, but for
WRITE of a shared buffer (may copy).

Each memory is mapped once per frame (planes sharing a memory share its mapping), READ as GST_MAP_READ with
read-only views, WRITE/READ_WRITE as GST_MAP_READ|GST_MAP_WRITE. A mapping lasts as long as any view of it
(numpy, DLPack) and holds a reference on the buffer and its memory, so views outlive the sample and the pipeline.
WRITE needs a buffer nobody else holds: a shared one (every appsink buffer) is a copy: refused without
``allow_copy`` (this mapper raises NotWritableError, a CopyRequiredError and a BufferError; ``interop.map()`` refuses
the copying route before mapping, with CopyRequiredError), or with ``allow_copy=True`` maps a deep copy
(``Gst.Buffer.copy_deep()``, counted; ``mapped.parent.native`` is the copy). ``input_cost`` says which, so
``route(obj)`` predicts it.
A read-only GST tensor (the output of a READ mapping into GST) is refused for WRITE (InvalidTensorError).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import Cost, register
from ..native import gst as ng
from ..tensor import Tensor, _ArrayExport
from ..tensors._fastpath import CPUView, FastMapper, MappedView, derive_frame
from ..tensors.gst import (
    GstTensor,
    MappedSample,
    NotWritableError,
    _is,
    map_read,
    release_plane,
    sampled_frame,
    wrap_buffer,
    wrap_memory,
    wrap_sample,
)
from ..types import AccessMode, MemoryType


def _view(t: GstTensor, m: ng.MemoryMapping, write: bool) -> CPUView:
    info = t.info
    if t.offset + info.extent > m.size:
        raise InvalidTensorError(f"layout {info} at offset {t.offset} does not fit the mapped {m.size} bytes")
    addr = m.address + t.offset
    iface = {"version": 3, "shape": info.shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (addr, not write), "strides": info.strides}
    arr = np.asarray(_ArrayExport(iface, m))  # the view holds the mapping: unmapped when the last view is gone
    return MappedView.of(arr, info, t, write, addr)


_new = object.__new__


class _IfaceFallback:
    """A non-data descriptor: an instance's own ``__array_interface__`` wins over it; without one it builds it."""

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        return obj._array_interface()


class GstPlaneView(CPUView):
    """A CPU view of a plane mapped in one step. Its numpy array is made on first use of ``.native`` (over the
    mapping, not this tensor: no cycle keeps the mapping alive); numpy.asarray(t), DLPack and regions work from
    the address. ``parent`` is the GstTensor of the plane, made on first use."""

    # the state every plane view starts in, as class attributes: fewer stores per plane per frame
    _native = None
    _context = CPU_CONTEXT
    _writable = False
    _parent: MappedSample
    _index: int

    @property
    def parent(self) -> Any:
        src = self._parent
        return None if src is None else src.frame()[self._index]

    # numpy.asarray(view) reads the dict map_native stores on the instance (a property on every call costs more
    # than the rest of the view); release() removes it, and this fallback then raises the released error
    __array_interface__ = _IfaceFallback()  # type: ignore[assignment]

    def release(self) -> None:
        release_plane(self, 0)  # the frame's list still holds this plane: the mapping ends with the frame's release

    @property
    def native(self) -> np.ndarray:
        self._check()
        arr = self._native
        if arr is None:
            arr = self._native = np.asarray(_ArrayExport(self._array_interface(), self._parent))
        return arr  # type: ignore[no-any-return]

    def numpy(self) -> np.ndarray:
        return self.native.view()


@register
class GstToCPU(FastMapper):
    src = MemoryType.GST
    dst = MemoryType.CPU
    zero_copy = False  # READ always zero-copy; WRITE of a shared buffer copies, only with allow_copy
    may_copy = True
    # a read-only tensor (a READ mapping's output) is refused for WRITE by the base class; shared buffers of writable
    # tensors (every appsink buffer) get NotWritableError here, or a counted deep copy with allow_copy

    def _wrap_input(self, obj: Any) -> Tensor | Frame | None:
        if _is(obj, "Sample"):
            return wrap_sample(obj)
        if _is(obj, "Buffer"):
            return wrap_buffer(obj)
        if _is(obj, "Memory"):
            return wrap_memory(obj)
        return None

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        """READ: zero-copy. WRITE / READ_WRITE: zero-copy when every plane may be written in place now
        (``writable_now``), else a deep copy (what ``_writable`` decides when mapping)."""
        if not mode.writes:
            return Cost.ZERO_COPY
        if obj is None:
            return Cost.COPY  # an input of unknown kind may be shared
        planes: list[Any] = obj.tensors if isinstance(obj, Frame) else [obj]
        if all(isinstance(t, GstTensor) and t.writable_now() for t in planes):
            return Cost.ZERO_COPY
        return Cost.COPY

    def map_native(self, obj: Any, mode: AccessMode, allow_copy: bool) -> Frame | None:
        """interop.map(sample, CPU) in one step for READ; None: the general path (WRITE, several memories, errors)."""
        if mode is not AccessMode.READ:
            return None
        src = map_read(obj)
        if src is None:
            return None
        plan = src.plan
        addr = src.address
        views = []
        for info, i, a, iface in plan.at.get(addr) or plan.views_at(addr):
            v: Any = _new(GstPlaneView)
            v._info, v._parent, v._index, v._addr, v.__array_interface__ = info, src, i, a, iface
            views.append(v)
        return sampled_frame(src, views, CPU_CONTEXT)

    def _writable(self, tensors: list[GstTensor], allow_copy: bool) -> bool:
        """True when the planes may be mapped for WRITE in place; False: map a copy (allowed and counted)."""
        if all(t.writable_now() for t in tensors):
            return True
        nbytes = sum(t.info.nbytes for t in tensors)
        if not allow_copy:
            raise NotWritableError(
                f"{self.name}: this GStreamer buffer is shared (more than one reference, or its memory is read-only; "
                f"every buffer an appsink hands out is), so writing into it would change what others read. Map it "
                f"for READ, or pass allow_copy=True to map a writable deep copy ({nbytes} bytes, counted), or write "
                f"into a buffer you own (Gst.Buffer.new_allocate(), or interop.map(numpy_frame, MemoryType.GST, "
                f"mode=AccessMode.WRITE))",
                step=type(self), src=self.src, dst=self.dst)
        self.copying(nbytes, allow_copy, "the GStreamer buffer is shared: writing needs a deep copy of it")
        return False

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        tensors: list[Any] = f.tensors
        if not all(isinstance(t, GstTensor) for t in tensors):
            raise InvalidTensorError(f"{self.name} maps GstTensors, not {type(tensors[0]).__name__}")
        write = mode.writes
        if write and not self._writable(tensors, allow_copy):
            buffer = tensors[0].buffer
            if buffer is None or any(t.buffer is not buffer for t in tensors):
                raise InvalidTensorError("only the planes of one Gst.Buffer can be copied for WRITE")
            copy = buffer.copy_deep()
            caps = getattr(f, "caps", None)
            src = wrap_buffer(copy, caps if ng.video_meta(ng.pointer_of(copy, "Gst.Buffer")) is None else None)
            f, tensors = src, src.tensors
        mappings: dict[int, ng.MemoryMapping] = {}
        views = []
        for t in tensors:
            t.check_cpu_memory()
            m = mappings.get(t.memory_ptr)
            if m is None:
                buf = ng.pointer_of(t.buffer, "Gst.Buffer") if t.buffer is not None else 0
                m = mappings[t.memory_ptr] = ng.MemoryMapping(t.memory_ptr, write, buf)
            views.append(_view(t, m, write))
        return derive_frame(f, views, CPU_CONTEXT)

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        if not isinstance(t, GstTensor):
            raise InvalidTensorError(f"{self.name} maps GstTensors, not {type(t).__name__}")
        write = mode.writes
        if write and not self._writable([t], allow_copy):
            copy = t.native.copy(0, -1)  # gst_memory_copy: a new, unshared system memory
            t = GstTensor(copy, t.info, offset=t.offset, parent=t)
        t.check_cpu_memory()
        buf = ng.pointer_of(t.buffer, "Gst.Buffer") if t.buffer is not None else 0
        return _view(t, ng.MemoryMapping(t.memory_ptr, write, buf), write)
