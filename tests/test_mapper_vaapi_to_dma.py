"""VAAPI -> DMA (vaExportSurfaceHandle, DRM PRIME 2) through the real libva and the fake driver."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.native import libva as va
from interop.tensors.dma import DMATensor, drm_fourcc_of, live_buffers
from interop.tensors.vaapi import VAContext
from tests.support.devices import same_file
from tests.support.va_fake import FakeVA

I915_Y_TILED = (0x01 << 56) | 2


@pytest.mark.parametrize("fmt", [FrameFormat.NV12, FrameFormat.I420, FrameFormat.P010, FrameFormat.BGRX])
def test_every_plane_keeps_its_own_offset_and_pitch(fake_va: FakeVA, va_ctx: VAContext, fmt: FrameFormat) -> None:
    vf = va_ctx.new_frame(fmt, 70, 46)
    info = fake_va.info(vf[0].surface_id)
    with interop.copy_meter() as m:
        df = interop.map(vf, MemoryType.DMA)
    assert m.copies == 0 and df.memory_type is MemoryType.DMA and df.parent is vf
    assert (df.format, df.width, df.height) == (fmt, 70, 46)
    n = len(df)
    assert [t.offset for t in df] == info["offset"][:n]
    assert [t.pitch for t in df] == info["pitch"][:n]
    assert [t.info.shape for t in df] == [t.info.shape for t in vf]
    assert all(t.drm_fourcc == drm_fourcc_of(fmt) and t.size == info["object_size"][0] for t in df)
    # the fds are the DMA frame's own (not the exported ones, closed by the mapper), over the surface's memory
    assert len({t.fd for t in df}) == n
    st = [os.fstat(t.fd) for t in df]
    assert len({(s.st_dev, s.st_ino) for s in st}) == 1
    # native handles: that file is the surface's memfd, the one the driver maps each plane from, at each offset
    for i, t in enumerate(df):
        off, path = same_file(t.fd, fake_va.hooks.fakeva_plane_address(vf[0].surface_id, i))
        assert off == t.offset and "memfd:interopfake-va-surface" in path
    assert fake_va.info(vf[0].surface_id)["syncs"] == 1, "export waits for the surface (vaSyncSurface) first"


def test_writes_through_dma_are_seen_by_the_surface_and_back(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 32)
    sid = vf[0].surface_id
    info = fake_va.info(sid)
    df = interop.map(vf, MemoryType.DMA, mode=AccessMode.READ_WRITE)
    with interop.map(df, MemoryType.CPU, mode=AccessMode.WRITE) as cf:
        np.asarray(cf[0])[3, 5] = 201
        np.asarray(cf[1])[2, 7, 1] = 202
    y = fake_va.plane(sid, 0, info["pitch"][0] * 32)
    uv = fake_va.plane(sid, 1, info["pitch"][1] * 16)
    assert y[3 * info["pitch"][0] + 5] == 201 and uv[2 * info["pitch"][1] + 7 * 2 + 1] == 202
    y[10 * info["pitch"][0] + 1] = 77  # the driver side writes; the DMA side reads
    with interop.map(df, MemoryType.CPU) as cf:
        assert np.asarray(cf[0])[10, 1] == 77 and not np.asarray(cf[0]).flags.writeable
    assert fake_va.info(sid)["export_flags"] == va.VA_EXPORT_SURFACE_READ_WRITE | va.VA_EXPORT_SURFACE_COMPOSED_LAYERS


def test_export_flags_follow_the_access_mode(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 32, 32)
    for mode, flag in ((AccessMode.READ, va.VA_EXPORT_SURFACE_READ_ONLY), (AccessMode.WRITE, va.VA_EXPORT_SURFACE_WRITE_ONLY)):
        interop.map(vf, MemoryType.DMA, mode=mode).release()
        assert fake_va.info(vf[0].surface_id)["export_flags"] == flag | va.VA_EXPORT_SURFACE_COMPOSED_LAYERS


def test_64bit_modifier_is_carried_whole(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 64, modifiers=[I915_Y_TILED])
    df = interop.map(vf, MemoryType.DMA)
    assert [t.drm_modifier for t in df] == [I915_Y_TILED, I915_Y_TILED]
    assert df[0].handle("drm_modifier") == I915_Y_TILED > 1 << 32


def test_fds_are_owned_by_the_dma_frame(fake_va: FakeVA, va_ctx: VAContext) -> None:
    gc.collect()
    before_fds = len(os.listdir("/proc/self/fd"))
    before = live_buffers()
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 64)
    df = interop.map(vf, MemoryType.DMA)
    assert live_buffers() == before + 2
    df.release()
    assert live_buffers() == before
    vf.release()
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before_fds, "no exported fd may leak"


def test_crop_moves_the_offsets(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    info = fake_va.info(vf[0].surface_id)
    p = info["pitch"]
    df = interop.map(vf.crop(8, 4, 32, 20), MemoryType.DMA)
    assert [t.offset for t in df] == [info["offset"][0] + 4 * p[0] + 8, info["offset"][1] + 2 * p[1] + 4 * 2]
    assert [t.info.shape for t in df] == [(20, 32), (10, 16, 2)]
    fake_va.plane(vf[0].surface_id, 0, p[0] * 48)[5 * p[0] + 9] = 42
    with interop.map(df, MemoryType.CPU) as cf:
        assert np.asarray(cf[0])[1, 1] == 42


def test_single_plane_tensor(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    t = interop.map(vf[1], MemoryType.DMA)
    assert isinstance(t, DMATensor) and t.offset == fake_va.info(vf[0].surface_id)["offset"][1]


def test_route_is_zero_copy() -> None:
    chain = interop.route(MemoryType.VAAPI, MemoryType.DMA)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["vaapi_to_dma"]
