"""GST -> VAAPI: a memory:VAMemory buffer made by GStreamer's own VA allocator (libgstva-1.0) on the fake VA driver's
display (wrapped with gst_va_display_wrapped_new) maps to a VA frame over the very surface GStreamer allocated:
same surface id, same display, pixels shared both ways, nothing copied; system memory and foreign displays refused."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import ContextMismatchError, UnsupportedFormatError, WrongMemoryError
from interop.mappers.gst_to_vaapi import GstToVAAPI
from interop.native import gst as ng
from interop.tensors.gst import GstTensor, caps_for, gst, wrap_buffer
from interop.tensors.vaapi import VAContext
from tests.support.va_fake import FakeVA

Gst = gst()
W, H = 64, 48


def va_buffer(ctx: VAContext, fmt: FrameFormat = FrameFormat.NV12) -> tuple[object, object]:
    """A Gst.Buffer of one GstVaMemory (a new surface on ``ctx``'s display, made by GStreamer) and its caps."""
    caps = Gst.Caps.from_string(caps_for(fmt, W, H).to_string().replace("video/x-raw", "video/x-raw(memory:VAMemory)"))
    disp = ng.va_display_wrapped(ctx.handle)
    alloc = ng.va_allocator(disp, ng.pointer_of(caps, "Gst.Caps"))
    buf = Gst.Buffer.new()
    ng.va_setup_buffer(alloc, ng.pointer_of(buf, "Gst.Buffer"))
    g = ng.libs()[0]
    g.gst_object_unref(alloc)  # the memory holds the allocator, the allocator the display
    g.gst_object_unref(disp)
    return buf, caps


def test_the_va_frame_is_gstreamers_surface(fake_va: FakeVA, va_ctx: VAContext) -> None:
    buf, caps = va_buffer(va_ctx)
    f = wrap_buffer(buf, caps)
    assert isinstance(f[0], GstTensor)
    sid, dpy = ng.va_surface_of(f[0].memory_ptr)
    assert dpy == va_ctx.handle and fake_va.info(sid)["width"] == W
    with interop.copy_meter() as m:
        vf = interop.map(f, MemoryType.VAAPI)
    assert m.copies == 0 and vf.memory_type is MemoryType.VAAPI and vf.context == va_ctx and vf.parent is f
    assert [t.surface_id for t in vf] == [sid, sid] and vf.format is FrameFormat.NV12 and (vf.width, vf.height) == (W, H)
    assert vf[0].handle("va_surface_id") == sid


def test_pixels_are_shared_both_ways(fake_va: FakeVA, va_ctx: VAContext) -> None:
    buf, caps = va_buffer(va_ctx)
    vf = interop.map(wrap_buffer(buf, caps), MemoryType.VAAPI, mode=AccessMode.WRITE)
    sid = vf[0].surface_id
    with interop.map(vf, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        np.asarray(c[0])[5, 7] = 123
    # the fake driver's own memory of GStreamer's surface holds the write
    addr = fake_va.hooks.fakeva_plane_address(sid, 0)
    pitch = fake_va.info(sid)["pitch"][0]
    import ctypes

    assert ctypes.c_uint8.from_address(addr + 5 * pitch + 7).value == 123
    ctypes.c_uint8.from_address(addr + 2 * pitch + 3).value = 77
    with interop.map(interop.map(wrap_buffer(buf, caps), MemoryType.VAAPI), MemoryType.CPU) as c:
        assert np.asarray(c[0])[2, 3] == 77 and np.asarray(c[0])[5, 7] == 123


def test_the_surface_outlives_the_buffer_ref_and_stays_gstreamers(fake_va: FakeVA, va_ctx: VAContext) -> None:
    buf, caps = va_buffer(va_ctx)
    vf = interop.map(wrap_buffer(buf, caps), MemoryType.VAAPI)
    del buf
    gc.collect()
    with interop.map(vf, MemoryType.CPU) as c:  # the VA frame holds the GST frame, so the surface is alive
        assert np.asarray(c[0]).shape == (H, W)
    del c
    buf, caps = va_buffer(va_ctx)
    vf = interop.map(wrap_buffer(buf, caps), MemoryType.VAAPI)
    sid = vf[0].surface_id
    vf.release()
    del vf
    gc.collect()
    assert fake_va.info(sid)["width"] == W  # interop's release leaves GStreamer's surface alone
    del buf
    gc.collect()
    with pytest.raises(AssertionError, match="no fake surface"):  # GStreamer freed it with its buffer
        fake_va.info(sid)


def test_system_memory_is_wrong_memory_and_routes_elsewhere(fake_va: FakeVA, va_ctx: VAContext) -> None:
    buf = Gst.Buffer.new_allocate(None, W * H * 3 // 2, None)
    f = wrap_buffer(buf, caps_for(FrameFormat.NV12, W, H))
    with pytest.raises(WrongMemoryError, match="not VA memory"):
        GstToVAAPI().map(f, AccessMode.READ)
    from interop.routing import route_object

    chain = route_object(f, MemoryType.VAAPI, allow_copy=True)
    assert "gst_to_vaapi" not in [m.name for m in chain.mappers]


def test_a_surface_of_another_display_is_refused(fake_va: FakeVA, va_ctx: VAContext) -> None:
    other = VAContext(fake_va.open())
    try:
        buf, caps = va_buffer(other)
        with pytest.raises(ContextMismatchError, match="VADisplay"):
            GstToVAAPI(output_context=va_ctx).map(wrap_buffer(buf, caps), AccessMode.READ)
    finally:
        del buf
        gc.collect()
        other.close()


def test_shared_buffer_is_refused_for_write(fake_va: FakeVA, va_ctx: VAContext) -> None:
    from interop.tensors.gst import NotWritableError

    buf, caps = va_buffer(va_ctx)
    keep = buf.copy()  # a second buffer shares the memory
    with pytest.raises(NotWritableError):
        GstToVAAPI().map(wrap_buffer(buf, caps), AccessMode.WRITE)
    del keep


def test_va_memory_is_refused_by_the_cpu_path_not_downloaded(fake_va: FakeVA, va_ctx: VAContext) -> None:
    buf, caps = va_buffer(va_ctx)
    sample = Gst.Sample.new(buf, caps, None, None)
    for _ in range(2):  # the second map would take the one-step path
        with pytest.raises(UnsupportedFormatError, match="VAMemory"):
            interop.map(sample, MemoryType.CPU)
    sid, _ = ng.va_surface_of(ng.peek_memory(ng.pointer_of(buf, "Gst.Buffer"), 0))
    assert fake_va.info(sid)["images"] == 0  # no image derived: nothing was mapped or downloaded


def test_gst_to_vaapi_is_never_a_later_step() -> None:
    # no mapper makes VA memory in GST (cpu_to_gst: system memory, dma_to_gst: fd memory): routes never plan through
    # gst_to_vaapi after another step, and its cost for an input of unknown kind refuses
    from interop.routing import all_paths

    assert GstToVAAPI.first_only
    with pytest.raises(WrongMemoryError, match="VA memory"):
        GstToVAAPI().cost(None, AccessMode.READ)
    edges = tuple(interop.mapper.registered().values())
    for src in MemoryType:
        if src is not MemoryType.VAAPI:
            for path in all_paths(edges, src, MemoryType.VAAPI):
                assert GstToVAAPI not in path[1:], (src, [c.name for c in path])
    assert "gst_to_vaapi" not in [m.name for m in interop.route(MemoryType.CPU, MemoryType.VAAPI, allow_copy=True).mappers]
