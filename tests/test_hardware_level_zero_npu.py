"""Tier C: the real Level Zero driver and the real NPU. Collected everywhere, run by themselves where the device
exists (conftest skips naming the missing device). Frames are written by the CPU into DMA buffers (an upload:
a counted copy in the producer, not in the route) and then go DMA -> NPU / USM without a copy."""

from __future__ import annotations

import ctypes.util
import glob
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests import ze_fake
from tests.support.requirements import need_module

_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")


def _lib_present(*names: str) -> bool:
    """Whether one of these shared libraries (file names such as libze_intel_gpu.so.1) is installed."""
    return any(glob.glob(os.path.join(d, n)) for d in _LIB_DIRS for n in names) or any(
        ctypes.util.find_library(n[3:].split(".so")[0]) for n in names)


def _lz(**kw):  # type: ignore[no-untyped-def]
    """A real LevelZeroContext. Skips only when the loader or every driver library is absent (naming it); with
    both installed an error from LevelZeroContext.create() fails the test."""
    from interop.tensors.level_zero import LevelZeroContext

    if not os.environ.get("INTEROP_ZE_LOADER") and not _lib_present("libze_loader.so.1"):
        pytest.skip("needs the Level Zero loader (libze_loader.so.1, Debian package libze1): not installed")
    if not os.environ.get("ZE_ENABLE_ALT_DRIVERS") and not _lib_present("libze_intel_gpu.so*", "libze_intel_vpu.so*",
                                                                         "libze_intel_npu.so*"):
        pytest.skip("needs a Level Zero driver library (libze_intel_gpu.so.1 / libze_intel_vpu.so.1): none installed")
    return LevelZeroContext.create(**kw)


def _dma_frame(w: int = 320, h: int = 240):  # type: ignore[no-untyped-def]
    from interop.tensors.dma import DMAContext

    ctx = DMAContext()
    if not ctx.is_dmabuf:
        pytest.skip("needs a dma-buf heap (/dev/dma_heap/system) or /dev/udmabuf: a device cannot import a memfd")
    f = ctx.alloc_frame(FrameFormat.NV12, w, h)
    rng = np.random.default_rng(1)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        for p in c:
            a = np.asarray(p)
            a[:] = rng.integers(0, 256, a.shape, dtype=np.uint8)
    return f


@pytest.mark.hardware("level_zero")
def test_real_driver_export_import_round_trip() -> None:
    from interop.native import level_zero as ze

    a = _lz(import_as="host")
    b = _lz(import_as="host")
    t = a.alloc_tensor(interop.TensorInfo((64, 64), np.uint8), "host")
    np.asarray(t)[:] = 123
    rw = interop.AccessMode.READ_WRITE  # the write below goes through the mapping: READ mappings are read-only
    back = interop.map(interop.map(t, MemoryType.DMA, mode=rw), b, mode=rw)
    assert ze.alloc_properties(b.native, back.pointer).type == "host"
    assert (np.asarray(back) == 123).all()
    np.asarray(back)[0, 0] = 7
    assert np.asarray(t)[0, 0] == 7


@pytest.mark.hardware("level_zero")
def test_real_driver_imports_a_dma_frame() -> None:
    f = _dma_frame()
    u = interop.map(f, _lz(import_as="host"))
    with interop.map(f, MemoryType.CPU) as c:
        for a, b in zip(c, u):
            assert np.array_equal(np.asarray(a), np.asarray(b))


def _model(h: int, pitch: int):  # type: ignore[no-untyped-def]
    import openvino as ov
    import openvino.opset13 as ops

    y = ops.parameter([1, h, pitch, 1], ov.Type.u8, name="y")
    uv = ops.parameter([1, h // 2, pitch // 2, 2], ov.Type.u8, name="uv")
    ym = ops.reduce_mean(ops.convert(y, ov.Type.f32), [2, 3], keep_dims=False)  # per-row means
    uvm = ops.reduce_mean(ops.convert(uv, ov.Type.f32), [2, 3], keep_dims=False)
    return ov.Model([ops.concat([ym, uvm], 1)], [y, uv])


@pytest.mark.hardware("npu")
def test_npu_infers_on_the_frame_memory_like_the_cpu() -> None:
    import openvino as ov

    from interop.tensors.npu import NPUContext
    from interop.tensors.openvino import get_core

    if not glob.glob("/dev/accel/accel*"):
        pytest.skip("needs an Intel NPU (/dev/accel/accel*): none on this machine")
    if not _lib_present("libze_intel_vpu.so*", "libze_intel_npu.so*"):
        pytest.skip("needs the NPU's Level Zero driver (libze_intel_vpu.so.1, intel-driver-compiler-npu/linux-npu-driver): not installed")
    import openvino

    if not glob.glob(os.path.join(os.path.dirname(openvino.__file__), "libs", "libopenvino_intel_npu_plugin.so*")):
        pytest.skip("needs OpenVINO's NPU plugin (libopenvino_intel_npu_plugin.so): not in this openvino")
    f = _dma_frame()
    core = get_core()
    pitch = f[0].pitch
    model = _model(f.height, pitch)
    npu_ctx = NPUContext.create(core)  # node, driver and plugin are here: an error is a failure
    with interop.copy_meter() as m:
        n = interop.map(f, npu_ctx)
    assert m.copies == 0
    req = core.compile_model(model, "NPU").create_infer_request()
    req.set_tensor("y", n[0].native)  # the way Inference feeds NPU planes
    req.set_tensor("uv", n[1].native)
    req.infer()
    got = req.get_output_tensor(0).data.copy()
    cpu = core.compile_model(model, "CPU").create_infer_request()
    with interop.map(f, MemoryType.CPU) as c:  # the reference reads the same bytes at full pitch
        for name, p in zip(("y", "uv"), c):
            a = np.asarray(p)
            rows = np.lib.stride_tricks.as_strided(a, (a.shape[0], pitch), (pitch, 1))
            cpu.set_tensor(name, ov.Tensor(np.ascontiguousarray(rows).reshape(req.get_tensor(name).shape)))
        cpu.infer()
    want = cpu.get_output_tensor(0).data
    assert np.allclose(got, want, atol=0.5), float(np.abs(got - want).max())
    assert isinstance(n[0].native, (ov.RemoteTensor, ov.Tensor))


def _need_npu() -> None:
    if not glob.glob("/dev/accel/accel*"):
        pytest.skip("needs an Intel NPU (/dev/accel/accel*): none on this machine")
    if not _lib_present("libze_intel_vpu.so*", "libze_intel_npu.so*"):
        pytest.skip("needs the NPU's Level Zero driver (libze_intel_vpu.so.1, intel-driver-compiler-npu/linux-npu-driver): not installed")
    import openvino

    if not glob.glob(os.path.join(os.path.dirname(openvino.__file__), "libs", "libopenvino_intel_npu_plugin.so*")):
        pytest.skip("needs OpenVINO's NPU plugin (libopenvino_intel_npu_plugin.so): not in this openvino")


@pytest.mark.hardware("npu")
def test_npu_infers_on_ffmpeg_frames_in_place_like_the_cpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Decoded FFmpeg frames -> CPU_VA imports -> NPU inference equals the CPU's on the same bytes; zero-copy shown by
    address (each plane's ov.Tensor is the plane's own memory, inside an import of the plugin's context)."""
    av = need_module("av")
    _need_npu()
    from interop.native import level_zero as ze
    from interop.tensors.npu import NPUContext
    from interop.tensors.openvino import get_core
    from tests.ffmpeg_clips import make_clip

    clip = make_clip(tmp_path / "c.mp4", 320, 240, 20)
    core = get_core()
    npu_ctx = NPUContext.create(core)
    with av.open(str(clip)) as c:
        frames = c.decode(video=0)
        first = next(frames)
        pitch = first.planes[0].line_size
        import openvino as ov
        import openvino.opset13 as ops

        y = ops.parameter([1, 240, pitch, 1], ov.Type.u8, name="y")
        model = ov.Model([ops.reduce_mean(ops.convert(y, ov.Type.f32), [2, 3], keep_dims=False)], [y])
        req = core.compile_model(model, "NPU").create_infer_request()
        cpu = core.compile_model(model, "CPU").create_infer_request()
        zctx = ze.ZeContext.borrow(npu_ctx.ze_context)
        with interop.copy_meter() as m:
            for vf in [first, *frames]:
                n = interop.map(vf, npu_ctx)
                ptr = int(vf.planes[0].buffer_ptr)
                assert n[0].native.data.ctypes.data == ptr and ze.alloc_properties(zctx, ptr).id != 0
                req.set_tensor("y", n[0].native)
                req.infer()
                rows = np.frombuffer(vf.planes[0], np.uint8).reshape(1, 240, pitch, 1)
                cpu.set_tensor("y", ov.Tensor(np.ascontiguousarray(rows)))
                cpu.infer()
                assert np.allclose(req.get_output_tensor(0).data, cpu.get_output_tensor(0).data, atol=0.5)
                del n
        assert m.copies == 0


def case_level_zero_hardware_test_code_runs_on_the_fake() -> None:
    """The hardware test's own code, run against the fake driver (so it is known to work before a device runs it)."""
    test_real_driver_export_import_round_trip()


globals().update(ze_fake.tests_for(globals()))
