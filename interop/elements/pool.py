"""GstFramePool: a GStreamer buffer pool whose buffers are an interop ``FramePool``'s memfd/dma-buf buffers.

Offered in the ALLOCATION query at an appsink (``offer(sink)``), it lets the element upstream (videotestsrc,
videoconvert, a decoder) write each picture straight into a ``FramePool`` buffer: the sample the appsink delivers
*is* a pool frame, and ``claim(sample)`` gives that frame (a DMA Frame, ready for ``FrameSender.send``) with no copy.

Each ``acquire`` takes a free FramePool frame (marked WRITING) and wraps its buffer as GstFdMemory (over a dup of
the fd, DONT_CLOSE) with a GstVideoMeta giving the pool's offsets and pitches. The frame is held by that memory: the
slot comes back to the FramePool only when GStreamer has freed the memory *and* every other user (a consumer it was
sent to) has let go, so a slot is never written while anyone can still read it. The commit marker stays WRITING
until the frame is sent (``FrameSender.send`` commits it): a writer that dies mid-picture never delivers it.

The pool is bounded: ``acquire`` waits for a free slot (the back-pressure of a slow consumer reaches the decoder);
``stop()`` (or GStreamer flushing the pool) makes a waiting ``acquire`` return FLUSHING, so a pipeline can always
be stopped. The FramePool is made when the upstream element configures the pool (its caps and alignment are known
then) and only once ``set_count`` has said how many buffers it may have.

The pool does not advertise the video-alignment option (see ``do_get_options`` and docs/streams.md: avdec_*'s
direct rendering into it ends in a copy inside GStreamer); an element that configures a GstVideoAlignment anyway gets
a FramePool at the padded size with GStreamer's aligned pitches, and ``claim`` crops the frame to the visible size
(a zero-copy view).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import weakref
from typing import Any

from ..errors import InteropError
from ..frame import Frame
from ..info import plane_infos
from ..native import gst as ng
from ..tensors.dma import (
    DMATensor,
    FramePool,
    PoolClosedError,
    PoolTimeoutError,
    aligned_pitches,
    buffers_of,
    trusted_plane,
)
from ..tensors.gst import GST_FORMATS, gst, gst_video
from ..types import FrameFormat

log = logging.getLogger("interop")

#: how often a waiting acquire looks at the flushing flag (seconds)
POLL = 0.05
#: extra buffers when a decoder asks for aligned buffers (direct rendering): it keeps its reference pictures
#: (H.264: up to 16) and one per decoding thread in pool buffers
DECODER_REFS = 20
VIDEO_META = "GstBufferPoolOptionVideoMeta"
VIDEO_ALIGNMENT = "GstBufferPoolOptionVideoAlignment"

_q_libs: list[Any] = []


def _qlib() -> Any:
    """Our own handle on libgstreamer for the query calls (signatures set here, not on the shared handle)."""
    if not _q_libs:
        ng.libs()
        lib = ctypes.CDLL(ctypes.util.find_library("gstreamer-1.0") or "libgstreamer-1.0.so.0")
        lib.gst_query_parse_allocation.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                                   ctypes.POINTER(ctypes.c_int)]
        lib.gst_query_parse_allocation.restype = None
        lib.gst_query_add_allocation_pool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                                      ctypes.c_uint, ctypes.c_uint]
        lib.gst_query_add_allocation_pool.restype = None
        _q_libs.append(lib)
    return _q_libs[0]


class _Lease:
    """A pool frame lent to GStreamer: kept by the GstFdMemory over its buffer, released when GStreamer frees it.

    It counts a use of the frame's buffers of its own, so that a frame sharing the lease frame's planes, released by
    its holder, never gives the slot back while GStreamer (a decoder's reference picture, a tee, a sink's last sample)
    still holds the memory. ``claim()`` gives the worker a frame with planes of its own (``_own_frame``), so the
    other way round holds too: GStreamer freeing the memory first, on any thread, never ends the worker's frame."""

    __slots__ = ("frame", "_buffers", "__weakref__")

    def __init__(self, frame: Frame):
        self.frame = frame
        self._buffers = buffers_of(frame)
        for b in self._buffers:
            b.use()

    def __del__(self) -> None:
        try:
            self.frame.release()
        except Exception:  # never raise from a finaliser (GStreamer's destroy notify runs it on its thread)
            pass
        for b in self._buffers:
            try:
                b.unuse()
            except Exception:  # as above
                pass


class _Layout:
    """What the upstream element configured: format, visible size, padded size and pitches of the FramePool."""

    def __init__(self, fmt: FrameFormat, gst_format: str, width: int, height: int, padded_w: int, padded_h: int,
                 pitch_align: int, min_buffers: int, aligned: bool):
        self.format, self.gst_format = fmt, gst_format
        self.width, self.height = width, height
        self.padded_w, self.padded_h = padded_w, padded_h
        self.pitch_align = pitch_align
        self.min_buffers = min_buffers
        self.aligned = aligned

    def key(self) -> tuple[Any, ...]:
        return (self.format, self.width, self.height, self.padded_w, self.padded_h, self.pitch_align)


def _gst_aligned_width(fmt: FrameFormat, width: int, masks: list[int]) -> int:
    """The padded width whose pitches meet every plane's stride alignment mask, found the way
    gst_video_info_align finds it (add the lowest set bit until aligned): a decoder compares the strides."""
    w = width
    for _ in range(64):
        if all(p & m == 0 for p, m in zip(aligned_pitches(fmt, w, 1), masks)):
            return w
        w += w & -w
    raise InteropError(f"no {fmt.name} width >= {width} meets the stride alignment {masks}")


class GstFramePool:
    """A GStreamer buffer pool over an interop FramePool (see the module docstring). ``offer(element)`` answers the ALLOCATION queries reaching an element's sink pad with
    a Gst.BufferPool of its own (and GstVideoMeta support). ``set_count(n)`` sizes the FramePool (acquire waits until it is called);
    ``claim(sample)`` gives the pool frame a sample's buffer is, or None when upstream did not write into the pool.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._flushing = False
        self._stopped = False
        self._count: int | None = None
        self.layout: _Layout | None = None
        self.frames: FramePool | None = None
        self._old: list[FramePool] = []
        self._leases: dict[int, weakref.ref[_Lease]] = {}  # GstMemory address -> the lease it holds
        self.acquired = 0
        self.configured = threading.Event()  # set when upstream configured the pool (the caps are known)
        self.gst_pools: list[Any] = []  # one Gst.BufferPool per ALLOCATION query answered (see _on_query)

    # -- sizing / stopping (any thread) --------------------------------------------------------------------
    def set_count(self, count: int) -> None:
        """Let the pool have ``count`` buffers, plus what upstream asked for as a minimum (and a decoder's
        reference pictures when it decodes into the pool). Acquires waiting for it go on."""
        with self._lock:
            self._count = int(count)
            self._lock.notify_all()

    def stop(self) -> None:
        """No more buffers: a waiting acquire returns FLUSHING (call before setting the pipeline to NULL)."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    def close(self) -> None:
        """Stop, and close the FramePools: free buffers' fds now, held ones when their last user lets go."""
        self.stop()
        with self._lock:
            pools = self._old + ([self.frames] if self.frames is not None else [])
            self._old.clear()
            self.frames = None
        for p in pools:
            p.close()

    # -- the ALLOCATION query ------------------------------------------------------------------------------
    def offer(self, element: Any, pad_name: str = "sink") -> None:
        """Answer the ALLOCATION queries reaching ``element``'s ``pad_name`` pad with this pool (when the caps are a
        format a FramePool holds) and GstVideoMeta support."""
        g = ng.libs()[0]
        pad = g.gst_element_get_static_pad(ng.pointer_of(element, "Gst.Element"), pad_name.encode())
        if not pad:
            raise InteropError(f"element has no static {pad_name!r} pad")
        try:
            cb = ng.PROBE_CB(self._on_query)
            pid = g.gst_pad_add_probe(pad, ng.GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM, cb, None, None)
            if not pid:
                raise InteropError("GStreamer refused the ALLOCATION query probe")
            _callbacks.append(cb)  # GStreamer may call it as long as the pad lives: never freed
        finally:
            g.gst_object_unref(pad)

    def _on_query(self, pad: int | None, info: int | None, user_data: int | None) -> int:
        # a streaming thread; ctypes holds the GIL. Only extends the query (no Python wrapper takes a reference,
        # which would make it read-only)
        try:
            q = ctypes.c_void_p.from_address(int(info or 0) + ng._PROBE_DATA_OFFSET).value
            if q and ctypes.c_int.from_address(q + ng._QUERY_TYPE_OFFSET).value == ng.GST_QUERY_ALLOCATION:
                g, v = ng.libs()
                api = v.gst_video_meta_api_get_type()
                if not ng.query_has_allocation_meta(q, api):
                    g.gst_query_add_allocation_meta(q, api, None)
                lib = _qlib()
                caps = ctypes.c_void_p()
                lib.gst_query_parse_allocation(q, ctypes.byref(caps), None)
                lay = ng.video_info(caps.value) if caps.value else None
                if lay is not None and lay.format in GST_FORMATS and not self._stopped:
                    size = lay.size or 0
                    # max 0: a decoder that keeps reference pictures refuses a pool that cannot grow; the real
                    # bound is the FramePool, whose acquire waits
                    # a fresh Gst.BufferPool for each query: a decoder that negotiates again cannot configure a pool
                    # whose buffers it still holds, and would fall back to a pool of its own; every one of them
                    # takes its buffers from the same FramePool
                    gp = _pool_class()(self)
                    self.gst_pools.append(gp)
                    lib.gst_query_add_allocation_pool(q, ng.pointer_of(gp, "Gst.BufferPool"), size, 2, 0)
                else:
                    log.info("interop's buffer pool not offered for caps %s (format not held by a FramePool)",
                             lay.format if lay else None)
        except Exception:  # never raise into GStreamer's thread
            log.exception("interop's ALLOCATION query answer (buffer pool) failed")
        return ng.GST_PAD_PROBE_OK

    # -- the Gst.BufferPool's virtual methods (streaming threads) -------------------------------------------
    def _configure(self, config: Any) -> bool:
        Gst = gst()
        GstVideo = gst_video()
        ok, caps, _size, min_buffers, _max = Gst.BufferPool.config_get_params(config)
        if not ok or caps is None:
            return False
        s = caps.get_structure(0)
        name = s.get_string("format")
        fmt = GST_FORMATS.get(name or "")
        ok_w, width = s.get_int("width")
        ok_h, height = s.get_int("height")
        if fmt is None or not ok_w or not ok_h:
            log.info("interop's buffer pool refuses caps %s", caps.to_string())
            return False
        pw, ph, align, aligned = width, height, 64, False
        if Gst.BufferPool.config_has_option(config, VIDEO_ALIGNMENT):
            a = GstVideo.VideoAlignment()
            if GstVideo.buffer_pool_config_get_video_alignment(config, a):
                if a.padding_top or a.padding_left:
                    log.warning("interop's buffer pool cannot pad at the top or left (%d, %d): refused",
                                a.padding_top, a.padding_left)
                    return False
                masks = [int(m) for m in a.stride_align]
                pw = _gst_aligned_width(fmt, width + int(a.padding_right), masks)
                ph = height + int(a.padding_bottom)
                align, aligned = 1, True
        lay = _Layout(fmt, name or "", width, height, pw, ph, align, int(min_buffers), aligned)
        with self._lock:
            if self.layout is None or self.layout.key() != lay.key():
                if self.frames is not None:
                    self._old.append(self.frames)  # closed with the pool: frames in flight stay valid
                    self.frames = None
            self.layout = lay
        self.configured.set()
        log.info("interop's buffer pool configured: %s %dx%d (buffers %dx%d%s)", name, width, height, pw, ph,
                 ", decoder alignment" if aligned else "")
        return True

    def _frame_pool(self) -> FramePool | None:
        """The FramePool for the configured layout, made once the count is known (waits for it; None when
        stopped)."""
        with self._lock:
            while True:
                if self._stopped or self._flushing:
                    return None
                if self.frames is not None:
                    return self.frames
                lay = self.layout
                if lay is not None and self._count is not None:
                    n = self._count + lay.min_buffers + (DECODER_REFS if lay.aligned else 0)
                    self.frames = FramePool(lay.format, lay.padded_w, lay.padded_h, n, pitch_align=lay.pitch_align)
                    return self.frames
                self._lock.wait(POLL)

    def _acquire(self) -> Any:
        """A Gst.Buffer over a free pool frame (None when flushing or stopped)."""
        Gst = gst()
        while True:
            fp = self._frame_pool()
            if fp is None:
                return None
            try:
                f = fp.acquire(timeout=POLL)
                break
            except PoolTimeoutError:
                continue
            except PoolClosedError:  # replaced by a new layout meanwhile
                continue
        lay = self.layout
        assert lay is not None
        lease = _Lease(f)
        buffer = Gst.Buffer.new()
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        b = buffers_of(f)[0]
        fd = os.dup(b.fd)
        try:
            mem = ng.append_fd_memory(buf, fd, b.size, lease, b.is_dmabuf, False)
        except BaseException:
            os.close(fd)
            raise
        ng.add_video_meta(buf, lay.gst_format, lay.width, lay.height, list(fp.offsets), list(fp.pitches))
        # Never queued back by GstBufferPool's default release (each acquire makes a new buffer over a pool frame):
        # a tagged buffer is freed, and with it the memory and its lease, so the frame's slot can come back.
        buffer.set_flags(Gst.BufferFlags.TAG_MEMORY)
        with self._lock:
            self._leases[mem] = weakref.ref(lease, _forget(self._leases, mem))
            self.acquired += 1
        return buffer

    def _set_flushing(self, on: bool) -> None:
        with self._lock:
            self._flushing = on
            self._lock.notify_all()

    # -- the appsink side ------------------------------------------------------------------------------------
    def claim(self, sample: Any) -> Frame | None:
        """The pool frame that ``sample``'s buffer is (cropped to the visible size when the pool is padded), or
        None when upstream did not write into this pool (then copy). The frame is the producer's: send it and
        release it; the slot comes back once GStreamer frees the buffer and every consumer let go."""
        buffer = sample.get_buffer() if hasattr(sample, "get_buffer") else sample
        buf = ng.pointer_of(buffer, "Gst.Buffer")
        if ng.n_memory(buf) != 1:
            return None
        mem = ng.peek_memory(buf, 0)
        with self._lock:
            ref = self._leases.get(mem)
        lease = ref() if ref is not None else None
        if lease is None:
            return None
        return _own_frame(lease.frame, self.layout)


def _own_frame(f: Frame, lay: _Layout | None) -> Frame:
    """A frame over ``f``'s planes (cropped to the layout's visible size when the pool is padded) whose planes each
    hold the buffer of their own. Made while the caller holds the sample (so GStreamer's hold, ``f``, is alive): the
    slot then comes back only once GStreamer freed the memory *and* this frame (the sender's hold on it once sent)
    let go. Sharing ``f``'s planes instead, GStreamer freeing the memory before the frame was sent released it under
    the worker, and the slot could be handed out again while the frame was on its way."""
    w, h = f.width, f.height
    src = list(f.tensors)
    infos = [t.info for t in src]
    if lay is not None and (w, h) != (lay.width, lay.height):
        w, h = lay.width, lay.height
        infos = plane_infos(f.format, w, h, [i.strides[0] for i in infos])  # same offsets and pitches: a crop at 0, 0
    planes: list[Any] = []
    try:
        for t, info in zip(src, infos):
            assert isinstance(t, DMATensor)
            planes.append(trusted_plane(t.buffer, info, t.offset, t.drm_fourcc, t.drm_modifier, t.context))
        return Frame(planes, f.format, w, h, context=f.context, metadata=dict(f.metadata))
    except BaseException:
        for p in planes:
            p.release()
        raise


def _forget(table: dict[int, Any], key: int) -> Any:
    def drop(ref: Any) -> None:
        if table.get(key) is ref:
            table.pop(key, None)
    return drop


_callbacks: list[Any] = []
_classes: list[type] = []


def _pool_class() -> type:
    """The Gst.BufferPool subclass (made once GStreamer is loaded: importing interop never imports gi)."""
    if _classes:
        return _classes[0]
    Gst = gst()
    from gi.repository import GObject

    class InteropFramePool(Gst.BufferPool):  # type: ignore[misc, name-defined]
        """Buffers over an interop FramePool: see interop.elements.pool."""

        def __init__(self, owner: GstFramePool):
            super().__init__()
            self._owner = weakref.ref(owner)

        def do_get_options(self) -> list[str]:
            # not VIDEO_ALIGNMENT: avdec_* would then decode into pool buffers (direct rendering) but push copies of
            # them in system memory (a picture FFmpeg keeps as a reference stays mapped for writing), which is a
            # hidden copy on top of ours; without it avdec keeps its own pool and we copy once, counted
            return [VIDEO_META]

        # no do_set_config: its GIR annotation says the config is handed over, but GStreamer keeps it, so PyGObject
        # would free a structure GStreamer still uses. The config is read back (a copy) when the pool starts

        def do_start(self) -> bool:
            # nothing to preallocate: buffers are made per acquire over FramePool frames
            o = self._owner()
            return o is not None and o._configure(self.get_config())

        def do_stop(self) -> bool:
            return True

        def do_acquire_buffer(self, params: Any) -> tuple[Any, Any]:
            o = self._owner()
            try:
                b = o._acquire() if o is not None else None
            except Exception:
                log.exception("interop's buffer pool could not give a buffer")
                return Gst.FlowReturn.ERROR, None
            if b is None:
                return Gst.FlowReturn.FLUSHING, None
            return Gst.FlowReturn.OK, b

        def do_flush_start(self) -> None:
            o = self._owner()
            if o is not None:
                o._set_flushing(True)

        def do_flush_stop(self) -> None:
            o = self._owner()
            if o is not None:
                o._set_flushing(False)

    GObject.type_register(InteropFramePool)
    _classes.append(InteropFramePool)
    return InteropFramePool
