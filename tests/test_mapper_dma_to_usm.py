"""DMA -> USM (Level Zero import), end to end through the real loader and the fake driver: pointers compared,
writes through one side read through the other, no copy counted, the import freed at release."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests import ze_fake


def _nv12():  # type: ignore[no-untyped-def]
    from interop.tensors.dma import DMAContext

    f = DMAContext().alloc_frame(FrameFormat.NV12, 60, 40)  # 60 wide: rows padded to 64 bytes
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[:] = np.arange(60, dtype=np.uint8)
        np.asarray(c[1])[:] = 200
    return f


def case_frame_import_is_zero_copy() -> None:
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create(import_as="host")
    f = _nv12()
    base = ze.live_allocations()
    with interop.copy_meter() as m:
        u = interop.map(f, lz, mode=AccessMode.READ_WRITE)  # written below: a READ mapping is read-only
    assert m.copies == 0 and m.bytes == 0
    assert u.memory_type is MemoryType.USM and u.context is lz and u.parent is f
    assert u[0].native is u[1].native  # one buffer, one import
    assert ze.live_allocations() == base + 1
    alloc = u[0].native
    assert alloc.imported_fd == f[0].fd and alloc.kind == "host"
    for d, t in zip(f.tensors, u.tensors):
        assert t.pointer == alloc.pointer + d.offset and t.info == d.info and t.parent is d
    assert ze.alloc_properties(lz.native, u[1].pointer).type == "host"
    # the same pages: read what the DMA side wrote, write and read back through the DMA mapping
    assert (np.asarray(u[0])[:, :60] == np.arange(60, dtype=np.uint8)).all() and (np.asarray(u[1]) == 200).all()
    np.asarray(u[1])[5, 7] = (1, 2)
    with interop.map(f, MemoryType.CPU) as c:
        assert tuple(np.asarray(c[1])[5, 7]) == (1, 2)
    u.release()
    assert ze.live_allocations() == base
    assert f[0].fd >= 0  # the DMA frame (and its fd) is untouched


def case_device_import_shares_memory() -> None:
    """Device memory is not CPU-reachable for interop, but it is the same buffer: the fake's device pointer is
    host-visible, so the test reads it with ctypes."""
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create()  # import_as="device", like DL Streamer
    f = _nv12()
    u = interop.map(f, lz)
    assert u[0].usm_type == "device"
    with pytest.raises(interop.InteropError):
        np.asarray(u[0])
    assert ctypes.string_at(u[0].pointer, 3) == bytes([0, 1, 2])
    ctypes.memset(u[1].pointer, 17, 4)
    with interop.map(f, MemoryType.CPU) as c:
        assert list(np.asarray(c[1]).reshape(-1)[:4]) == [17] * 4


def case_single_tensor_and_default_context() -> None:
    from interop.info import TensorInfo
    from interop.tensors.dma import DMAContext

    t = DMAContext().alloc_tensor(TensorInfo((8, 8), np.float32))
    from interop.tensors.level_zero import LevelZeroContext

    u = interop.map(t, LevelZeroContext.default())
    assert u.info == t.info and u.parent is t
    chain = interop.route(MemoryType.DMA, MemoryType.USM)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["dma_to_usm"]


def case_tiled_buffers_are_refused() -> None:
    from interop.info import TensorInfo
    from interop.tensors.dma import DMAContext, DMATensor
    from interop.tensors.level_zero import LevelZeroContext

    ctx = DMAContext()
    buf = ctx.allocate(4096)
    t = DMATensor(buf, TensorInfo((32, 64), np.uint8), drm_modifier=(1 << 56) | 1)  # I915_FORMAT_MOD_X_TILED
    with pytest.raises(interop.InvalidTensorError, match="tiled"):
        interop.map(t, LevelZeroContext.default())


def test_output_context_must_be_level_zero() -> None:
    from interop.context import Context
    from interop.errors import ContextMismatchError
    from interop.info import TensorInfo
    from interop.mappers.dma_to_usm import DMAToUSM
    from interop.tensors.dma import DMAContext

    class OtherUSM(Context):
        memory_type = MemoryType.USM

    t = DMAContext().alloc_tensor(TensorInfo((4, 4), np.uint8))
    with pytest.raises(ContextMismatchError, match="LevelZeroContext"):
        DMAToUSM(None, OtherUSM(native=object())).map(t)


def test_without_a_driver_the_route_says_so() -> None:
    """Here (no Level Zero driver in the test process) the default USM import context is unavailable, by name."""
    from interop.native import level_zero as ze
    from interop.tensors.dma import DMAContext
    from interop.tensors.level_zero import LevelZeroContext

    if ze.init_early():
        pytest.skip("a Level Zero driver answers in this process")
    with pytest.raises(interop.BackendUnavailableError, match="Level Zero|libze"):
        LevelZeroContext.default()
    f = DMAContext().alloc_frame(FrameFormat.NV12, 16, 16)
    with pytest.raises(interop.BackendUnavailableError):
        interop.map(f, MemoryType.USM)  # routed to dma_to_usm, whose default context is Level Zero's


globals().update(ze_fake.tests_for(globals()))
