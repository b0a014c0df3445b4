"""VA-API on real hardware (tier C): runs by itself where a render node with a working VA driver exists.

Frames are uploaded into VA surfaces (cpu_to_vaapi: a counted copy; no VA-enabled FFmpeg decoder is used), then
exported to DMA, imported back, mapped to the CPU and, where OpenVINO sees a GPU, shared with it; every path is
compared with the source pixels.
"""

from __future__ import annotations

import ctypes.util
import glob
import os

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.native import libva as va
from tests.support.requirements import need_module

pytestmark = pytest.mark.hardware("vaapi")
W, H = 352, 288


def _va_missing() -> str | None:
    """What this machine lacks for VA-API (render node, libva, a VA driver library), or None."""
    if not glob.glob("/dev/dri/renderD*"):
        return "needs a DRM render node (/dev/dri/renderD*): none on this machine"
    if not ctypes.util.find_library("va") or not ctypes.util.find_library("va-drm"):
        return "needs libva (libva2, libva-drm2): not installed"
    dirs = os.environ.get("LIBVA_DRIVERS_PATH", "").split(":") + [
        "/usr/lib/x86_64-linux-gnu/dri", "/usr/lib64/dri", "/usr/lib/dri", "/usr/local/lib/dri",
        "/usr/local/lib/x86_64-linux-gnu/dri"]
    if not any(glob.glob(os.path.join(d, "*_drv_video.so")) for d in dirs if d):
        return f"needs a VA driver library (*_drv_video.so, e.g. intel-media-va-driver): none in {' '.join(d for d in dirs if d)}"
    return None


@pytest.fixture(scope="module")
def hw_ctx():  # type: ignore[no-untyped-def]
    from interop.context import set_default_context
    from interop.tensors.vaapi import _default_context

    for k in ("LIBVA_DRIVER_NAME", "LIBVA_DRIVERS_PATH"):
        assert os.environ.get(k) != "interopfake", "the fake driver must not stand in for the hardware"
    why = _va_missing()
    if why:
        pytest.skip(why)
    ctx = _default_context()  # node, libva and a driver are here: an error now is a failure, not a skip
    set_default_context(MemoryType.VAAPI, ctx)
    yield ctx
    set_default_context(MemoryType.VAAPI, None)


@pytest.fixture
def source() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.integers(16, 235, (H * 3 // 2, W), np.uint8)


def _upload(source: np.ndarray):  # type: ignore[no-untyped-def]
    cf = interop.wrap(source, format=FrameFormat.NV12)
    with interop.copy_meter() as m:
        vf = interop.map(cf, MemoryType.VAAPI, allow_copy=True)
    assert m.copies == 1 and m.bytes == source.nbytes
    return vf


def test_upload_then_map_to_cpu(hw_ctx, source) -> None:  # type: ignore[no-untyped-def]
    vf = _upload(source)
    with interop.copy_meter() as m, interop.map(vf, MemoryType.CPU) as cf:
        assert np.array_equal(np.asarray(cf[0]), source[:H])
        assert np.array_equal(np.asarray(cf[1]).reshape(H // 2, W), source[H:])
    assert m.copies == 0


def test_export_to_dma_and_compare(hw_ctx, source) -> None:  # type: ignore[no-untyped-def]
    vf = _upload(source)
    df = interop.map(vf, MemoryType.DMA)
    assert all(t.is_dmabuf for t in df), "a real driver exports real dma-bufs"
    assert df[1].offset >= df[0].pitch * H and all(t.pitch >= W for t in df)
    if df[0].drm_modifier not in (va.DRM_FORMAT_MOD_LINEAR, va.DRM_FORMAT_MOD_INVALID):
        pytest.skip(f"the driver exported a tiled surface (modifier {df[0].drm_modifier:#018x}); the CPU cannot read "
                    f"its rows through the dma-buf (the VA->CPU test covers the pixels)")
    with interop.map(df, MemoryType.CPU) as cf:
        assert np.array_equal(np.asarray(cf[0]), source[:H])
        assert np.array_equal(np.asarray(cf[1]).reshape(H // 2, W), source[H:])


def test_export_import_roundtrip(hw_ctx, source) -> None:  # type: ignore[no-untyped-def]
    vf = _upload(source)
    df = interop.map(vf, MemoryType.DMA)
    again = interop.map(df, MemoryType.VAAPI)
    assert again[0].surface_id != vf[0].surface_id
    with interop.map(again, MemoryType.CPU) as cf:
        assert np.array_equal(np.asarray(cf[0]), source[:H])


def test_openvino_gpu_sees_the_surface(hw_ctx, source) -> None:  # type: ignore[no-untyped-def]
    ov = need_module("openvino")
    from interop.tensors.openvino import OpenVINOContext, get_core

    if not any(d.startswith("GPU") for d in get_core().available_devices):
        pytest.skip("needs an Intel GPU visible to OpenVINO")
    vf = _upload(source)
    of = interop.map(vf, OpenVINOContext("GPU"))
    assert [list(t.native.get_shape()) for t in of] == [[1, H, W, 1], [1, H // 2, W // 2, 2]]
    host = ov.Tensor(ov.Type.u8, ov.Shape([1, H, W, 1]))
    of[0].native.copy_to(host)
    assert np.array_equal(host.data[0, :, :, 0], source[:H])
