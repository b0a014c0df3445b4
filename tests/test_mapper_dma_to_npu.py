"""DMA -> NPU against a strict double of OpenVINO's remote-context API (tests/ov_remote_double.py): exactly what
dma_to_npu asks of the plugin, that the fd it hands over is the frame's own memory, and (in a child process
with the fake Level Zero driver) the import of offset planes into the plugin's own Level Zero context."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.info import TensorInfo
from tests import ze_fake
from tests.ov_remote_double import RemoteContextDouble, as_void_ptr
from tests.support.requirements import need_module

ov = need_module("openvino")


def _frame(fmt: FrameFormat, w: int = 60, h: int = 40):  # type: ignore[no-untyped-def]
    from interop.tensors.dma import DMAContext

    f = DMAContext().alloc_frame(fmt, w, h)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        for i, p in enumerate(c):
            np.asarray(p)[:] = 10 + i
    return f


def _npu(strategy: str = "auto", l0: int | None = None):  # type: ignore[no-untyped-def]
    from interop.tensors.npu import NPUContext

    rc = RemoteContextDouble(l0)
    return NPUContext(rc, strategy=strategy), rc


def test_fd_hand_off_asks_exactly_this() -> None:
    ctx, rc = _npu("fd")
    f = _frame(FrameFormat.GRAY8)  # 60 wide, pitch 64
    with interop.copy_meter() as m:
        n = interop.map(f, ctx)
    assert m.copies == 0
    assert len(rc.calls) == 1
    typ, shape, props = rc.calls[0]
    assert typ == ov.Type.u8 and shape == [1, 40, 64, 1]
    assert props == {"MEM_TYPE": "SHARED_BUF", "MEM_HANDLE": f"0x{f[0].fd:x}"}
    assert as_void_ptr(props["MEM_HANDLE"]) == f[0].fd
    t = n[0]
    assert t.memory_type is MemoryType.NPU and t.native is rc.tensors[0] and t.parent is f[0] and n.parent is f
    assert t.mem_type == "SHARED_BUF" and t.handle("mem_handle") == f[0].fd and t.info.shape == (1, 40, 64, 1)
    assert (n.width, n.height, n.format) == (60, 40, FrameFormat.GRAY8)
    # the plugin imports the frame's own pages: a write through the DMA side is what it reads
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[3, 5] = 99
    assert rc.tensors[0].mapping[3 * 64 + 5] == 99
    with pytest.raises(interop.InteropError):
        np.asarray(t)  # NPU memory is not CPU-reachable through interop


def test_tensor_keeps_its_shape_and_dtype() -> None:
    from interop.tensors.dma import DMAContext

    ctx, rc = _npu()
    t = DMAContext().alloc_tensor(TensorInfo((2, 3, 8), np.float16))
    n = interop.map(t, ctx)
    assert rc.calls[0][0] == ov.Type.f16 and rc.calls[0][1] == [2, 3, 8] and n.info.shape == (2, 3, 8)


def test_fd_strategy_refuses_offset_planes() -> None:
    ctx, rc = _npu("fd")
    with pytest.raises(interop.InvalidTensorError, match="offset"):
        interop.map(_frame(FrameFormat.NV12), ctx)


def test_default_npu_context_and_route() -> None:
    from interop.context import set_default_context

    chain = interop.route(MemoryType.DMA, MemoryType.NPU)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["dma_to_npu"]
    ctx, rc = _npu("fd")
    set_default_context(MemoryType.NPU, ctx)
    try:
        n = interop.map(_frame(FrameFormat.GRAY8), MemoryType.NPU)
        assert n.context is ctx and len(rc.calls) == 1
    finally:
        set_default_context(MemoryType.NPU, None)


def test_rows_past_the_buffer_are_refused() -> None:
    from interop.tensors.dma import DMAContext, DMATensor

    buf = DMAContext().allocate(39 * 64 + 60)  # exactly the plane's extent: its last row has no padding
    t = DMATensor(buf, TensorInfo((40, 60), np.uint8, (64, 1)))
    ctx, _ = _npu()
    with pytest.raises(interop.InvalidTensorError, match="whole rows"):
        interop.map(t, ctx)


def test_npu_tensor_keeps_the_fd_open() -> None:
    """The plugin's import does not own the fd; the NPU tensor's parent chain keeps the DMA tensor (and its fd)
    alive after the caller drops the frame."""
    import gc
    import os

    ctx, rc = _npu("fd")
    f = _frame(FrameFormat.GRAY8)
    n = interop.map(f, ctx)
    fd = rc.tensors[0].fd
    del f
    gc.collect()
    os.fstat(fd)
    assert n[0].parent.fd == fd
    n.release()
    del n
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_no_npu_here_is_backend_unavailable() -> None:
    from tests.devices import hardware_devices

    if hardware_devices()["npu"]:
        pytest.skip("an NPU is present here")
    from interop.tensors.npu import NPUContext

    with pytest.raises(interop.BackendUnavailableError, match="NPU"):
        NPUContext.create()


# ---- in the child process with the fake Level Zero driver: the plugin context is a real (fake) ze context ----
def _plugin_context(strategy: str = "auto"):  # type: ignore[no-untyped-def]
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create()  # stands for the NPU plugin's own Level Zero context
    ctx, rc = _npu(strategy, lz.ze_context)
    return ctx, rc, lz


def case_nv12_fd_for_luma_import_for_chroma() -> None:
    from interop.native import level_zero as ze

    ctx, rc, lz = _plugin_context()
    f = _frame(FrameFormat.NV12)
    assert ctx.ze_context == lz.ze_context  # read from get_params()["L0_CONTEXT"] (an OVAny of a void*)
    with interop.copy_meter() as m:
        n = interop.map(f, ctx)
    assert m.copies == 0
    assert [c[1] for c in rc.calls] == [[1, 40, 64, 1]]  # only the offset-0 plane went as an fd
    y, uv = n.tensors
    assert y.mem_type == "SHARED_BUF" and uv.mem_type == "L0_HOST"
    assert isinstance(uv.native, ov.Tensor) and list(uv.native.shape) == [1, 20, 32, 2]
    ptr = uv.native.data.ctypes.data
    assert ptr == uv.mem_handle
    props = ze.alloc_properties(lz.native, ptr)
    # the plugin's own test before binding a user tensor without a copy (zero_utils
    # memory_was_allocated_in_the_same_l0_context): zeMemGetAllocProperties on its context gives an id and a type
    assert props.type == "host" and props.id != 0
    base, size = ze.address_range(lz.native, ptr)
    assert ptr - base == f[1].offset and size == f[1].size
    assert (uv.native.data[:, :, :30] == 11).all()  # 30 visible chroma pairs of a 32-pair pitch
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[1])[2, 3] = (7, 8)
    assert tuple(uv.native.data[0, 2, 3]) == (7, 8)


def case_import_strategy_for_every_plane_shares_one_import() -> None:
    from interop.native import level_zero as ze

    ctx, rc, lz = _plugin_context("import")
    f = _frame(FrameFormat.I420, 64, 32)
    before = ze.live_allocations()
    n = interop.map(f, ctx)
    assert rc.calls == [] and ze.live_allocations() == before + 1
    assert [t.info.shape for t in n] == [(1, 32, 64, 1), (1, 16, 32, 1), (1, 16, 32, 1)]
    ptrs = [t.native.data.ctypes.data for t in n]
    assert [p - ptrs[0] for p in ptrs] == [t.offset for t in f]
    del n
    import gc

    gc.collect()
    assert ze.live_allocations() == before


def case_feeding_imported_planes_to_an_infer_request() -> None:
    """How Inference feeds NPU planes: request.set_tensor(input, plane.native). Shown on the CPU plugin with the
    import-path planes (ov.Tensors over the imported memory): the result is computed from the frame's bytes."""
    import openvino.opset13 as ops

    ctx, rc, lz = _plugin_context("import")
    f = _frame(FrameFormat.NV12, 64, 32)
    n = interop.map(f, ctx)
    y_in = ops.parameter([1, 32, 64, 1], ov.Type.u8, name="y")
    uv_in = ops.parameter([1, 16, 32, 2], ov.Type.u8, name="uv")
    s = ops.add(ops.reduce_sum(ops.convert(y_in, ov.Type.f32), [1, 2, 3]),
                ops.reduce_sum(ops.convert(uv_in, ov.Type.f32), [1, 2, 3]))
    cm = ov.Core().compile_model(ov.Model([s], [y_in, uv_in]), "CPU")
    req = cm.create_infer_request()
    req.set_tensor("y", n[0].native)
    req.set_tensor("uv", n[1].native)
    req.infer()
    assert float(req.get_output_tensor(0).data[0]) == 32 * 64 * 10 + 16 * 32 * 2 * 11


globals().update(ze_fake.tests_for(globals()))
