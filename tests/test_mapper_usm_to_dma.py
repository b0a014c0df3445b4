"""USM (Level Zero) -> DMA (export as a DMA-BUF fd), through the real loader and the fake driver; and the
refusal of USM that belongs to a SYCL/OpenCL context."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.info import TensorInfo, plane_infos
from tests import ze_fake
from tests.support.devices import same_file
from tests.support.requirements import need_module


def case_export_tensor_is_zero_copy() -> None:
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create()
    u = lz.alloc_tensor(TensorInfo((32, 48), np.uint8), "shared")
    np.asarray(u)[:] = 5
    with interop.copy_meter() as m:
        d = interop.map(u, MemoryType.DMA, mode=AccessMode.READ_WRITE)  # a READ mapping is read-only
    assert m.copies == 0
    assert d.memory_type is MemoryType.DMA and d.parent is u and d.offset == 0 and d.size == 32 * 48
    assert d.info == u.info
    # native handles: the exported fd is the very file the USM pointer maps (same inode), at the tensor's offset
    off, path = same_file(d.fd, u.pointer)
    assert off == d.offset == 0 and "fake-ze-alloc" in path
    # the fd is the allocation: an mmap of it sees the USM writes and the reverse
    mm = mmap.mmap(d.fd, d.size)
    assert mm[:4] == bytes([5] * 4)
    mm[100] = 77
    assert np.asarray(u).reshape(-1)[100] == 77
    mm.close()
    with interop.map(d, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c)[1, 1] = 9
    assert np.asarray(u)[1, 1] == 9
    fd = d.fd
    d.release()
    with pytest.raises(OSError):
        os.fstat(fd)  # the exported fd belonged to the DMA tensor, which closed it
    assert ze.alloc_properties(lz.native, u.pointer).type == "shared"  # the USM memory is still there


def case_frame_planes_share_one_fd_with_their_offsets() -> None:
    from interop.frame import Frame
    from interop.tensors.level_zero import LevelZeroContext, usm_tensor

    lz = LevelZeroContext.create()
    infos = plane_infos(FrameFormat.NV12, 64, 32, [64, 64])
    alloc = lz.allocate(64 * 48, "device")
    y = usm_tensor(alloc, infos[0], context=lz, offset=0, release=lambda: None)
    uv = usm_tensor(alloc, infos[1], context=lz, offset=64 * 32, release=lambda: None)
    f = Frame([y, uv], FrameFormat.NV12, 64, 32, context=lz)
    d = interop.map(f, MemoryType.DMA)
    assert d[0].buffer is d[1].buffer and [t.offset for t in d] == [0, 2048]
    for t, plane in zip(d, (y, uv)):  # each plane's pointer maps the shared fd at that plane's offset
        assert same_file(t.fd, plane.pointer)[0] == t.offset
    assert [t.pitch for t in d] == [64, 64]


def case_round_trip_export_then_import() -> None:
    """USM -> DMA -> USM into a second Level Zero context: one memory seen from both contexts."""
    from interop.tensors.level_zero import LevelZeroContext

    a, b = LevelZeroContext.create(), LevelZeroContext.create(import_as="host")
    u = a.alloc_tensor(TensorInfo((10, 10), np.float32), "shared")
    np.asarray(u)[:] = 1.5
    rw = AccessMode.READ_WRITE  # a READ mapping is read-only, at every step
    back = interop.map(interop.map(u, MemoryType.DMA, mode=rw), b, mode=rw)
    assert back.context is b and back.pointer != u.pointer
    assert (np.asarray(back) == 1.5).all()
    np.asarray(back)[2, 3] = -4.0
    assert np.asarray(u)[2, 3] == -4.0


def test_sycl_usm_is_not_handed_to_level_zero() -> None:
    """A USM pointer from a SYCL/OpenCL context is refused before any Level Zero call: WrongMemoryError (a
    ContextMismatchError), so interop.map() takes another route (through the CPU: a copy)."""
    need_module("dpctl")
    from interop.errors import ContextMismatchError
    from interop.tensors.usm import allocate

    t = allocate(TensorInfo((4, 4), np.uint8), "shared")
    from interop.errors import CopyRequiredError, WrongMemoryError
    from interop.mappers.usm_to_dma import USMToDMA

    with pytest.raises(WrongMemoryError, match="Level Zero") as e:
        USMToDMA().map(t)
    assert isinstance(e.value, ContextMismatchError)
    with pytest.raises(CopyRequiredError) as ce:
        interop.map(t, MemoryType.DMA)
    assert ce.value.step.name != "usm_to_dma"


globals().update(ze_fake.tests_for(globals()))
