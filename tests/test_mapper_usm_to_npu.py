"""USM (Level Zero) -> NPU against the OpenVINO remote-context double: memory of the plugin's own Level Zero
context goes over as-is; another context's is exported as a DMA-BUF first; SYCL/OpenCL USM is refused."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.info import TensorInfo, plane_infos
from tests import ze_fake
from tests.ov_remote_double import RemoteContextDouble, as_void_ptr
from tests.support.requirements import need_module

ov = need_module("openvino")


def _nv12_usm(lz, kind: str = "shared"):  # type: ignore[no-untyped-def]
    from interop.frame import Frame
    from interop.tensors.level_zero import SharedRelease, usm_tensor

    infos = plane_infos(FrameFormat.NV12, 60, 40, [64, 64])
    alloc = lz.allocate(64 * 60, kind)
    rel = SharedRelease(alloc, 2)
    y = usm_tensor(alloc, infos[0], context=lz, offset=0, release=rel)
    uv = usm_tensor(alloc, infos[1], context=lz, offset=64 * 40, release=rel)
    import ctypes

    ctypes.memset(alloc.pointer, 3, 64 * 40)
    ctypes.memset(alloc.pointer + 64 * 40, 4, 64 * 20)
    return Frame([y, uv], FrameFormat.NV12, 60, 40, context=lz)


def case_memory_of_the_plugin_context_goes_over_as_is() -> None:
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    rc = RemoteContextDouble(lz.ze_context)
    ctx = NPUContext(rc)
    f = _nv12_usm(lz)
    with interop.copy_meter() as m:
        n = interop.map(f, ctx)
    assert m.copies == 0 and rc.calls == []
    for u, t in zip(f.tensors, n.tensors):
        assert t.mem_type == "L0_USM" and t.native.data.ctypes.data == u.pointer and t.parent is u
    assert [t.info.shape for t in n] == [(1, 40, 64, 1), (1, 20, 32, 2)]
    assert (n[0].native.data == 3).all() and (n[1].native.data == 4).all()
    # after the map: a write on one side is seen on the other (the NPU tensor is the USM memory itself)
    import ctypes

    ctypes.c_uint8.from_address(f[0].pointer + 2 * 64 + 5).value = 201  # the USM side writes Y row 2, col 5
    assert n[0].native.data[0, 2, 5, 0] == 201
    n[1].native.data[0, 3, 4, 1] = 202  # the NPU tensor writes UV row 3, pair 4, V
    assert ctypes.c_uint8.from_address(f[1].pointer + 3 * 64 + 4 * 2 + 1).value == 202


def case_another_context_is_exported_then_handed_over() -> None:
    import mmap

    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    plugin = LevelZeroContext.create()
    other = LevelZeroContext.create()
    rc = RemoteContextDouble(plugin.ze_context)
    f = _nv12_usm(other, "device")
    n = interop.map(f, NPUContext(rc))
    # Y (offset 0) goes as the exported fd; UV is imported into the plugin's context at its offset
    assert len(rc.calls) == 1 and rc.calls[0][2]["MEM_TYPE"] == "SHARED_BUF"
    fd = as_void_ptr(rc.calls[0][2]["MEM_HANDLE"])
    assert n[0].mem_handle == fd and n[0].parent.parent is f[0]  # NPU <- DMA (export) <- USM
    mm = mmap.mmap(fd, 64 * 60)
    assert mm[0] == 3 and mm[64 * 40] == 4
    mm[7] = 42
    import ctypes

    assert ctypes.c_uint8.from_address(f[0].pointer + 7).value == 42  # the fd is the USM memory itself
    assert n[1].mem_type == "L0_HOST" and (n[1].native.data == 4).all()
    ctypes.c_uint8.from_address(f[1].pointer + 64 + 3).value = 99  # a USM write after the map reaches the import
    assert n[1].native.data[0, 1, 1, 1] == 99
    n[1].native.data[0, 2, 0, 0] = 98  # and the plugin-side import's write reaches the USM memory
    assert ctypes.c_uint8.from_address(f[1].pointer + 2 * 64).value == 98


def case_tensor_keeps_shape() -> None:
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    t = lz.alloc_tensor(TensorInfo((4, 5), np.float32), "host")
    n = interop.map(t, NPUContext(RemoteContextDouble(lz.ze_context)))
    assert n.info.shape == (4, 5) and n.native.get_element_type() == ov.Type.f32


def test_sycl_usm_is_refused() -> None:
    need_module("dpctl")
    from interop.errors import WrongMemoryError
    from interop.mappers.usm_to_npu import USMToNPU
    from interop.tensors.npu import NPUContext
    from interop.tensors.usm import allocate

    rc = RemoteContextDouble()
    t = allocate(TensorInfo((4, 4), np.uint8), "shared")
    with pytest.raises(WrongMemoryError, match="SYCL/OpenCL"):  # not this edge's input: routing goes another way
        USMToNPU(output_context=NPUContext(rc)).map(t)
    # the only other way to the NPU copies (through the CPU into a DMA buffer): refused without allow_copy
    with pytest.raises(interop.CopyRequiredError, match="allow_copy=True"):
        interop.map(t, NPUContext(rc))
    assert rc.calls == []  # nothing was asked of the plugin


def test_route_is_zero_copy() -> None:
    chain = interop.route(MemoryType.USM, MemoryType.NPU)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["usm_to_npu"]


globals().update(ze_fake.tests_for(globals()))
