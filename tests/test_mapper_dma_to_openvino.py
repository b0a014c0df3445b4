"""DMA -> OPENVINO: shared ov.Tensors over the mapping (zero-copy), full-pitch plane shapes, inference reads them."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import FrameFormat, InvalidTensorError, MemoryType, TensorInfo, copy_meter
from interop.tensors.dma import DMAContext, FramePool
from tests.support.requirements import need_module

need_module("openvino")


def test_frame_planes_alias_the_mapping_at_full_pitch():
    pool = FramePool(FrameFormat.NV12, 854, 480, 1)
    f = pool.acquire()
    with copy_meter() as cm:
        o = interop.map(f, MemoryType.OPENVINO)
    assert cm.copies == 0
    m = f[0].buffer.mapping(True)
    shapes = [tuple(t.native.get_shape()) for t in o]
    assert shapes == [(1, 480, 896, 1), (1, 240, 448, 2)]
    for t, src in zip(o, f):
        assert t.native.data.ctypes.data == m.address + src.offset == t.data_ptr
    # write-through: the DMA buffer's bytes are what OpenVINO reads
    with interop.map(f, MemoryType.CPU, mode=interop.AccessMode.WRITE) as c:
        np.asarray(c[0])[2, 3] = 99
    assert o[0].native.data[0, 2, 3, 0] == 99
    assert not o[0].writable  # READ: the user's view stays read-only; OpenVINO has a private alias
    o.release()
    f.release()
    del o, t, c  # OpenVINO's tensors are views of the buffer: it stays in use while they exist
    gc.collect()
    assert pool.free_count == 1


def test_a_model_reads_the_dma_tensor():
    import openvino as ov
    import openvino.opset13 as ops

    t = DMAContext().alloc_tensor(TensorInfo((1, 8), np.float32))
    with interop.map(t, MemoryType.CPU, mode=interop.AccessMode.WRITE) as c:
        np.asarray(c)[:] = np.arange(8, dtype=np.float32)
    p = ops.parameter([1, 8], ov.Type.f32)
    model = ov.Model([ops.multiply(p, ops.constant(np.float32(2)))], [p])
    cm = ov.Core().compile_model(model, "CPU")
    o = interop.map(t, MemoryType.OPENVINO)
    out = cm.create_infer_request().infer({0: o.native})
    assert np.array_equal(next(iter(out.values())), np.arange(8, dtype=np.float32).reshape(1, 8) * 2)
    o.release()
    t.release()


def test_non_contiguous_tensor_is_refused_with_a_hint():
    t = DMAContext().alloc_tensor(TensorInfo((4, 8), np.uint8, (16, 1)))
    with pytest.raises(InvalidTensorError, match="C-contiguous.*map a Frame"):
        interop.map(t, MemoryType.OPENVINO)
    t.release()
