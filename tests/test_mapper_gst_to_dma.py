"""GST -> DMA: fd-backed GstMemory (memfd here) becomes DMA planes over a dup of its fd (same file, another fd
number), plane offsets kept (the memory's own offset included), write-through both ways, system memory refused
(WrongMemoryError, routed elsewhere), shared buffers refused for WRITE, no fd leak."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import WrongMemoryError
from interop.mappers.gst_to_dma import GstToDMA
from interop.native import gst as ng
from interop.tensors.dma import DMATensor
from interop.tensors.gst import NotWritableError, caps_for, gst, wrap_buffer

Gst = gst()


def fd_buffer(fmt: FrameFormat = FrameFormat.NV12, w: int = 64, h: int = 48, lead: int = 0) -> tuple[object, object, int]:
    """A Gst.Buffer of one GstFdMemory over a memfd (``lead`` bytes skipped at its start), its caps, and the memfd."""
    caps = caps_for(fmt, w, h)
    vi = ng.video_info(ng.pointer_of(caps, "Gst.Caps"))
    assert vi is not None
    fd = os.memfd_create("gst-test")
    os.ftruncate(fd, vi.size + lead)
    buf = Gst.Buffer.new()
    ng.append_fd_memory(ng.pointer_of(buf, "Gst.Buffer"), os.dup(fd), vi.size + lead, None, False)
    if lead:
        buf.resize(lead, vi.size)  # the memory is now a region of the fd starting at `lead`
    return buf, caps, fd


def same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def test_planes_are_dups_of_the_memorys_fd_at_their_offsets():
    buf, caps, fd = fd_buffer(lead=4096)
    gfd = ng.fd_of_memory(ng.peek_memory(ng.pointer_of(buf, "Gst.Buffer"), 0))
    with interop.copy_meter() as meter:
        d = interop.map(wrap_buffer(buf, caps), MemoryType.DMA)
    assert meter.copies == 0
    assert all(isinstance(t, DMATensor) for t in d.tensors) and d.memory_type is MemoryType.DMA
    assert d[0].fd != gfd and same_file(d[0].fd, gfd) and same_file(d[0].fd, fd)
    assert d[0].buffer is d[1].buffer  # one dup per memory
    assert (d[0].offset, d[1].offset) == (4096, 4096 + 64 * 48)
    assert d[0].pitch == 64 and d[1].pitch == 64
    os.close(fd)


def test_write_through_both_ways():
    buf, caps, fd = fd_buffer(lead=4096)
    f = wrap_buffer(buf, caps)
    d = interop.map(f, MemoryType.DMA, mode=AccessMode.WRITE)
    with interop.map(d, MemoryType.CPU, mode=AccessMode.WRITE) as c:  # DMA side -> GStreamer
        np.asarray(c[0])[2, 3] = 123
        np.asarray(c[1])[1, 2, 1] = 45
    del c
    assert buf.extract_dup(2 * 64 + 3, 1) == bytes([123])
    assert buf.extract_dup(64 * 48 + 64 + 2 * 2 + 1, 1) == bytes([45])
    assert os.pread(fd, 1, 4096 + 2 * 64 + 3) == bytes([123])  # the file itself, at the memory's offset
    d.release()
    del d
    gc.collect()
    buf.fill(5, bytes([77]))  # GStreamer -> DMA side
    with interop.map(interop.map(f, MemoryType.DMA), MemoryType.CPU) as r:
        assert np.asarray(r[0])[0, 5] == 77
    os.close(fd)


def test_system_memory_is_wrong_memory_and_routing_goes_through_cpu():
    buf = Gst.Buffer.new_allocate(None, 64 * 48 * 3 // 2, None)
    f = wrap_buffer(buf, caps_for(FrameFormat.NV12, 64, 48))
    with pytest.raises(WrongMemoryError, match="no fd"):
        GstToDMA().map(f, AccessMode.READ)
    with interop.copy_meter() as meter:
        c = interop.map(f, MemoryType.CPU)
    assert meter.copies == 0 and np.asarray(c[0]).shape == (48, 64)


def test_routing_by_the_input_never_tries_gst_to_dma_for_system_memory():
    # routed by the object, a chain through GST -> DMA is no route for system memory: map() would try it first and
    # fall back on every frame (a failed map per frame) otherwise
    from interop.routing import route_object

    buf = Gst.Buffer.new_allocate(None, 64 * 48 * 3 // 2, None)
    f = wrap_buffer(buf, caps_for(FrameFormat.NV12, 64, 48))
    with pytest.raises(WrongMemoryError, match="no fd"):
        GstToDMA().cost(f, AccessMode.READ)
    for dst in (MemoryType.DMA, MemoryType.OPENVINO, MemoryType.CPU):
        try:
            chain = route_object(f, dst, allow_copy=True)
        except interop.NoRouteError:
            continue
        assert "gst_to_dma" not in [m.name for m in chain.mappers], (dst, chain)
    fdbuf, caps, fd = fd_buffer()
    assert [m.name for m in route_object(wrap_buffer(fdbuf, caps), MemoryType.DMA).mappers] == ["gst_to_dma"]
    os.close(fd)


def test_write_of_a_shared_fd_buffer_is_refused():
    buf, caps, fd = fd_buffer()
    other = Gst.Buffer.new()
    other.append_memory(buf.peek_memory(0))
    with pytest.raises(NotWritableError):
        interop.map(wrap_buffer(buf, caps), MemoryType.DMA, mode=AccessMode.WRITE)
    os.close(fd)


def test_no_fd_leak():
    gc.collect()
    start = len(os.listdir("/proc/self/fd"))
    for _ in range(200):
        buf, caps, fd = fd_buffer()
        with interop.map(wrap_buffer(buf, caps), MemoryType.DMA) as d:
            assert d[0].fd >= 0
        os.close(fd)
        del buf, d
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= start + 2


def test_gst_to_dma_is_never_a_later_step():
    # the GST memory another mapper makes is system memory (cpu_to_gst) or comes from DMA already (dma_to_gst), so
    # routes never plan through gst_to_dma after another step: by type, by object, and its unknown-input cost refuses
    from interop.routing import all_paths

    assert GstToDMA.first_only
    with pytest.raises(WrongMemoryError, match="fd-backed"):
        GstToDMA().cost(None, AccessMode.READ)
    edges = tuple(interop.mapper.registered().values())
    for src in MemoryType:
        for dst in MemoryType:
            if src is not dst:
                for path in all_paths(edges, src, dst):
                    assert GstToDMA not in path[1:], (src, dst, [c.name for c in path])
    a = np.zeros((48, 64), np.uint8)
    for obj in (interop.wrap(a), interop.wrap(a, format=FrameFormat.GRAY8)):
        for dst in MemoryType:
            try:
                chain = interop.route(obj, dst, allow_copy=True)
            except (interop.NoRouteError, interop.BackendUnavailableError):  # no route, or a step not here
                continue
            assert "gst_to_dma" not in [m.name for m in chain.mappers], (dst, chain)
