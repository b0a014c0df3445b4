"""CUDA: plane bounds checked per plane (frame_from_tensor, _view), and copies counted per real transfer (CPU fakes)."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType, TensorInfo
from interop.errors import CopyRequiredError, InvalidTensorError
from interop.mappers import cpu_to_cuda
from interop.mappers.cuda_to_cpu import CUDAToCPU
from interop.tensors.cuda import CUDATensor, frame_from_tensor
from tests.support.cuda_fakes import FakeDevice
from tests.test_mapper_cpu_to_cuda import fake

# ---- bounds ------------------------------------------------------------------------------------------------


def test_last_plane_past_the_buffer_is_refused():
    t = CUDATensor(None, TensorInfo((8, 100), np.uint8), ptr=0x10000)
    # NV12 100x6 needs 6 + 3 = 9 rows: the UV plane would end a row past the 8-row buffer
    with pytest.raises(InvalidTensorError, match="needs"):
        frame_from_tensor(t, FrameFormat.NV12, width=100, height=6)


def test_exact_and_pitched_buffers_still_split():
    t = CUDATensor(None, TensorInfo((9, 100), np.uint8), ptr=0x10000)
    f = frame_from_tensor(t, FrameFormat.NV12, width=100, height=6)
    assert [p.ptr - 0x10000 for p in f] == [0, 600] and f[1].shape == (3, 50, 2)
    # a pitched (H*3/2, W) view: the last row ends short of a full pitch, which is fine
    p = CUDATensor(None, TensorInfo((9, 100), np.uint8, (128, 1)), ptr=0x20000)
    g = frame_from_tensor(p, FrameFormat.NV12)
    assert [q.ptr - 0x20000 for q in g] == [0, 6 * 128] and g[1].strides == (128, 2, 1)


def test_view_bounds_are_checked():
    t = CUDATensor(None, TensorInfo((8, 100), np.uint8), ptr=0x10000)
    assert t._view(100, TensorInfo((7, 100), np.uint8)).ptr == 0x10000 + 100
    with pytest.raises(InvalidTensorError):
        t._view(101, TensorInfo((7, 100), np.uint8))
    with pytest.raises(InvalidTensorError):
        t._view(-1, TensorInfo((1, 10), np.uint8))
    t.release()
    with pytest.raises(InvalidTensorError, match="released"):
        t._view(0, TensorInfo((1, 10), np.uint8))


# ---- copy accounting ----------------------------------------------------------------------------------------


# the CPU stand-ins of tests/test_mapper_cpu_to_cuda.py: a fake driver, host arrays posing as device arrays
driver = fake


@pytest.mark.parametrize("mode, copies", [(AccessMode.READ, 1), (AccessMode.WRITE, 1), (AccessMode.READ_WRITE, 2)])
def test_cuda_to_cpu_counts_each_transfer(driver, mode, copies):
    dev = np.arange(32, dtype=np.int16).reshape(4, 8)
    t = interop.wrap(FakeDevice(dev, stream=None))
    with interop.copy_meter() as m:
        c = interop.map(t, MemoryType.CPU, mode=mode, allow_copy=True)
        if mode.writes:
            np.asarray(c)[0, 0] = 99
        c.release()
    assert m.copies == copies and m.bytes == copies * dev.nbytes
    assert {r.mapper for r in m.records} == {"cuda_to_cpu"}
    if mode.writes:
        assert dev[0, 0] == 99


def test_cuda_to_cpu_write_is_refused_without_allow_copy(driver):
    t = interop.wrap(FakeDevice(np.zeros((4, 8), np.uint8), stream=None))
    with interop.copy_meter() as m, pytest.raises(CopyRequiredError):
        CUDAToCPU().map(t, AccessMode.WRITE)
    assert m.copies == 0


def test_cuda_to_cpu_write_back_counted_when_it_happens(driver):
    dev = np.zeros((4, 8), np.uint8)
    c = interop.map(interop.wrap(FakeDevice(dev, stream=None)), MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)
    with interop.copy_meter() as m:
        c.release()
    assert (m.copies, m.bytes) == (1, dev.nbytes)


@pytest.mark.parametrize("mode, copies", [(AccessMode.READ, 1), (AccessMode.WRITE, 1), (AccessMode.READ_WRITE, 2)])
def test_cpu_to_cuda_counts_each_transfer(driver, mode, copies):
    host = np.arange(15, dtype=np.float32).reshape(3, 5)
    with interop.copy_meter() as m:
        t = cpu_to_cuda.CPUToCUDA().map(interop.wrap(host), mode, allow_copy=True)
        t.release()
    assert m.copies == copies and m.bytes == copies * host.nbytes
    assert {r.mapper for r in m.records} == {"cpu_to_cuda"}


def test_cpu_to_cuda_write_is_refused_without_allow_copy(driver):
    with interop.copy_meter() as m, pytest.raises(CopyRequiredError):
        cpu_to_cuda.CPUToCUDA().map(interop.wrap(np.zeros(4, np.uint8)), AccessMode.WRITE)
    assert m.copies == 0
