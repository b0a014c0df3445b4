"""CPU -> OPENCL: a USE_HOST_PTR buffer over the host memory where the device works in host memory (the CPU
device: zero-copy, the buffer *is* the array); elsewhere a device buffer and a counted copy (and a counted copy
back at release for WRITE / READ_WRITE). The edge "may copy": routes and ``interop routes`` say which it is for the
output context (the default one: this machine's OpenCL device).

OpenCL buffers are pitch-linear (rows of contiguous elements, any row pitch): that is what every consumer of an
OpenCL tensor (rectangular copies, OpenVINO, UMats) can read. A tensor whose rows are not contiguous (a
column-strided array) is copied dense, on any device: refused without ``allow_copy``, counted with it, and written
back at release for WRITE / READ_WRITE.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTensorError
from ..frame import Frame
from ..info import TensorInfo
from ..mapper import Cost, MemoryMapper, register
from ..meter import record_copy
from ..tensor import Tensor
from ..tensors.opencl import OpenCLContext, pitch_linear
from ..types import AccessMode, MemoryType


def rows_contiguous(info: TensorInfo) -> bool:
    """Whether an OpenCL buffer can hold the layout as it is (pitch-linear: contiguous rows, any pitch)."""
    try:
        pitch_linear(info)
    except InvalidTensorError:
        return False
    return True


@register
class CPUToOpenCL(MemoryMapper):
    src = MemoryType.CPU
    dst = MemoryType.OPENCL
    zero_copy = False
    may_copy = True  # zero-copy where the device works in host memory, for tensors with contiguous rows
    output_contexts = (OpenCLContext,)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is None or not self.out_context().host_shared:
            return Cost.COPY  # an input of unknown kind may have rows that are not contiguous
        for t in obj.tensors if isinstance(obj, Frame) else (obj,):
            if not rows_contiguous(t.info):
                return Cost.COPY
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        from ..tensors.opencl import OpenCLTensor, buffer_over_host, cl, enqueue_host_copy

        ctx = self.out_context()
        info = t.info
        writable = t.writable and mode.writes  # a READ mapping is read-only, whatever the source allows
        dense_rows = rows_contiguous(info)
        if ctx.host_shared and dense_rows:
            # the Buffer holds a numpy view of the source, which keeps the memory alive (a mapping too) for as
            # long as a user holds ``.native``, after this tensor and the source are gone
            buf = buffer_over_host(ctx, t.data_ptr, info.extent, t.numpy(), read_only=not t.writable)
            return OpenCLTensor(buf, info, context=ctx, parent=t, writable=writable)
        # One counted copy in, and one back at release when the mapping writes.
        self.copying(info.nbytes, allow_copy, "the OpenCL device does not work in host memory" if dense_rows else
                     f"OpenCL buffers hold contiguous rows and this tensor's are not (strides {info.strides}): "
                     f"it is copied dense")
        dense = TensorInfo(info.shape, info.dtype)
        host = t.numpy()
        staged = host if dense_rows else np.ascontiguousarray(host)
        name = self.name
        if ctx.host_shared and staged.nbytes:  # the dense host copy is the buffer's memory: nothing more to move
            buf = buffer_over_host(ctx, int(staged.__array_interface__["data"][0]), staged.nbytes, staged,
                                   read_only=not writable)
            out = OpenCLTensor(buf, dense, context=ctx, parent=t, writable=writable)
            if mode.writes:
                def write_back_host() -> None:
                    np.copyto(host, staged)
                    record_copy(name, info.nbytes)

                out.on_release(write_back_host)
            return out
        cl_ = cl()
        access = cl_.mem_flags.READ_WRITE if t.writable else cl_.mem_flags.READ_ONLY
        buf = cl_.Buffer(ctx.native, access, max(info.nbytes, 1))
        q = ctx.queue
        enqueue_host_copy(q, buf, 0, dense, staged, to_device=True)
        out = OpenCLTensor(buf, dense, context=ctx, parent=t, writable=writable)
        if mode.writes and info.nbytes:
            def write_back() -> None:
                enqueue_host_copy(q, buf, 0, dense, staged, to_device=False)
                if staged is not host:
                    np.copyto(host, staged)
                record_copy(name, info.nbytes)

            out.on_release(write_back)
        return out
