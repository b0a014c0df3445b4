"""Views outlive release(): the host mapping (OpenCL map, VA image) is undone only when the last view is gone."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, TensorInfo
from interop.errors import InvalidTensorError
from tests.support.ocl_support import fill_bytes, opencl_context, read_bytes
from tests.support.requirements import need_module


def _ocl_tensor(n: int, value: int):
    """A (n, n) uint8 OpenCL tensor filled with ``value``, its context and buffer; the mapping count before."""
    from interop.tensors.opencl import mapped_count

    cl = need_module("pyopencl")
    ctx = opencl_context()
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, n * n)
    fill_bytes(ctx, buf, 0, n * n, value)
    gc.collect()
    return interop.wrap(buf, info=TensorInfo((n, n), np.uint8)), ctx, buf, mapped_count()


def test_opencl_view_outlives_release_and_unmaps_last():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(32, 7)
    c = interop.map(t, MemoryType.CPU)
    v = c.numpy()
    a = np.asarray(c)
    assert mapped_count() == before + 1
    c.release()
    with pytest.raises(InvalidTensorError):
        c.numpy()
    assert mapped_count() == before + 1  # still mapped: views exist
    assert (v == 7).all() and (a == 7).all()
    del v
    assert mapped_count() == before + 1
    del a
    assert mapped_count() == before  # the last view gone: unmapped


def test_opencl_release_without_views_unmaps_and_writes_back():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(16, 0)
    with interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        c.numpy()[2] = 9
        assert mapped_count() == before + 1
    assert mapped_count() == before
    got = read_bytes(ctx, buf, 0, 256).reshape(16, 16)
    assert (got[2] == 9).all() and got.sum() == 9 * 16


def test_opencl_write_view_kept_past_release_writes_back_when_gone():
    from interop.tensors.opencl import mapped_count

    t, ctx, buf, before = _ocl_tensor(16, 0)
    c = interop.map(t, MemoryType.CPU, mode=AccessMode.READ_WRITE)
    v = c.numpy()
    c.release()
    v[1] = 3
    del v
    assert mapped_count() == before
    assert (read_bytes(ctx, buf, 0, 256).reshape(16, 16)[1] == 3).all()


def test_umat_view_outlives_release():
    from interop.tensors.opencl import mapped_count
    from tests.support.ocl_support import umat_context

    umat_context()
    import cv2

    src = np.arange(64 * 48, dtype=np.uint8).reshape(48, 64)
    u = cv2.UMat(src)
    gc.collect()
    before = mapped_count()
    c = interop.map(interop.wrap(u), MemoryType.CPU)
    v = c.numpy()
    c.release()
    del u
    gc.collect()
    assert mapped_count() == before + 1
    np.testing.assert_array_equal(v, src)
    del v
    assert mapped_count() == before


# ---- VAAPI -> CPU, through the fake VA driver ------------------------------------------------------------------




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
