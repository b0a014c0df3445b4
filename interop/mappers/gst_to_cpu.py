"""GST -> CPU: numpy views of a Gst.Buffer's memories, mapped in place with ``gst_memory_map``. Zero-copy.

Each memory is mapped once per frame (planes sharing a memory share its mapping), READ as GST_MAP_READ with
read-only views, WRITE/READ_WRITE as GST_MAP_READ|GST_MAP_WRITE. A mapping lasts as long as any view of it
(numpy, DLPack) and holds a reference on the buffer and its memory, so views outlive the sample and the pipeline.
WRITE needs a buffer nobody else holds: a shared one (every appsink buffer) raises NotWritableError, or with
``allow_copy=True`` maps a deep copy (``Gst.Buffer.copy_deep()``, counted; ``mapped.parent.native`` is the copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import CPU_CONTEXT
from ..errors import InvalidTensorError
from ..frame import Frame
from ..mapper import register
from ..native import gst as ng
from ..tensor import Tensor, _ArrayExport
from ..tensors._fastpath import CPUView, FastMapper, MappedView, derive_frame
from ..tensors.gst import GstTensor, NotWritableError, _is, wrap_buffer, wrap_memory, wrap_sample
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


@register
class GstToCPU(FastMapper):
    src = MemoryType.GST
    dst = MemoryType.CPU
    zero_copy = True  # READ always; WRITE of a shared buffer copies, only with allow_copy
    refuse_read_only = False  # shared/read-only buffers are refused (NotWritableError) or copied here, counted
    requires = ("gi",)
    extra = "gst"
    tier = "A"

    def _wrap_input(self, obj: Any) -> Tensor | Frame | None:
        if _is(obj, "Sample"):
            return wrap_sample(obj)
        if _is(obj, "Buffer"):
            return wrap_buffer(obj)
        if _is(obj, "Memory"):
            return wrap_memory(obj)
        return None

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
                f"into a buffer you own (Gst.Buffer.new_allocate(), or interop.map(numpy_frame, MemoryType.GST))",
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
