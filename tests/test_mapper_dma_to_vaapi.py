"""DMA -> VAAPI (DRM PRIME 2 import) through the real libva and the fake driver."""

from __future__ import annotations

import gc
import mmap
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError
from interop.native import libva as va
from interop.tensors.dma import DMAContext, frame_from_fds
from interop.tensors.vaapi import VAContext, VATensor
from tests.support.devices import same_file
from tests.support.va_fake import FakeVA

I915_Y_TILED = (0x01 << 56) | 2
W, H = 64, 48


def _memfd(size: int) -> int:
    fd = os.memfd_create("interop-test")
    os.ftruncate(fd, size)
    return fd


def test_each_plane_keeps_its_own_offset_and_pitch(fake_va: FakeVA, va_ctx: VAContext) -> None:
    # Y pitch 96 at 0, UV pitch 128 at 10000: not at pitch*height, and not tensor 0's offset (DL Streamer's bug)
    fd = _memfd(20000)
    try:
        df = frame_from_fds(fd, FrameFormat.NV12, W, H, offsets=[0, 10000], pitches=[96, 128])
    finally:
        os.close(fd)
    with interop.copy_meter() as m:
        vf = interop.map(df, MemoryType.VAAPI)
    assert m.copies == 0 and vf.memory_type is MemoryType.VAAPI and vf.context == va_ctx and vf.parent is df
    assert isinstance(vf[0], VATensor) and [t.info.shape for t in vf] == [(H, W), (H // 2, W // 2, 2)]
    info = fake_va.info(vf[0].surface_id)
    assert info["mem_type"] == va.VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2 and info["num_objects"] == 1
    assert info["offset"][:2] == [0, 10000] and info["pitch"][:2] == [96, 128]
    assert info["object_size"][0] == 20000
    # native handles: the driver's planes map df's own fd (same inode) at df's plane offsets
    for i, t in enumerate(df):
        assert same_file(t.fd, fake_va.hooks.fakeva_plane_address(vf[0].surface_id, i))[0] == t.offset


def test_memory_is_shared_both_ways(fake_va: FakeVA, va_ctx: VAContext) -> None:
    df = DMAContext().alloc_frame(FrameFormat.NV12, W, H)
    vf = interop.map(df, MemoryType.VAAPI, mode=AccessMode.READ_WRITE)
    sid = vf[0].surface_id
    for i, t in enumerate(df):  # the surface is df's memory: the driver maps df's fd at df's offsets
        assert same_file(t.fd, fake_va.hooks.fakeva_plane_address(sid, i))[0] == t.offset
    with interop.map(df, MemoryType.CPU, mode=AccessMode.WRITE) as cf:
        np.asarray(cf[1])[5, 6] = (11, 12)  # written through the DMA mapping
    with interop.map(vf, MemoryType.CPU) as vc:  # read through the VA driver's derived image
        assert tuple(np.asarray(vc[1])[5, 6]) == (11, 12)
    with interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE) as vc:
        np.asarray(vc[0])[7, 8] = 99
    with interop.map(df, MemoryType.CPU) as cf:
        assert np.asarray(cf[0])[7, 8] == 99
    # and the driver's own view of the plane is the DMA buffer's bytes at the DMA plane's offset
    p = fake_va.info(sid)["pitch"][0]
    assert fake_va.plane(sid, 0, p * H)[7 * p + 8] == 99


def test_planes_in_separate_buffers_become_separate_objects(fake_va: FakeVA, va_ctx: VAContext) -> None:
    y, uv = _memfd(W * H), _memfd(4096 + W * H // 2)
    try:
        with mmap.mmap(uv, 4096 + W * H // 2) as m:
            m[4096 + 3 * W + 4] = 55
        df = frame_from_fds([y, uv], FrameFormat.NV12, W, H, offsets=[0, 4096], pitches=[W, W],
                            drm_modifier=va.DRM_FORMAT_MOD_LINEAR)
    finally:
        os.close(y)
        os.close(uv)
    vf = interop.map(df, MemoryType.VAAPI)
    info = fake_va.info(vf[0].surface_id)
    assert info["num_objects"] == 2 and info["plane_object"][:2] == [0, 1] and info["offset"][:2] == [0, 4096]
    assert fake_va.plane(vf[0].surface_id, 1, 3 * W + 5)[3 * W + 4] == 55


def test_64bit_modifier_reaches_the_driver_and_comes_back(fake_va: FakeVA, va_ctx: VAContext) -> None:
    fd = _memfd(W * H * 2)
    try:
        df = frame_from_fds(fd, FrameFormat.NV12, W, H, drm_modifier=I915_Y_TILED)
    finally:
        os.close(fd)
    vf = interop.map(df, MemoryType.VAAPI)
    assert fake_va.info(vf[0].surface_id)["modifier"][0] == I915_Y_TILED
    back = interop.map(vf, MemoryType.DMA)
    assert [t.drm_modifier for t in back] == [I915_Y_TILED] * 2


def test_release_destroys_the_imported_surface_not_the_memory(fake_va: FakeVA, va_ctx: VAContext) -> None:
    df = DMAContext().alloc_frame(FrameFormat.I420, W, H)
    vf = interop.map(df, MemoryType.VAAPI)
    assert fake_va.live()[0] == 1
    vf.release()
    assert fake_va.live()[0] == 0
    with interop.map(df, MemoryType.CPU) as cf:  # the DMA frame is untouched
        assert np.asarray(cf[0]).shape == (H, W)


def test_explicit_output_context(fake_va: FakeVA, va_ctx: VAContext) -> None:
    other = VAContext(fake_va.open())
    df = DMAContext().alloc_frame(FrameFormat.NV12, W, H)
    vf = interop.map(df, other)
    assert vf.context == other and vf[0].display == other.display.handle
    vf.release()
    gc.collect()
    other.close()


def test_refusals(fake_va: FakeVA, va_ctx: VAContext) -> None:
    df = DMAContext().alloc_frame(FrameFormat.NV12, W, H)
    with pytest.raises(UnsupportedTypeError, match="frames"):
        interop.map(df[0], MemoryType.VAAPI)
    rgb = DMAContext().alloc_frame(FrameFormat.RGB, W, H)
    with pytest.raises(UnsupportedFormatError, match="VA surfaces cannot hold RGB") as e:
        interop.map(rgb, MemoryType.VAAPI)
    assert type(e.value) is UnsupportedFormatError
    fd = _memfd(W * H * 2)
    try:
        a = frame_from_fds(fd, FrameFormat.NV12, W, H, drm_modifier=I915_Y_TILED)
        b = frame_from_fds(fd, FrameFormat.NV12, W, H, drm_modifier=0)
    finally:
        os.close(fd)
    mixed = interop.Frame([a[0], b[1]], FrameFormat.NV12, W, H)
    with pytest.raises(InvalidTensorError, match="different DRM modifiers"):
        interop.map(mixed, MemoryType.VAAPI)
    assert fake_va.live()[0] == 0


def test_route_is_zero_copy() -> None:
    chain = interop.route(MemoryType.DMA, MemoryType.VAAPI)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["dma_to_vaapi"]


def test_legacy_prime_import_where_the_driver_has_no_prime2(fake_va: FakeVA, va_ctx: VAContext,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fd = _memfd(20000)
    try:
        df = frame_from_fds(fd, FrameFormat.NV12, W, H, offsets=[0, 10000], pitches=[96, 128])
        tiled = frame_from_fds(fd, FrameFormat.NV12, W, H, drm_modifier=I915_Y_TILED)
    finally:
        os.close(fd)
    monkeypatch.setenv("INTEROPFAKE_VA_NO_PRIME2_IMPORT", "1")
    vf = interop.map(df, MemoryType.VAAPI)
    info = fake_va.info(vf[0].surface_id)
    assert info["mem_type"] == va.VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME
    assert info["offset"][:2] == [0, 10000] and info["pitch"][:2] == [96, 128]
    with pytest.raises(va.VAError) as e:  # a tiled buffer cannot go through the legacy path: no modifier there
        interop.map(tiled, MemoryType.VAAPI)
    assert e.value.status == va.VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE


# ---- read-only planes: refused for WRITE / READ_WRITE (the fake driver maps the fd read-write, so it cannot
# import a read-only fd at all and the READ case is not tested here) ------------------------------------------

RO_W, RO_H = 64, 48


def _nv12_frame(read_only: bool):
    fd = os.memfd_create("interop-test")
    os.ftruncate(fd, RO_W * RO_H * 3 // 2)
    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY if read_only else os.O_RDWR)
    try:
        return frame_from_fds(ro, FrameFormat.NV12, RO_W, RO_H)
    finally:
        os.close(ro)
        os.close(fd)


@pytest.mark.parametrize("mode", [AccessMode.WRITE, AccessMode.READ_WRITE])
def test_write_over_read_only_planes_is_refused(fake_va, va_ctx, mode) -> None:
    df = _nv12_frame(read_only=True)
    assert not any(t.writable for t in df)
    before = fake_va.live()
    with pytest.raises(InvalidTensorError, match="AccessMode.READ"):
        interop.map(df, MemoryType.VAAPI, mode=mode)
    assert fake_va.live() == before, "no surface was imported"


def test_writable_planes_give_a_frame_writable_as_the_mode_says(fake_va, va_ctx) -> None:
    df = _nv12_frame(read_only=False)
    for mode in (AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE):
        vf = interop.map(df, MemoryType.VAAPI, mode=mode)
        # a READ mapping is read-only on every route (DESIGN, AccessMode); a writing one is writable
        assert [t.writable for t in vf] == [mode.writes] * len(vf.tensors), mode
        vf.release()
