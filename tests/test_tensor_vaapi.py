"""VA tensors and frames (interop.tensors.vaapi) over the fake VA driver loaded by the real libva."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.errors import (
    BackendUnavailableError,
    InteropError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from interop.tensors.vaapi import VAContext, VASurface, VATensor, format_of_va_fourcc, va_fourcc_of
from tests.support.devices import hardware_devices
from tests.support.va_fake import FakeVA


def test_new_frame_planes_handles_and_shapes(fake_va: FakeVA, va_ctx: VAContext) -> None:
    f = va_ctx.new_frame(FrameFormat.NV12, 90, 60)
    assert f.memory_type is MemoryType.VAAPI and f.context == va_ctx and len(f) == 2
    assert [t.info.shape for t in f] == [(60, 90), (30, 45, 2)]
    y, uv = f.tensors
    assert isinstance(y, VATensor) and y.surface is uv.surface is f.native
    sid = y.surface_id
    assert isinstance(sid, int) and fake_va.info(sid)["width"] == 90
    assert y.handle("va_surface_id") == sid and uv.handle("va_surface_id") == sid
    assert y.handle("va_display") == va_ctx.display.handle == y.display
    assert (y.handle("plane_index"), uv.handle("plane_index")) == (0, 1)
    with pytest.raises(InteropError, match="not reachable from the CPU"):
        np.asarray(y)
    f.release()
    assert fake_va.live()[0] == 0, "releasing every plane destroys the surface"


def test_surface_lives_while_any_plane_does(fake_va: FakeVA, va_ctx: VAContext) -> None:
    f = va_ctx.new_frame(FrameFormat.I420, 64, 64)
    y = f[0]
    f[1].release()
    f[2].release()
    assert fake_va.live()[0] == 1
    y.release()
    assert fake_va.live()[0] == 0
    with pytest.raises(InvalidTensorError):
        _ = y.surface_id


def test_garbage_collection_destroys_the_surface(fake_va: FakeVA, va_ctx: VAContext) -> None:
    f = va_ctx.new_frame(FrameFormat.BGRX, 32, 16)
    assert fake_va.live()[0] == 1
    del f
    gc.collect()
    assert fake_va.live()[0] == 0


def test_foreign_surfaces_are_not_destroyed_unless_owned(fake_va: FakeVA, va_ctx: VAContext) -> None:
    sid = va_ctx.display.create_surfaces(64, 64)[0]
    f = va_ctx.frame_from_surface(sid, FrameFormat.NV12, 64, 64)
    f.release()
    assert fake_va.live()[0] == 1
    g = va_ctx.frame_from_surface(sid, FrameFormat.NV12, 64, 64, own=True)
    g.release()
    assert fake_va.live()[0] == 0


def test_crop_keeps_the_origin(fake_va: FakeVA, va_ctx: VAContext) -> None:
    f = va_ctx.new_frame(FrameFormat.NV12, 64, 48)
    c = f.crop(8, 4, 32, 20)
    assert [t.info.shape for t in c] == [(20, 32), (10, 16, 2)]
    assert (c[0].x, c[0].y, c[1].x, c[1].y) == (8, 4, 4, 2)
    assert c[0].origin_bytes(128) == 4 * 128 + 8 and c[1].origin_bytes(128) == 2 * 128 + 4 * 2
    cc = c.crop(2, 2, 4, 4)
    assert (cc[0].x, cc[0].y, cc[1].x, cc[1].y) == (10, 6, 5, 3)


def test_contexts_compare_by_display(fake_va: FakeVA, va_ctx: VAContext) -> None:
    same = VAContext(va_ctx.display)
    other = VAContext(fake_va.open())
    assert same == va_ctx and hash(same) == hash(va_ctx) and other != va_ctx
    assert interop.Context.default(MemoryType.VAAPI) is va_ctx
    other.close()


def test_vacontext_refuses_what_is_not_a_display(fake_va: FakeVA) -> None:
    with pytest.raises(InteropError, match="VAContext takes an interop.native.libva.Display, not str") as e:
        VAContext("not a display")  # type: ignore[arg-type]
    assert type(e.value) is UnsupportedTypeError


def test_format_table() -> None:
    for fmt in (FrameFormat.NV12, FrameFormat.I420, FrameFormat.P010, FrameFormat.BGRX, FrameFormat.RGBA):
        assert format_of_va_fourcc(va_fourcc_of(fmt)) is fmt
    with pytest.raises(UnsupportedFormatError):
        va_fourcc_of(FrameFormat.RGB)


def test_default_context_names_the_missing_render_node() -> None:
    if hardware_devices()["vaapi"]:
        pytest.skip("this machine has a render node")
    from interop.tensors.vaapi import _default_context

    with pytest.raises(BackendUnavailableError, match="render node"):
        _default_context()


def test_doctor_row() -> None:
    from interop.tensors.vaapi import _probe

    (row,) = _probe()
    assert row.name == "VA-API" and row.tier == "C"
    if not hardware_devices()["vaapi"]:
        assert not row.available and row.reason


def test_vasurface_needs_a_vacontext(va_ctx: VAContext) -> None:
    with pytest.raises(InteropError, match="a VASurface belongs to a VAContext, not object") as e:
        VASurface(object(), 1, FrameFormat.NV12, 2, 2)  # type: ignore[arg-type]
    assert type(e.value) is UnsupportedTypeError


def test_import_interop_does_not_load_libva() -> None:
    import subprocess
    import sys

    code = ("import interop, interop.backends as b; b.load_all(); interop.route(interop.MemoryType.VAAPI, "
            "interop.MemoryType.DMA); print(any('libva' in line for line in open('/proc/self/maps')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
