"""CPU -> CUDA: counted copies through a reused pinned staging block into a new device array.

CPU-side tests pose host memory as device memory (the allocation and the driver are stand-ins); gpu tests use
torch or CuPy on the device.
"""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import CopyRequiredError
from interop.mappers import cpu_to_cuda
from interop.tensors import cuda as cu
from interop.tensors.cuda import CUDAContext, CUDATensor
from tests.support.cuda_fakes import fake_driver_installed
from tests.support.requirements import need_module


@pytest.fixture
def fake(monkeypatch):
    made: list[np.ndarray] = []

    def device_empty(shape, dtype, device):
        a = np.full(shape, 0xAB, dtype=dtype) if np.dtype(dtype).kind != "f" else np.full(shape, np.nan, dtype)
        made.append(a)
        return a, a.ctypes.data

    monkeypatch.setattr(cu, "device_empty", device_empty)
    monkeypatch.setattr(cpu_to_cuda.CPUToCUDA, "missing", classmethod(lambda cls: None))
    with fake_driver_installed(monkeypatch) as d:
        yield d, made


def up(x, mode=AccessMode.READ, ctx=None):
    """The mapper itself (routing may prefer CPU -> FFMPEG -> CUDA for images: see docs/cuda.md)."""
    return cpu_to_cuda.CPUToCUDA(None, ctx).map(interop.wrap(x) if isinstance(x, np.ndarray) else x, mode,
                                                allow_copy=True)


def test_copy_is_refused_without_allow_copy(fake):
    with pytest.raises(CopyRequiredError, match="allow_copy"):
        cpu_to_cuda.CPUToCUDA().map(interop.wrap(np.zeros(4, np.uint8)))


def test_strided_host_array_uploads_and_counts(fake):
    d, made = fake
    src = np.arange(10 * 16, dtype=np.uint16).reshape(10, 16)[:, 3:11]
    with interop.copy_meter() as m:
        t = up(src)
    assert isinstance(t, CUDATensor) and t.native is made[0] and t.ptr == made[0].ctypes.data
    assert np.array_equal(made[0], src) and t.strides == (16, 2) and t.stream is None
    assert m.copies == 1 and m.bytes == src.nbytes and m.records[0].mapper == "cpu_to_cuda"
    assert t.context == CUDAContext.get(0)


def test_staging_block_is_reused(fake):
    d, _ = fake
    for i in range(8):
        up(np.full((32, 32), i, np.uint8))
    assert d.count("host_alloc") == 1


def test_nv12_frame_and_output_context(fake):
    d, made = fake
    from interop.tensors.cpu import frame_from_array

    buf = np.random.default_rng(0).integers(0, 255, (48, 32), dtype=np.uint8)
    f = frame_from_array(buf, FrameFormat.NV12)
    ctx = CUDAContext.get(0, 0x900)
    out = up(f, ctx=ctx)
    assert out.format is FrameFormat.NV12 and out.context == ctx and out[1].shape == (16, 16, 2)
    assert np.array_equal(made[0], buf[:32]) and np.array_equal(made[1].reshape(16, 32), buf[32:])
    assert all(c[2] == 0x900 for c in d.calls if c[0] == "copy2d")


def test_write_mode_copies_back_at_release(fake):
    d, made = fake
    host = np.zeros((3, 5), np.float32)
    t = up(host, AccessMode.WRITE)
    made[0][:] = 9.0  # "a kernel" writes the device array
    t.release()
    assert float(host.sum()) == 9.0 * 15


@pytest.mark.gpu
def test_upload_to_torch_or_cupy_and_back():
    need_module("torch", "cuda")
    import torch

    src = np.random.default_rng(2).integers(0, 255, (270, 481, 3), dtype=np.uint8)[:, :480]
    with interop.copy_meter() as m:
        t = up(src)
    x = torch.from_dlpack(t)
    assert x.is_cuda and x.data_ptr() == t.ptr and np.array_equal(x.cpu().numpy(), src)
    back = interop.map(t, MemoryType.CPU, allow_copy=True)
    assert np.array_equal(np.asarray(back), src) and m.bytes == src.nbytes


# ---- copy accounting: one count per real transfer ----------------------------------------------------------


@pytest.mark.parametrize("mode, copies", [(AccessMode.READ, 1), (AccessMode.WRITE, 1), (AccessMode.READ_WRITE, 2)])
def test_cpu_to_cuda_counts_each_transfer(fake, mode, copies):
    host = np.arange(15, dtype=np.float32).reshape(3, 5)
    with interop.copy_meter() as m:
        t = cpu_to_cuda.CPUToCUDA().map(interop.wrap(host), mode, allow_copy=True)
        t.release()
    assert m.copies == copies and m.bytes == copies * host.nbytes
    assert {r.mapper for r in m.records} == {"cpu_to_cuda"}


def test_cpu_to_cuda_write_is_refused_without_allow_copy(fake):
    with interop.copy_meter() as m, pytest.raises(CopyRequiredError):
        cpu_to_cuda.CPUToCUDA().map(interop.wrap(np.zeros(4, np.uint8)), AccessMode.WRITE)
    assert m.copies == 0
