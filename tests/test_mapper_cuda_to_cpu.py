"""CUDA -> CPU: counted copies through reused pinned blocks; pitch dropped, elements kept; write-back on release.

CPU-side tests run the real mapper over host memory posing as device memory and a driver whose 2-D copies are
memmoves (tests/cuda_fakes.py); the gpu tests use torch on the device.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import CopyRequiredError, InvalidTensorError
from interop.mappers.cuda_to_cpu import CUDAToCPU
from interop.tensors import cuda as cu
from tests.support.cuda_fakes import FakeDevice, fake_driver_installed
from tests.support.requirements import need_module


@pytest.fixture
def driver(monkeypatch):
    with fake_driver_installed(monkeypatch) as d:
        yield d


def test_copy_is_refused_without_allow_copy():
    t = interop.wrap(FakeDevice(np.zeros((4, 4), np.uint8)))
    with pytest.raises(CopyRequiredError) as e:
        interop.map(t, MemoryType.CPU)
    assert e.value.step.__name__ == "CUDAToCPU"


def test_pitched_plane_is_downloaded_tight_and_counted(driver):
    wide = np.arange(8 * 32, dtype=np.uint8).reshape(8, 32)
    t = interop.wrap(FakeDevice(wide[:, :20], stream=0x42))
    with interop.copy_meter() as m:
        c = interop.map(t, MemoryType.CPU, allow_copy=True)
    a = np.asarray(c)
    assert np.array_equal(a, wide[:, :20]) and a.strides == (20, 1) and not a.flags.writeable
    assert m.copies == 1 and m.bytes == 8 * 20 and m.records[0].mapper == "cuda_to_cpu"
    assert ("order", 0, 0x42, 1) in driver.calls  # the copy's stream waits for the producer
    assert c.parent is t


def test_pinned_blocks_are_reused(driver):
    src = interop.wrap(FakeDevice(np.ones((64, 64), np.float32), stream=None))
    for _ in range(10):
        c = interop.map(src, MemoryType.CPU, allow_copy=True)
        assert float(np.asarray(c).sum()) == 64 * 64
        del c
        gc.collect()
    assert driver.count("host_alloc") == 1 and cu.pinned_pool(0).allocated == 1


def test_a_view_keeps_its_pinned_block(driver):
    src = interop.wrap(FakeDevice(np.full((16, 16), 3, np.uint8), stream=None))
    view = np.asarray(interop.map(src, MemoryType.CPU, allow_copy=True))
    gc.collect()
    other = np.asarray(interop.map(src, MemoryType.CPU, allow_copy=True))
    assert view.ctypes.data != other.ctypes.data and int(view.sum()) == 3 * 256


def test_nv12_frame_one_wait_for_all_planes(driver):
    pitch, w, h = 64, 48, 32
    buf = np.random.default_rng(1).integers(0, 255, (h * 3 // 2, pitch), dtype=np.uint8)
    f = interop.wrap(FakeDevice(buf[:, :w], stream=None), format=FrameFormat.NV12)
    with interop.copy_meter() as m:
        c = interop.map(f, MemoryType.CPU, allow_copy=True)
    assert c.format is FrameFormat.NV12 and c.memory_type is MemoryType.CPU
    assert np.array_equal(np.asarray(c[0]), buf[:h, :w])
    assert np.array_equal(np.asarray(c[1]).reshape(h // 2, w), buf[h:, :w])
    assert m.bytes == w * h * 3 // 2 and m.copies == 2
    syncs = [call[-1] for call in driver.calls if call[0] == "copy2d"]
    assert syncs == [False, True]


def test_write_mode_writes_back_at_release(driver):
    dev = np.zeros((4, 8), np.int16)
    t = interop.wrap(FakeDevice(dev, stream=None))
    with interop.copy_meter() as m:
        c = interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE, allow_copy=True)
        np.asarray(c)[1, 2] = 77
        assert dev[1, 2] == 0
        c.release()  # the write-back is the second copy, counted when it happens
    assert dev[1, 2] == 77 and m.copies == 2 and m.bytes == 2 * dev.nbytes


def test_write_mode_refused_on_readonly(driver):
    t = interop.wrap(FakeDevice(np.zeros(4, np.uint8), readonly=True))
    with pytest.raises(InvalidTensorError, match="read-only"):
        interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)


def test_non_row_layout_is_refused(driver):
    a = np.zeros((6, 4), np.uint8).T  # column-major
    with pytest.raises(InvalidTensorError, match="contiguous"):
        interop.map(interop.wrap(FakeDevice(a)), MemoryType.CPU, allow_copy=True)


@pytest.mark.gpu
def test_torch_tensor_downloads_with_pitch():
    torch = need_module("torch", "cuda")
    x = torch.randint(0, 255, (120, 300), dtype=torch.uint8, device="cuda")[:, 17:217]
    with interop.copy_meter() as m:
        c = interop.map(x, MemoryType.CPU, allow_copy=True)
    assert np.array_equal(np.asarray(c), x.cpu().numpy()) and m.bytes == 120 * 200
    y = torch.zeros(10, 10, device="cuda")
    w = interop.map(y, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)
    np.asarray(w)[:] = 5
    w.release()
    assert float(y.sum()) == 500


@pytest.mark.gpu
def test_nvdec_frame_downloads_like_cpu_decode(tmp_path):
    need_module("av")
    import av

    from tests.support.gpu_clips import make_clip, nvdec

    clip = make_clip(tmp_path / "c.mp4", frames=3)
    with av.open(str(clip)) as c:
        ref = next(c.decode(video=0)).to_ndarray(format="nv12")
    with nvdec(clip) as c:
        vf = next(c.decode(video=0))
        f = interop.map(interop.map(vf, MemoryType.CUDA), MemoryType.CPU, allow_copy=True)
        h = vf.height
        assert np.array_equal(np.asarray(f[0]), ref[:h])
        assert np.array_equal(np.asarray(f[1]).reshape(h // 2, -1), ref[h:])


# ---- copy accounting: one count per real transfer (CPU fakes) ---------------------------------------------


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
