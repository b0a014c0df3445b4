"""VAAPI -> CPU (vaSyncSurface, vaDeriveImage, vaMapBuffer) through the real libva and the fake driver."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InvalidTensorError
from interop.tensors.vaapi import VAContext
from tests.support.va_fake import FakeVA

W, H = 70, 46


@pytest.mark.parametrize("fmt", [FrameFormat.NV12, FrameFormat.I420, FrameFormat.P010, FrameFormat.RGBA])
def test_views_are_the_surface_memory(fake_va: FakeVA, va_ctx: VAContext, fmt: FrameFormat) -> None:
    vf = va_ctx.new_frame(fmt, W, H)
    sid = vf[0].surface_id
    info = fake_va.info(sid)
    with interop.copy_meter() as m:
        cf = interop.map(vf, MemoryType.CPU)
    assert m.copies == 0 and cf.memory_type is MemoryType.CPU and cf.parent is vf
    for i, t in enumerate(cf):
        a = np.asarray(t)
        # same pointer as the driver's own mapping of the plane, and the driver's pitch
        assert a.__array_interface__["data"][0] == fake_va.hooks.fakeva_plane_address(sid, i)
        assert a.strides[0] == info["pitch"][i] and a.shape == vf[i].info.shape
        assert not a.flags.writeable, "READ gives read-only views"
    assert fake_va.info(sid)["syncs"] == 1 and fake_va.info(sid)["images"] == 1
    cf.release()
    assert fake_va.info(sid)["images"] == 1, "a live numpy view keeps the derived image mapped"
    del a, t
    assert fake_va.info(sid)["images"] == 0, "the last view gone, the image is unmapped and destroyed"


def test_write_mode_writes_the_surface(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, W, H)
    sid = vf[0].surface_id
    p = fake_va.info(sid)["pitch"]
    with interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE) as cf:
        np.asarray(cf[0])[:] = 16
        np.asarray(cf[1])[4, 5] = (100, 200)
    y = fake_va.plane(sid, 0, p[0] * H)
    uv = fake_va.plane(sid, 1, p[1] * (H // 2))
    assert y[0] == 16 and y[(H - 1) * p[0] + W - 1] == 16 and y[W] == 0, "rows written, padding untouched"
    assert (uv[4 * p[1] + 10], uv[4 * p[1] + 11]) == (100, 200)


def test_crop(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    sid = vf[0].surface_id
    p = fake_va.info(sid)["pitch"]
    fake_va.plane(sid, 0, p[0] * 48)[6 * p[0] + 10] = 33
    with interop.map(vf.crop(8, 4, 16, 16), MemoryType.CPU) as cf:
        assert np.asarray(cf[0]).shape == (16, 16) and np.asarray(cf[0])[2, 2] == 33


def test_surface_outlives_views_and_mappings(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    cf = interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE)
    view = np.asarray(cf[0])
    vf.release()
    cf.release()
    assert fake_va.live()[0] == 1, "a numpy view keeps the surface"
    view[0, 0] = 1  # still the surface's memory
    del cf, view
    gc.collect()
    assert fake_va.live() == (0, 0, 0)


def test_surface_release_closes_an_open_mapping_first(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    cf = interop.map(vf, MemoryType.CPU)
    vf.native.release()  # the strict fake refuses to destroy a surface with an image: the image must go first
    assert fake_va.live() == (0, 0, 0)
    del cf
    gc.collect()


def test_single_plane(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.I420, 64, 48)
    t = interop.map(vf[2], MemoryType.CPU)
    assert np.asarray(t).shape == (24, 32)
    assert np.asarray(t).__array_interface__["data"][0] == fake_va.hooks.fakeva_plane_address(vf[0].surface_id, 2)


def test_route_is_zero_copy() -> None:
    chain = interop.route(MemoryType.VAAPI, MemoryType.CPU)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["vaapi_to_cpu"]


# ---- views outlive release(): the VA image is undone only when the last view is gone -----------------------


def test_vaapi_views_outlive_release_and_unmap_last(fake_va, va_ctx) -> None:
    from interop import FrameFormat

    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    sid = vf[0].surface_id
    p = fake_va.info(sid)["pitch"]
    fake_va.plane(sid, 0, p[0] * 48)[3 * p[0] + 5] = 77
    cf = interop.map(vf, MemoryType.CPU)
    y = cf[0].numpy()
    uv = np.asarray(cf[1])
    cf.release()
    with pytest.raises(InvalidTensorError):
        cf[0].numpy()
    assert fake_va.info(sid)["images"] == 1, "views still point into the mapping: not unmapped yet"
    assert y[3, 5] == 77 and y.__array_interface__["data"][0] == fake_va.hooks.fakeva_plane_address(sid, 0)
    del y
    assert fake_va.info(sid)["images"] == 1
    assert uv.shape == (24, 32, 2)
    del uv
    assert fake_va.info(sid)["images"] == 0, "the last view gone: unmapped and destroyed"


def test_vaapi_release_without_views_unmaps_at_once(fake_va, va_ctx) -> None:
    from interop import FrameFormat

    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    sid = vf[0].surface_id
    with interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE) as cf:
        np.asarray(cf[0])[:] = 5
        assert fake_va.info(sid)["images"] == 1
    assert fake_va.info(sid)["images"] == 0
    cf = interop.map(vf, MemoryType.CPU)
    cf[0].release()
    assert fake_va.info(sid)["images"] == 1, "one plane still mapped"
    cf[1].release()
    assert fake_va.info(sid)["images"] == 0


def test_vaapi_surface_destroy_still_closes_a_mapping_with_views(fake_va, va_ctx) -> None:
    from interop import FrameFormat

    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    cf = interop.map(vf, MemoryType.CPU)
    v = cf[0].numpy()
    cf.release()
    vf.native.release()  # the strict fake refuses to destroy a surface with an image: the image goes first
    assert fake_va.live() == (0, 0, 0)
    del v
    gc.collect()
    assert fake_va.live() == (0, 0, 0)
