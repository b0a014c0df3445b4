"""LevelZeroContext and USM tensors backed by Level Zero allocations (fake driver through the real loader)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import interop
from interop.errors import InteropError, InvalidTensorError
from tests import ze_fake


def case_context_handles_and_equality() -> None:
    from interop.tensors.level_zero import LevelZeroContext
    from interop.types import MemoryType

    ctx = LevelZeroContext.create()
    assert ctx.memory_type is MemoryType.USM
    assert ctx.handle("ze_context") == ctx.ze_context == ctx.native.handle != 0
    assert ctx.handle("ze_device") == ctx.device != 0 and ctx.handle("ze_driver") == ctx.driver
    with pytest.raises(InvalidTensorError, match="ze_context"):
        ctx.handle("cl_context")
    again = LevelZeroContext(ctx.native, ctx.device)
    assert again == ctx and hash(again) == hash(ctx)
    assert LevelZeroContext.create() != ctx  # another ze context
    assert LevelZeroContext.default() is LevelZeroContext.default()


def case_device_type_filter() -> None:
    from interop.errors import BackendUnavailableError
    from interop.tensors.level_zero import LevelZeroContext

    assert LevelZeroContext.create(device_type="VPU").ze_device
    with pytest.raises(BackendUnavailableError, match="GPU"):
        LevelZeroContext.create(device_type="GPU")


def case_usm_tensors_over_allocations() -> None:
    from interop.info import TensorInfo
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.usm import USMTensor

    ctx = LevelZeroContext.create()
    base = ze.live_allocations()
    info = TensorInfo((16, 32), np.uint16)
    for kind in ("host", "shared"):
        t = ctx.alloc_tensor(info, kind)
        assert isinstance(t, USMTensor) and t.usm_type == kind and isinstance(t.native, ze.Allocation)
        assert t.context is ctx and t.handle("usm_ptr") == t.native.pointer
        a = np.asarray(t)
        a[3, 4] = 0xBEEF
        assert ctypes.c_uint16.from_address(t.pointer + 3 * 64 + 8).value == 0xBEEF
        assert ze.alloc_properties(ctx.native, t.pointer).type == kind
        t.release()
    assert ze.live_allocations() == base


def case_device_usm_is_refused_by_numpy() -> None:
    from interop.info import TensorInfo
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext

    ctx = LevelZeroContext.create()
    base = ze.live_allocations()
    d = ctx.alloc_tensor(TensorInfo((16, 32), np.uint16), "device")
    assert d.usm_type == "device"
    with pytest.raises(InteropError, match=r"USM tensor is not reachable from the CPU: interop\.map") as e:
        np.asarray(d)
    d.release()
    assert ze.live_allocations() == base
    assert type(e.value) is InvalidTensorError


def test_context_needs_a_ze_context() -> None:
    from interop.tensors.level_zero import LevelZeroContext

    with pytest.raises(InvalidTensorError, match="ZeContext"):
        LevelZeroContext(0x1234, 1)


def test_import_as_is_checked() -> None:
    from interop.native.level_zero import ZeContext
    from interop.tensors.level_zero import LevelZeroContext

    ctx = object.__new__(ZeContext)
    with pytest.raises(InvalidTensorError, match="import_as"):
        LevelZeroContext(ctx, 1, import_as="texture")



def case_device_memory_reaches_the_cpu_by_a_counted_copy() -> None:
    """usm_to_cpu copies device USM through the context's memcpy (a synchronous immediate command list)."""
    from interop.info import TensorInfo
    from interop.tensors.level_zero import LevelZeroContext

    ctx = LevelZeroContext.create()
    d = ctx.alloc_tensor(TensorInfo((8, 16), np.uint8), "device")
    from interop.mappers.usm_to_cpu import USMToCPU

    ctypes.memset(d.pointer, 5, 128)  # the fake's device memory is host-visible; a real one's is not
    # The CPU never maps the device allocation's dma-buf export itself (it may not be CPU-mappable on a discrete
    # GPU): no route from it to the CPU goes through a host mapping of that DMA buffer.
    for allow in (False, True):
        try:
            chain = interop.route(d, interop.MemoryType.CPU, allow_copy=allow)
        except interop.CopyRequiredError:
            continue
        assert not {m.name for m in chain.mappers} & {"dma_to_cpu", "dma_to_gst"}, chain
    with pytest.raises(interop.CopyRequiredError):
        USMToCPU().map(d, interop.AccessMode.READ)
    with interop.copy_meter() as m:
        with USMToCPU().map(d, interop.AccessMode.READ_WRITE, allow_copy=True) as c:
            assert (np.asarray(c) == 5).all()
            np.asarray(c)[0, 0] = 9
    assert m.copies == 2 and m.bytes == 256  # read, then write back at release
    assert ctypes.c_uint8.from_address(d.pointer).value == 9


def case_device_memory_exported_as_dma_is_marked_device_local() -> None:
    """USM -> DMA keeps exporting device allocations (USM -> DMA -> NPU / VA-API needs them) but marks the buffer
    device-local: such memory may not be CPU-mappable on a discrete GPU (the fake's is host memory)."""
    from interop.info import TensorInfo
    from interop.mappers.usm_to_dma import USMToDMA
    from interop.tensors.level_zero import LevelZeroContext

    ctx = LevelZeroContext.create()
    for kind in ("device", "host", "shared"):
        t = ctx.alloc_tensor(TensorInfo((8, 16), np.uint8), kind)
        d = USMToDMA().map(t)
        assert d.native.device_local is (kind == "device"), kind
        d.release()
        t.release()


# The rule (interop/mappers/usm_to_dma.py, dma_to_cpu.py): the CPU reaches device USM by usm_to_cpu's counted
# copy, never by an mmap of its dma-buf export (usm_to_dma marks it device_local; dma_to_cpu refuses it).
globals().update(ze_fake.tests_for(globals()))
