"""``interopdec``: a GStreamer video decoder element (FFmpeg through PyAV) whose output buffers are FFmpeg's frames.

``avdec_h264`` (gst-libav 1.22) copies every picture whose width or height is not a multiple of 16 into a buffer of
the pipeline's (docs/gstreamer.md, "Decoders and padded buffers"). This element decodes with FFmpeg and pushes
``Gst.Buffer``s that wrap the decoded AVFrame's planes in place: one read-only GstMemory per plane, a GstVideoMeta
with FFmpeg's padded strides, and the ``av.VideoFrame`` kept alive (so FFmpeg does not reuse its buffers) until
GStreamer frees the last memory. The plane addresses, pitches and sizes are interop's FFMPEG tensors' (the same
layout checks as ``interop.wrap(video_frame)``), wrapped by ``interop.native.gst.video_frame_buffer`` in one call
that keeps the GIL (memories, keep-alive, meta, times, flags), then pushed.

Use it in a pipeline string once ``register()`` has run in the process::

    from interop.elements.gst_decoder import register
    register()  # or register(rank=Gst.Rank.PRIMARY + 1) to let decodebin prefer it
    frames("filesrc location=clip.mp4 ! qtdemux ! h264parse ! interopdec ! appsink")

Downstream that does not announce GstVideoMeta in the ALLOCATION query (a plain ``appsink``, ``filesink``) would
read padded planes with GStreamer's default strides: for it each frame is copied into GStreamer's default layout
(the only copy the element ever makes; padding zeroed; logged once per negotiation, counted in the ``copied-frames``
property and in ``interop.copy_meter()`` as "interopdec").
"""

from __future__ import annotations

import logging
import os
import threading
from fractions import Fraction
from typing import Any

import numpy as np

from ..backends import require
from ..errors import InteropError, UnsupportedFormatError
from ..info import TensorInfo
from ..meter import record_copy
from ..native import gst as ng
from ..tensors.ffmpeg import wrap_video_frame
from ..tensors.gst import GST_FORMAT_NAMES, gst, gst_video

log = logging.getLogger("interop")

#: the element's factory name
NAME = "interopdec"

#: GStreamer caps -> FFmpeg decoder name; the sink template accepts these
CODECS: dict[str, str] = {"video/x-h264": "h264", "video/x-h265": "hevc", "video/x-vp8": "vp8",
                          "video/x-vp9": "vp9", "video/mpeg": "mpeg4"}
SINK_CAPS = ("video/x-h264, stream-format=(string){ avc, avc3, byte-stream }, alignment=(string)au; "
             "video/x-h265, stream-format=(string){ hvc1, hev1, byte-stream }, alignment=(string)au; "
             "video/x-vp8; video/x-vp9; video/mpeg, mpegversion=(int)4, systemstream=(boolean)false")
SRC_CAPS = (f"video/x-raw, format=(string){{ {', '.join(sorted(GST_FORMAT_NAMES.values()))} }}, "
            "width=(int)[ 1, 2147483647 ], height=(int)[ 1, 2147483647 ], framerate=(fraction)[ 0/1, 2147483647/1 ]")

_NONE = ng.GST_CLOCK_TIME_NONE
_NS = Fraction(1, 1_000_000_000)
# AVColorRange -> GstVideoColorRange (FFmpeg: 1 MPEG/limited, 2 JPEG/full; GStreamer: 1 0-255, 2 16-235)
_RANGES = {1: 2, 2: 1}
# the chroma siting FFmpeg's decoders give when the stream does not say (AVCHROMA_LOC_LEFT: GStreamer's mpeg2);
# FFmpeg leaves VP8/VP9's unspecified, and so do the caps (as avdec_vp8/avdec_vp9's)
_CHROMA_SITES = {"h264": "mpeg2", "hevc": "mpeg2", "mpeg4": "mpeg2"}
# input timestamps kept for pictures without a pts, at least: the real bound is twice the pictures the decoder holds
_MIN_PENDING = 64
# AV_CODEC_CAP_FRAME_THREADS, and FFmpeg's MAX_AUTO_THREADS (libavcodec/pthread_internal.h)
_CAP_FRAME_THREADS = 1 << 12
_MAX_AUTO_THREADS = 16

_TYPE_NAME = "InteropDec"
_registered: list[Any] = []
_register_lock = threading.Lock()


def register(rank: Any = None) -> Any:
    """Register ``interopdec`` in this process (idempotent) and return its element class. ``rank`` (a
    ``Gst.Rank``, default NONE: only used where named) above ``Gst.Rank.PRIMARY`` makes decodebin/playbin prefer it
    to avdec_h264. Calling it again with another rank changes the factory's rank."""
    Gst = gst()
    gst_video()  # what output caps need: missing, it fails here rather than on the streaming thread
    rank = Gst.Rank.NONE if rank is None else rank
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= 0xFFFFFFFF:
        raise InteropError(f"rank must be a Gst.Rank or an int from 0 (NONE) up, e.g. Gst.Rank.PRIMARY + 1, "
                           f"not {rank!r}")
    with _register_lock:
        if not _registered:
            cls = _make_class(Gst)
            caps = {d: Gst.Caps.from_string(c) for d, c in (("sink", SINK_CAPS), ("src", SRC_CAPS))}
            ng.set_element_class(
                _TYPE_NAME, ("interop FFmpeg decoder", "Codec/Decoder/Video",
                             "Decodes with FFmpeg (PyAV); output buffers wrap FFmpeg's frames (GstVideoMeta, no copy)",
                             "interop"),
                [(d, int(Gst.PadDirection.SINK if d == "sink" else Gst.PadDirection.SRC), int(Gst.PadPresence.ALWAYS),
                  ng.pointer_of(c, "Gst.Caps")) for d, c in caps.items()])
            _registered.append(cls)
        cls = _registered[0]
        if not Gst.Element.register(None, NAME, int(rank), cls.__gtype__):
            raise InteropError(f"GStreamer refused to register the {NAME} element")
        factory = Gst.ElementFactory.find(NAME)
        if factory is not None:
            factory.set_rank(int(rank))
    return cls


# ---- pad functions: module-level (not bound methods), so a pad does not hold its element in a cycle ---------


def _chain(pad: Any, parent: Any, buffer: Any) -> Any:
    return parent._on_buffer(buffer)


def _event(pad: Any, parent: Any, event: Any) -> bool:
    return bool(parent._on_event(pad, event))


def _query(pad: Any, parent: Any, query: Any) -> bool:
    return bool(parent._on_query(pad, query))


def _packet(av: Any, buffer: Any) -> Any:
    """An av.Packet holding a copy of ``buffer``'s compressed bytes in memory FFmpeg allocated.

    Not ``av.Packet(bytes)``: that packet's memory is a Python object, which FFmpeg's frame threads free with the
    GIL when they drop the packet; freeing the decoder (which joins those threads) while holding the GIL then
    deadlocks."""
    buf = ng.pointer_of(buffer, "Gst.Buffer")
    size = ng.coded_buffer_size(buf)  # these two keep the GIL (a streaming thread waits for it at each take-back)
    packet = av.Packet(size)
    if size:
        dest = np.frombuffer(packet, np.uint8)
        if ng.coded_buffer_extract(buf, dest.ctypes.data, size) != size:
            raise InteropError("GStreamer could not read the coded buffer")
    return packet


def _frame_threads(ctx: Any, live: bool, requested: int) -> int:
    """The frame threads FFmpeg gives a decoder opened with ``ctx``'s settings: none (1) with slice threads (a live
    upstream) or a codec without frame threading; else ``requested``, or for 0 FFmpeg's automatic count (the CPUs
    this process may run on plus one, at most 16; one CPU: one thread)."""
    if live or not int(ctx.codec.capabilities) & _CAP_FRAME_THREADS:
        return 1
    if requested:
        return requested
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus + 1, _MAX_AUTO_THREADS) if cpus > 1 else 1


def _make_class(Gst: Any) -> Any:
    GObject = require("gi.repository.GObject", "gst")
    av = require("av", "ffmpeg")
    FFmpegError = av.error.FFmpegError
    DELTA_UNIT = int(Gst.BufferFlags.DELTA_UNIT)
    INTERLACED = int(gst_video().VideoBufferFlags.INTERLACED)

    class InteropDec(Gst.Element):  # type: ignore[misc]
        """The element (see the module's docstring). Properties: ``max-threads`` (FFmpeg decoder threads, 0 =
        FFmpeg's choice), ``max-errors`` (consecutive decode errors tolerated before the element fails, -1 = never),
        ``copied-frames`` (read-only: frames copied for downstream without GstVideoMeta support)."""

        __gtype_name__ = _TYPE_NAME

        max_threads = GObject.Property(type=int, default=0, minimum=0, maximum=256, nick="max-threads",
                                       blurb="FFmpeg decoder threads (0: FFmpeg's default)")
        max_errors = GObject.Property(type=int, default=10, minimum=-1, maximum=2 ** 31 - 1, nick="max-errors",
                                      blurb="consecutive decode errors tolerated before failing (-1: never fail)")

        @GObject.Property(type=GObject.TYPE_UINT64, flags=GObject.ParamFlags.READABLE, nick="copied-frames",
                          blurb="frames copied for downstream without GstVideoMeta support")
        def copied_frames(self) -> int:
            return int(self._copied)

        def __init__(self) -> None:
            super().__init__()
            self.sinkpad = Gst.Pad.new_from_template(self.get_pad_template("sink"), "sink")
            self.srcpad = Gst.Pad.new_from_template(self.get_pad_template("src"), "src")
            self.sinkpad.set_chain_function_full(_chain)
            self.sinkpad.set_event_function_full(_event)
            self.srcpad.set_query_function_full(_query)
            self._srcpad_ptr = ng.pointer_of(self.srcpad, "Gst.Pad")
            self.add_pad(self.sinkpad)
            self.add_pad(self.srcpad)
            #: a test hook: called as on_frame(video_frame, buffer_pointer) before each buffer is pushed (the
            #: GstBuffer* it is about to push; ``ng.buffer_times`` reads its pts)
            self.on_frame: Any = None
            self._ctx: Any = None
            self._codec_key: Any = None
            self._fps: Fraction | None = None
            self._par: Fraction | None = None
            self._out_key: Any = None
            self._meta_ok = True
            self._tight: Any = None  # the default layout, when downstream needs it
            self._segment: Any = None  # a SEGMENT waiting for the first output caps
            self._errors = 0
            self._packets = 0  # fed to the current decoder
            self._packets_in = 0  # since the stream started
            self._frames = 0
            self._copied = 0
            self._live = False  # upstream is live (LATENCY query at caps time): slice threads, no frame delay
            self._interlaced = False  # an interlaced picture was seen: caps say interlace-mode=mixed from then on
            self._next_pts: int | None = None  # where the next picture falls when FFmpeg has no timestamp for it
            # the DTS of buffers without a PTS (a byte stream's) by packet number: a picture without a pts takes the
            # lowest pending one (GstVideoDecoder's rule; a B-frame stream's DTS are not its pts). The packet's pts
            # carries its number (negated, see _on_buffer) through FFmpeg's reordering to its picture
            self._pending: dict[int, int] = {}
            self._seq = 0  # packets fed since the stream started
            self._last_duration = _NONE
            self._frame_threads = 1  # FFmpeg's frame threads in the current decoder (1: none, slice threads or one)
            self._posted_latency = 0  # the delay the LATENCY answer adds, as last announced
            self._fmt_code = 0

        # ---- negotiation ------------------------------------------------------------------------------------

        def _configure(self, caps: Any) -> bool:
            s = caps.get_structure(0)
            codec = CODECS.get(s.get_name())
            if codec is None:
                self._fail(Gst.CoreError.NEGOTIATION, f"{NAME} cannot decode {caps.to_string()}",
                           f"{NAME} decodes {', '.join(CODECS)}; use decodebin for others")
                return False
            extradata = b""
            value = s.get_value("codec_data") if s.has_field("codec_data") else None
            if value is not None:
                extradata = value.extract_dup(0, value.get_size())
            ok_fps, n, d = s.get_fraction("framerate")
            self._fps = Fraction(n, d) if ok_fps and n > 0 and d > 0 else None
            ok_par, n, d = s.get_fraction("pixel-aspect-ratio")
            self._par = Fraction(n, d) if ok_par and n > 0 and d > 0 else None
            # a live source cannot wait for FFmpeg's frame threads (each holds a picture back): ask at caps time
            latency = Gst.Query.new_latency()
            self._live = bool(self.sinkpad.peer_query(latency) and latency.parse_latency()[0])
            key = (codec, extradata)
            if key == self._codec_key:
                self._announce_latency()  # a new framerate changes the held-back pictures' duration
                return True  # the same stream renegotiated: keep the decoder
            if self._ctx is not None:
                self._drain()
            self._codec_key = key
            self._open()
            self._announce_latency()
            return True

        def _open(self) -> None:
            codec, extradata = self._codec_key
            ctx = av.CodecContext.create(codec, "r")
            if extradata:
                ctx.extradata = extradata
            ctx.thread_type = "SLICE" if self._live else "AUTO"
            ctx.thread_count = int(self.max_threads)
            self._ctx = ctx
            self._errors = 0
            self._frame_threads = _frame_threads(ctx, self._live, int(self.max_threads))

        def _output_caps(self, vf: Any, gst_format: str) -> Any:
            GstVideo = gst_video()
            w, h = vf.width, vf.height
            c = GstVideo.VideoColorimetry()
            c.from_string("bt709" if h >= 720 else "bt601")  # GStreamer's default for the size
            rng = _RANGES.get(int(vf.color_range))
            if vf.format.name.startswith("yuvj"):
                rng = 1
            if rng is not None:
                c.range = GstVideo.VideoColorRange(rng)
            if gst_format.startswith(("RGB", "BGR", "GRAY")):
                c.from_string("sRGB")
            else:
                matrix = GstVideo.video_color_matrix_from_iso(int(vf.colorspace))
                transfer = GstVideo.video_transfer_function_from_iso(int(vf.color_trc))
                primaries = GstVideo.video_color_primaries_from_iso(int(vf.color_primaries))
                if int(matrix):
                    c.matrix = matrix
                if int(transfer):
                    c.transfer = transfer
                if int(primaries):
                    c.primaries = primaries
            par = self._par
            if par is None:
                sar = self._ctx.sample_aspect_ratio if self._ctx is not None else None
                par = Fraction(sar) if sar else Fraction(1)
            fps = self._fps or Fraction(0)
            subsampled = gst_format.startswith(("I420", "YV12", "NV12", "NV21", "P010"))
            site = _CHROMA_SITES.get(self._codec_key[0]) if subsampled and self._codec_key else None
            return Gst.Caps.from_string(
                f"video/x-raw, format=(string){gst_format}, width=(int){w}, height=(int){h}, "
                f"interlace-mode=(string){'mixed' if self._interlaced else 'progressive'}, "
                f"framerate=(fraction){fps.numerator}/{fps.denominator}, "
                f"pixel-aspect-ratio=(fraction){par.numerator}/{par.denominator}, "
                + (f"chroma-site=(string){site}, " if site else "")
                + f"colorimetry=(string){c.to_string()}")

        def _negotiate(self, caps: Any) -> bool:
            if not self.srcpad.push_event(Gst.Event.new_caps(caps)):
                return False
            if self._segment is not None:
                seg, self._segment = self._segment, None
                self.srcpad.push_event(seg)
            # downstream without GstVideoMeta support reads planes at GStreamer's default strides
            query = Gst.Query.new_allocation(caps, False)
            self._meta_ok = True
            self._tight = None
            # the answer counts, not the return value: a 1.22 appsink answers FALSE even where a probe (interop's
            # AppSinkSource) added the meta, and GstVideoDecoder reads the query the same way
            self.srcpad.peer_query(query)
            self._meta_ok = ng.query_has_allocation_meta(ng.pointer_of(query, "Gst.Query"), ng.video_meta_api())
            if not self._meta_ok:
                self._tight = ng.video_info(ng.pointer_of(caps, "Gst.Caps"))
                log.warning("%s: downstream of %s does not take GstVideoMeta (padded strides): each frame is "
                            "copied into GStreamer's default layout. End the pipeline in interop's AppSinkSource / "
                            "frames(), or an element that supports GstVideoMeta, to get FFmpeg's frames as they are",
                            self.get_name(), NAME)
            return True

        # ---- data -------------------------------------------------------------------------------------------

        def _on_buffer(self, buffer: Any) -> Any:
            try:
                if self._ctx is None and self._codec_key is not None:
                    self._open()  # data after EOS (a flushing seek back): caps are sticky, so none came again
                if self._ctx is None:
                    self._fail(Gst.CoreError.NEGOTIATION, f"{NAME} got data before caps",
                               "the upstream element must send video/x-h264 (or other coded) caps first")
                    return Gst.FlowReturn.NOT_NEGOTIATED
                packet = _packet(av, buffer)
                if buffer.pts != _NONE:
                    packet.pts = buffer.pts
                seq = self._seq
                self._seq += 1
                if buffer.dts != _NONE:
                    packet.dts = buffer.dts
                    if buffer.pts == _NONE:
                        # a GstClockTime is never negative: a negative pts is the packet's number, which FFmpeg hands
                        # to the picture decoded from it (not Packet.opaque: PyAV keys it by id() and frees it under
                        # the GIL from FFmpeg's frame threads)
                        packet.pts = -1 - seq
                        self._pending[seq] = int(buffer.dts)
                        self._forget_ghosts(seq, max(_MIN_PENDING, 2 * (self._delay_frames() + 1)))
                if buffer.duration != _NONE:
                    packet.duration = buffer.duration
                packet.time_base = _NS
                self._packets += 1
                self._packets_in += 1
                return self._decode(packet, seq)
            except Exception as e:  # never raise into GStreamer's streaming thread
                self._fail(Gst.StreamError.FAILED, f"{NAME} failed: {e}", repr(e))
                return Gst.FlowReturn.ERROR

        def _decode(self, packet: Any, seq: int) -> Any:
            try:
                frames = self._ctx.decode(packet)
            except FFmpegError as e:
                if self._frame_threads == 1:
                    # the packet gave no picture. With frame threads the error may be an earlier packet's (FFmpeg
                    # reports a thread's result later): those entries go as ghosts (_forget_ghosts)
                    self._pending.pop(seq, None)
                self._errors += 1
                limit = int(self.max_errors)
                if limit < 0 or self._errors <= limit:
                    log.warning("%s: FFmpeg could not decode a packet (%s); %d in a row", self.get_name(), e,
                                self._errors)
                    return Gst.FlowReturn.OK
                self._fail(Gst.StreamError.DECODE,
                           f"{NAME}: FFmpeg could not decode the stream ({self._errors} packets in a row failed: {e})",
                           "the input is corrupt or not the codec its caps say; check the file (ffprobe), or raise "
                           "max-errors to skip damaged packets")
                return Gst.FlowReturn.ERROR
            for vf in frames:
                self._errors = 0
                ret = self._push(vf)
                if ret != Gst.FlowReturn.OK:
                    return ret
            return Gst.FlowReturn.OK

        def _drain(self) -> Any:
            ctx = self._ctx
            if ctx is None:
                return Gst.FlowReturn.OK
            ret = Gst.FlowReturn.OK
            if self._packets:
                try:
                    frames = ctx.decode(None)
                except FFmpegError as e:
                    log.warning("%s: draining FFmpeg's decoder failed: %s", self.get_name(), e)
                    frames = []
                for vf in frames:
                    ret = self._push(vf)
                    if ret != Gst.FlowReturn.OK:
                        break
            self._ctx = None  # a drained decoder takes no more packets: the next data opens a new one
            self._packets = 0
            self._pending.clear()
            return ret

        def _push(self, vf: Any) -> Any:
            try:
                f = wrap_video_frame(vf, allocated=True)  # a decoder's frame: FFmpeg allocated line_size x rows
            except UnsupportedFormatError:
                f = None
            gst_format = GST_FORMAT_NAMES.get(f.format) if f is not None else None
            if f is None or gst_format is None:
                self._fail(Gst.StreamError.FORMAT,
                           f"{NAME} cannot output {vf.format.name} frames: interop has no GStreamer format for them",
                           "decode this stream with decodebin (or the avdec_* element of this codec) and videoconvert "
                           "instead")
                return Gst.FlowReturn.NOT_NEGOTIATED
            interlaced = bool(vf.interlaced_frame)
            if interlaced and not self._interlaced:
                self._interlaced = True
                log.warning("%s: field order unknown: GStreamer will treat these pictures as bottom field first; "
                            "decode with avdec_h264 for top-field-first content", self.get_name())
            key = (gst_format, vf.width, vf.height, int(vf.color_range), int(vf.colorspace), int(vf.color_trc),
                   int(vf.color_primaries), self._fps, self._par, self._interlaced)
            # RECONFIGURE from downstream (a branch linked later, say) asks for a new ALLOCATION answer too. Read
            # through PyGObject, which lets go of the GIL: it takes the pad's lock, which GStreamer holds while a
            # removed probe's (Python) destroy notify waits for the GIL. It clears the flag: this negotiation answers it
            reconfigure = self.srcpad.check_reconfigure()
            if key != self._out_key or reconfigure:
                if not self._negotiate(self._output_caps(vf, gst_format)):
                    self.srcpad.mark_reconfigure()  # try again with the next picture
                    if self.srcpad.is_flushing():
                        return Gst.FlowReturn.FLUSHING
                    self._fail(Gst.CoreError.NEGOTIATION, f"downstream refused {NAME}'s {gst_format} "
                               f"{vf.width}x{vf.height} output", "put videoconvert after the decoder")
                    return Gst.FlowReturn.NOT_NEGOTIATED
                self._out_key = key
                self._fmt_code = ng.format_code(gst_format)
            pts = self._pts_ns(vf)
            if self._fps:
                duration = int(1_000_000_000 / self._fps)
            elif vf.duration and vf.time_base:
                duration = int(vf.duration * vf.time_base * 1_000_000_000)
            else:
                duration = _NONE
            self._last_duration = duration
            self._next_pts = pts + duration if pts != _NONE and duration != _NONE else None
            flags = 0 if vf.key_frame else DELTA_UNIT
            if interlaced:
                # no TFF: FFmpeg's H.264 decoder leaves the context's field_order unset (only its parser fills it)
                # and PyAV does not expose the frame's top-field-first flag, so the field order is not known here
                flags |= INTERLACED
            self._announce_latency()  # before the buffer exists: nothing of ours to free if posting fails
            # one call builds the whole buffer with the GIL held (memories, keep-alive, meta, times, flags)
            if self._meta_ok:
                planes: list[Any] = f.tensors  # FFmpegTensors
                # each plane's whole rows (stride x rows, which GStreamer's video frame maps expect), never past
                # the memory FFmpeg allocated for it (the tensor's buffer_size)
                spans = [(t.data_ptr, min(t.info.strides[0] * t.info.shape[0], t.buffer_size)) for t in planes]
                buf = ng.video_frame_buffer(spans, vf, self._fmt_code, vf.width, vf.height,
                                            [t.info.strides[0] for t in planes], pts, duration, flags)
            else:
                out = self._tight_copy(f)
                buf = ng.video_frame_buffer([(out.ctypes.data, out.nbytes)], out, 0, 0, 0, None, pts, duration,
                                            flags)
            self._frames += 1
            hook = self.on_frame
            if hook is not None:
                try:
                    hook(vf, buf)
                except BaseException:
                    ng.libs()[0].gst_mini_object_unref(buf)  # ours until pushed: frees the memories, the frame
                    raise
            return Gst.FlowReturn(ng.pad_push(self._srcpad_ptr, buf))

        def _pts_ns(self, vf: Any) -> int:
            """The picture's pts in ns, as GstVideoDecoder picks it: the pts, else the lowest input timestamp not
            given out yet (h264parse gives a byte stream DTS only; pictures leave in pts order, so the lowest pending
            DTS is the next pts, whatever the reorder depth), else the previous picture's pts plus its duration;
            GST_CLOCK_TIME_NONE when none of them is known. Not the frame's pkt_dts: that is the DTS of the packet
            whose decoding released the picture, late by the reorder depth."""
            if vf.pts is None or vf.pts < 0:
                pending = self._pending
                seq = -1 - int(vf.pts) if vf.pts is not None else None
                if seq is not None:
                    if vf.key_frame:
                        # pictures leave in display order, and every picture decoded before a keyframe shows before
                        # it: what is still pending from before it gave no picture (joined mid-GOP, errors)
                        for k in [k for k in pending if k < seq]:
                            del pending[k]
                    # overdue: the delay counts pictures and a field-coded picture is two packets (the second's
                    # entry is never claimed), so the window is twice the delay, as the pending bound
                    self._forget_ghosts(self._seq - 1, 2 * (self._delay_frames() + 1), keep=seq)
                if pending:
                    low = min(pending, key=pending.__getitem__)
                    pts = pending.pop(low)
                    # as GstVideoDecoder: this picture leaves with the lowest timestamp, and its own passes to the
                    # packet that held the lowest
                    if seq is not None and seq in pending:
                        pending[low] = pending.pop(seq)
                    return pts
                return self._next_pts if self._next_pts is not None else _NONE
            tb = vf.time_base
            return int(vf.pts) if tb is None or tb == _NS else int(vf.pts * tb * 1_000_000_000)

        def _forget_ghosts(self, last: int, window: int, keep: int = -1) -> None:
            """Drop the pending timestamps of packets more than ``window`` before packet ``last`` but ``keep`` (the
            picture leaving now): their picture would have left by now, so they gave none (as GstVideoDecoder
            discards frames that never got a buffer)."""
            pending = self._pending
            if pending and min(pending) < last - window:
                for k in [k for k in pending if k < last - window and k != keep]:
                    del pending[k]

        def _tight_copy(self, f: Any) -> Any:
            """GStreamer's default layout of ``f`` in a new allocation (downstream cannot read FFmpeg's pitches),
            its padding zeroed; counted in ``copied-frames`` and in interop's copy meter (as "interopdec")."""
            lay = self._tight
            out = np.zeros(lay.size, np.uint8)
            written = 0
            for t, off, stride in zip(f.tensors, lay.offsets, lay.strides):
                info = t.info
                rows, row_bytes = info.shape[0], info.itemsize * int(np.prod(info.shape[1:]))
                src = t.as_array(TensorInfo((rows, row_bytes), np.uint8, (info.strides[0], 1)))
                np.ndarray((rows, row_bytes), np.uint8, out, off, (stride, 1))[...] = src
                written += rows * row_bytes
            self._copied += 1
            record_copy(NAME, written)
            return out

        def _delay_frames(self) -> int:
            """Pictures the decoder holds back: FFmpeg's reorder depth (known once it has seen the stream's headers or
            reordered pictures), plus one per frame thread but the first (none for a live upstream)."""
            ctx = self._ctx
            return (int(ctx.reorder_depth) if ctx is not None else 0) + self._frame_threads - 1

        def _added_latency(self) -> int:
            """The ns the LATENCY answer adds to upstream's: the held-back pictures' duration."""
            frame = int(1_000_000_000 / self._fps) if self._fps else self._last_duration
            return self._delay_frames() * frame if frame != _NONE else 0

        def _announce_latency(self) -> None:
            # as gst_video_decoder_set_latency: a LATENCY message makes the pipeline query again (a live pipeline
            # asked at PLAYING, before the caps and the reorder depth were known)
            added = self._added_latency()
            if added != self._posted_latency:
                self._posted_latency = added
                self.post_message(Gst.Message.new_latency(self))

        def _on_query(self, pad: Any, query: Any) -> bool:
            try:
                if query.type != Gst.QueryType.LATENCY:
                    return bool(Gst.Pad.query_default(pad, self, query))
                if not self.sinkpad.peer_query(query):
                    return False
                live, lo, hi = query.parse_latency()
                extra = self._added_latency()
                query.set_latency(live, lo + extra, hi if hi == _NONE else hi + extra)
                return True
            except Exception as e:  # never raise into GStreamer's thread
                log.warning("%s: answering a %s query failed: %r", self.get_name(), query.type.value_nick, e)
                return False

        # ---- events -----------------------------------------------------------------------------------------

        def _on_event(self, pad: Any, event: Any) -> bool:
            t = event.type
            try:
                if t == Gst.EventType.CAPS:
                    return self._configure(event.parse_caps())
                if t == Gst.EventType.SEGMENT:
                    if self.srcpad.has_current_caps():
                        return bool(self.srcpad.push_event(event))
                    self._segment = event  # sent after the output caps (sticky events keep that order)
                    return True
                if t == Gst.EventType.EOS:
                    packets = self._packets_in
                    self._drain()
                    if packets and not self._frames:
                        # as GstVideoDecoder does: a stream of packets that gave no picture is an error, not an
                        # empty video
                        self._fail(Gst.StreamError.DECODE,
                                   f"{NAME}: no valid frame decoded from {packets} packets before the end of the stream",
                                   "the input is corrupt or not the codec its caps say; check the file (ffprobe)")
                    return bool(self.srcpad.push_event(event))
                if t == Gst.EventType.FLUSH_STOP:
                    if self._ctx is not None:
                        self._ctx.flush_buffers()  # drop the decoder's queued pictures: a seek starts over
                    self._errors = 0
                    self._next_pts = None
                    self._pending.clear()
                    return bool(self.srcpad.push_event(event))
            except Exception as e:  # never raise into GStreamer's thread
                self._fail(Gst.StreamError.FAILED, f"{NAME} failed on a {t.value_nick} event: {e}", repr(e))
                return False
            return bool(Gst.Pad.event_default(pad, self, event))

        def do_change_state(self, transition: Any) -> Any:
            ret = Gst.Element.do_change_state(self, transition)
            if transition == Gst.StateChange.PAUSED_TO_READY:
                self._ctx = self._codec_key = self._out_key = self._segment = self._next_pts = None
                self._pending.clear()
                self._interlaced = self._live = False
                self._frame_threads, self._posted_latency = 1, 0
                self._errors = self._packets = self._packets_in = self._frames = self._seq = 0
            return ret

        def _fail(self, code: Any, text: str, debug: str) -> None:
            domain = Gst.CoreError.quark() if isinstance(code, Gst.CoreError) else Gst.StreamError.quark()
            self.message_full(Gst.MessageType.ERROR, domain, int(code), text, debug, __file__, "interopdec", 0)

    return InteropDec


__all__ = ["CODECS", "NAME", "register"]
