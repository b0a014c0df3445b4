"""FFMPEG -> NPU through CPU_VA imports of the decoder buffers' pages: what ffmpeg_to_npu asks of the plugin (a strict
double of its remote context, tests/ov_remote_double.py, checking what zero_mem.cpp checks), and, in a child process
with the fake Level Zero driver behind the real loader, that the imported range holds each plane, the "device"
reads the frame's bytes through it, and nothing is copied over a decode loop in which FFmpeg reuses its buffers."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import interop
from interop import MemoryType
from tests import ze_fake
from tests.ffmpeg_clips import make_clip
from tests.ov_remote_double import RemoteContextDouble, as_void_ptr
from tests.support.requirements import need_module

ov = need_module("openvino")
av = need_module("av")


def _frames(w: int = 320, h: int = 240, n: int = 6):  # type: ignore[no-untyped-def]
    path = Path(tempfile.mkdtemp()) / f"c_{w}x{h}.mp4"
    make_clip(path, w, h, n)
    with av.open(str(path)) as c:
        yield from c.decode(video=0)


def _npu(**kw):  # type: ignore[no-untyped-def]
    from interop.tensors.npu import NPUContext

    rc = RemoteContextDouble(**kw)
    return NPUContext(rc), rc


def _check_inside(vf, n) -> None:  # type: ignore[no-untyped-def]
    for p, t in zip(vf.planes, n.tensors):
        imp = t.host_import
        ptr = int(p.buffer_ptr)
        assert t.mem_type == "CPU_VA" and t.native.data.ctypes.data == ptr == t.mem_handle
        assert imp.start % 4096 == 0 and imp.size % 4096 == 0
        assert imp.start <= ptr and ptr + p.line_size * t.info.shape[1] <= imp.end


def test_routes_are_zero_copy() -> None:
    chain = interop.route(MemoryType.FFMPEG, MemoryType.NPU)
    assert chain.zero_copy and [m.name for m in chain.mappers] == ["ffmpeg_to_npu"]
    out = subprocess.run([sys.executable, "-m", "interop", "routes", "ffmpeg", "npu"], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert "ffmpeg_to_npu" in out and "zero-copy" in out and "copy " not in out.replace("zero-copy", "")


def test_decoded_frame_asks_the_plugin_for_cpu_va_page_ranges() -> None:
    ctx, rc = _npu()
    vf = next(_frames(854, 480))
    with interop.copy_meter() as m:
        n = interop.map(vf, ctx)
    assert m.copies == 0 and n.memory_type is MemoryType.NPU and (n.width, n.height) == (854, 480)
    assert rc.calls and all(c[2]["MEM_TYPE"] == "CPU_VA" and c[0] == ov.Type.u8 for c in rc.calls)
    for _, shape, props in rc.calls:
        start = as_void_ptr(props["MEM_HANDLE"])
        assert start % 4096 == 0 and shape[0] % 4096 == 0  # the plugin's page rule, met by construction
    # model shapes come from the frame, never from addresses: (1, rows, pitch, C)
    assert [t.info.shape for t in n] == [(1, 480, vf.planes[0].line_size, 1), (1, 240, vf.planes[1].line_size, 1),
                                         (1, 240, vf.planes[2].line_size, 1)]
    _check_inside(vf, n)
    assert (n[0].native.data[0, :, :854, 0] == vf.planes[0].to_ndarray()[:, :854]).all() if hasattr(
        vf.planes[0], "to_ndarray") else True


def test_import_ends_when_the_npu_frame_goes() -> None:
    """The import holds the frame (FFmpeg cannot reuse the buffer under it) and ends before letting it go."""
    ctx, rc = _npu()
    vf = next(_frames())
    n = interop.map(vf, ctx)
    assert len(rc.imports) >= 1
    del n
    gc.collect()
    assert rc.imports == []


def test_overlapping_pages_are_wrong_memory() -> None:
    ctx, rc = _npu()
    vf = next(_frames())
    n = interop.map(vf, ctx)
    imp = n[0].host_import
    with pytest.raises(interop.WrongMemoryError, match="overlap"):
        ctx.host_imports.acquire(imp.start + 4096 if imp.size > 4096 else imp.start - 4096, imp.end + 4096, object())
    # a range inside a live import reuses it: no second import of the same pages
    assert ctx.host_imports.acquire(imp.start, imp.end, object()) is imp
    del n


def test_driver_without_system_memory_import_falls_back_only_with_allow_copy() -> None:
    """A driver without ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION: the plugin's message, as WrongMemoryError;
    interop.map() then needs allow_copy for the copying route, and counts the copy."""
    from interop.context import set_default_context
    from interop.mappers.ffmpeg_to_npu import FFmpegToNPU

    ctx, rc = _npu(standard_allocation=False)
    vf = next(_frames())
    with pytest.raises(interop.WrongMemoryError, match="not supported with this driver version"):
        FFmpegToNPU(output_context=ctx).map(vf)
    set_default_context(MemoryType.NPU, ctx)
    try:
        with interop.copy_meter() as m:
            n = interop.map(vf, MemoryType.NPU, allow_copy=True)
        assert m.copies >= 1 and n.memory_type is MemoryType.NPU and all(t.mem_type != "CPU_VA" for t in n)
    finally:
        set_default_context(MemoryType.NPU, None)


def test_without_allow_copy_the_copying_route_is_refused() -> None:
    from interop.context import set_default_context

    ctx, rc = _npu(standard_allocation=False)
    set_default_context(MemoryType.NPU, ctx)
    try:
        with pytest.raises(interop.WrongMemoryError, match="allow_copy=True"):
            interop.map(next(_frames()), MemoryType.NPU)
    finally:
        set_default_context(MemoryType.NPU, None)


def test_write_mode_is_refused_on_the_zero_copy_edge() -> None:
    from interop.mappers.ffmpeg_to_npu import FFmpegToNPU

    ctx, _ = _npu()
    with pytest.raises(interop.InvalidTensorError, match="read"):  # refused before anything is imported
        FFmpegToNPU(output_context=ctx).map(next(_frames()), interop.AccessMode.WRITE)


# ---- in the child process: the fake Level Zero driver stands for the NPU driver, its context for the plugin's ----
def _device_read(ctx_handle: int, ptr: int, n: int) -> bytes:
    lib = ctypes.CDLL(str(ze_fake.FAKE_DRIVER))
    lib.fake_ze_device_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.fake_ze_device_read.restype = ctypes.c_uint32
    buf = ctypes.create_string_buffer(n)
    r = lib.fake_ze_device_read(ctx_handle, ptr, n, buf)
    if r != 0:
        raise AssertionError(f"the fake device cannot read {n} bytes at {ptr:#x}: result {r:#x}")
    return buf.raw


def case_decode_loop_zero_copy_device_reads_the_frames() -> None:
    """interop.map(decoded_frame, NPU) over a decode loop long enough that FFmpeg reuses its buffers: every plane
    lies in a live import of the plugin's context, the device reads the frame's bytes through it, nothing is
    copied, and every import has ended afterwards."""
    from interop.context import set_default_context
    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    rc = RemoteContextDouble(ze_context=lz.native)
    npu_ctx = NPUContext(rc)
    set_default_context(MemoryType.NPU, npu_ctx)
    before = ze.live_allocations()
    seen: dict[int, int] = {}
    frames = 0
    with interop.copy_meter() as m:
        for w, h in ((320, 240), (854, 480)):
            for vf in _frames(w, h, 30):
                n = interop.map(vf, MemoryType.NPU)
                _check_inside(vf, n)
                for p, t in zip(vf.planes, n.tensors):
                    ptr = int(p.buffer_ptr)
                    seen[ptr] = seen.get(ptr, 0) + 1
                    props = ze.alloc_properties(lz.native, ptr)
                    assert props.type == "host" and props.id != 0  # what the plugin checks before binding without a copy
                    rows, pitch = t.info.shape[1], p.line_size
                    got = np.frombuffer(_device_read(lz.ze_context, ptr, rows * pitch), np.uint8).reshape(rows, pitch)
                    want = np.frombuffer(p, np.uint8).reshape(rows, pitch)
                    assert (got == want).all()
                # every NPU tensor of this frame goes before the next is mapped (the plane loop's `t` included):
                # FFmpeg's buffers are not page-aligned, so the next frame's pages may touch this frame's import
                del n, t
                assert npu_ctx.host_imports.live() == [], "an import outlived the frame's NPU tensors"
                frames += 1
    assert m.copies == 0 and m.bytes == 0
    assert frames == 60 and max(seen.values()) > 1, "FFmpeg reused no buffer: the loop proves nothing"
    del p, vf
    gc.collect()
    assert rc.imports == [], rc.imports
    assert ze.live_allocations() == before, (ze.live_allocations(), before)
    set_default_context(MemoryType.NPU, None)


def case_two_frames_alive_at_once_never_overlap() -> None:
    """Frames held together (inference in flight) each get their own import or share one; never overlapping ones
    (the fake driver refuses an overlap, so reaching the end shows there was none), or WrongMemoryError."""
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext

    lz = LevelZeroContext.create()
    rc = RemoteContextDouble(ze_context=lz.native)
    ctx = NPUContext(rc)
    held = []
    refused = 0
    for vf in _frames(854, 480, 12):
        try:
            held.append(interop.map(vf, ctx))
        except interop.WrongMemoryError as e:
            assert "overlap" in str(e)
            refused += 1
        held = held[-3:]
    live = sorted((t.start, t.start + t.byte_size) for t in rc.imports)
    assert all(a[1] <= b[0] for a, b in zip(live, live[1:]))
    assert refused < 12


def case_fake_driver_enforces_the_page_and_overlap_rules() -> None:
    import mmap

    from interop.native import level_zero as ze
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create()
    dev = lz.ze_device
    assert ze.external_memory_import_types(dev) & ze.ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION
    mem = mmap.mmap(-1, 4 * 4096)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    with pytest.raises(interop.InvalidTensorError, match="page-aligned"):
        ze.import_system_memory(lz.native, base + 64, 4096)
    # the driver's own refusal, past our check: an unaligned size
    imp = ze.ZeExternalMemoryImportSystemMemory(stype=ze.ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY,
                                                pSystemMemory=base, size=100)
    hd = ze.ZeHostMemAllocDesc(stype=ze.ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, pNext=ctypes.addressof(imp))
    out = ctypes.c_void_p()
    r = ze.loader().zeMemAllocHost(ctypes.c_void_p(lz.ze_context), ctypes.byref(hd), 100, 4096, ctypes.byref(out))
    assert ze.RESULT_NAMES[r] == "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT"
    a = ze.import_system_memory(lz.native, base + 4096, 2 * 4096, keepalive=mem)
    assert a.pointer == base + 4096 and a.system_memory  # in place: the caller's pages
    with pytest.raises(ze.ZeError, match="OVERLAPPING_REGIONS"):
        ze.import_system_memory(lz.native, base, 2 * 4096)
    mem[4096:4100] = b"abcd"
    assert _device_read(lz.ze_context, base + 4096, 4) == b"abcd"
    with pytest.raises(AssertionError):
        _device_read(lz.ze_context, base, 4)  # not imported: the device cannot reach it
    a.release()
    assert mem[4096:4100] == b"abcd"  # zeMemFree ended the import, not the memory
    b = ze.import_system_memory(lz.native, base, 4 * 4096)  # the pages are free to import again
    b.release()


globals().update(ze_fake.tests_for(globals()))
