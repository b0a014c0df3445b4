"""The main job, ``interop run``: decode a video, map each frame zero-copy into ``Inference``, report.

The input is a file (decoded by PyAV) or ``gst:PIPELINE`` (decoded by GStreamer, frames from its appsink through
``interop.elements.frames``); one loop serves both. Per frame: decode -> ``interop.map(frame, MemoryType.OPENVINO)`` (the decoder's planes
become OpenVINO tensors over the same memory) -> ``Inference.infer_async`` (colour conversion, crop, resize and
normalisation run inside the model). The copy meter is open over the whole run: on the bundled clip it reads 0.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from . import _sigint, textdet
from .errors import (
    BackendUnavailableError,
    InteropError,
    InvalidTensorError,
    ModelFileError,
    UnsupportedFormatError,
)
from .meter import copy_meter, record_copy
from .run_boxes import BoxProcesses
from .types import MemoryType

log = logging.getLogger(__name__)


class VideoInputError(InteropError, OSError):
    """The video given to ``interop run`` cannot be read: missing, a directory, empty, not a media file, no video
    stream. Also an OSError, as a caller handling file errors expects."""


class OutputPathError(InteropError, OSError):
    """``--save`` names a path that cannot be written (checked before decoding starts)."""


@dataclass(frozen=True)
class ModelInput:
    """How a ``model`` of the user's gets each frame: Inference's ``mean``, ``scale`` (one value, or one per channel)
    and ``rgb`` (False: BGR order), folded into the model's pre-processing. The default is RGB 0..255 as decoded. The
    text detector (no ``model``) has its own, fixed."""

    mean: float | tuple[float, ...] | None = None
    scale: float | tuple[float, ...] | None = None
    rgb: bool = True


class RunArgumentError(InteropError, ValueError):
    """An option of ``interop run`` out of range (``--frames 0``)."""


# The pixel format a frame is converted to with ``allow_copy`` (``--allow-copy``) when the model cannot take its own.
CONVERT_TO = "yuv420p"


@dataclass
class FrameResult:
    """One frame's results, in the frame's own coordinates (its ``width`` x ``height``)."""

    index: int
    pts: int | None
    time: float | None  # seconds (pts * time_base), None when the stream has no timestamps
    width: int
    height: int
    boxes: list[textdet.TextBox] | None = None  # the text detector
    outputs: dict[str, Any] | None = None  # a user model: per output shape, min, max (argmax)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "pts": self.pts, "time": self.time, "width": self.width,
                             "height": self.height}
        if self.boxes is not None:
            d["boxes"] = [{"points": [[int(x), int(y)] for x, y in b.points], "score": round(b.score, 4)}
                          for b in self.boxes]
        if self.outputs is not None:
            d["outputs"] = self.outputs
        return d


@dataclass
class RunResult:
    """What one run measured. Stage times are seconds summed over frames."""

    video: str
    model: str
    device: str
    width: int
    height: int
    input_size: tuple[int, int] | None
    frames: int = 0
    wall: float = 0.0
    compile: float = 0.0
    decode: float = 0.0
    map: float = 0.0
    infer: float = 0.0
    copies: int = 0
    bytes_copied: int = 0
    output_bytes: int = 0
    copy_records: list[Any] = field(default_factory=list)
    boxes: dict[int, list[textdet.TextBox]] = field(default_factory=dict)
    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    last_image: np.ndarray | None = None
    # per frame (index -> (pts, time, width, height)), filled by the decode loop before the frame's request starts
    frame_info: dict[int, tuple[int | None, float | None, int, int]] = field(default_factory=dict)
    declared_frames: int = 0  # as the container says (0: unknown)
    decode_errors: int = 0  # packets the decoder refused (skipped)
    sizes: list[tuple[int, int, int]] = field(default_factory=list)  # (first frame index, width, height) per size
    converted: dict[str, str] = field(default_factory=dict)  # pixel formats converted with allow_copy -> to what
    warnings: list[str] = field(default_factory=list)
    # CLOCK_MONOTONIC seconds (one clock for every process of the host) when the timed run started and ended, its
    # first compile included: runs in several processes are compared over the span they shared
    started: float = 0.0
    ended: float = 0.0
    # CLOCK_MONOTONIC (start, end) of each compile inside that span (a new layout's), which fps and stage times leave out
    compile_spans: list[tuple[float, float]] = field(default_factory=list)
    # decoded on NVDEC and pre-processed on the GPU (--nvdec): ``decode`` is then the loop's wait for the thread that
    # does both ahead, and ``infer`` includes waiting for a frame's kernel to end
    nvdec: bool = False
    # time.monotonic() when each frame's request completed, in the order they completed (where the outputs go to
    # a result thread: text boxes, callbacks), before its post-processing: throughput without the result thread's lag
    completed_at: list[float] = field(default_factory=list)
    # processes that made the text boxes (interop.postpool; 0: a thread of this process), and the CPU seconds they used
    post_processes: int = 0
    post_cpu: float = 0.0

    def result(self, i: int) -> FrameResult:
        """Frame ``i``'s results (the text boxes or the output summary, in the frame's coordinates)."""
        pts, t, w, h = self.frame_info.get(i, (None, None, self.width, self.height))
        fr = FrameResult(i, pts, t, w, h)
        if i in self.boxes:
            fr.boxes = self.boxes[i]
        elif i in self.outputs:
            fr.outputs = self.outputs[i]
        return fr

    def results(self) -> list[FrameResult]:
        """Every frame's results, in order."""
        return [self.result(i) for i in range(self.frames)]

    @property
    def fps(self) -> float:
        return self.frames / self.wall if self.wall > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "frames": self.frames, "fps": round(self.fps, 3), "copies": self.copies, "bytes_copied": self.bytes_copied,
            "output_bytes": self.output_bytes, "device": self.device, "model": self.model,
            "stages": {"decode": round(self.decode, 6), "map": round(self.map, 6), "infer": round(self.infer, 6)},
            "wall_s": round(self.wall, 6), "compile_s": round(self.compile, 6),
            "monotonic_s": [round(self.started, 6), round(self.ended, 6)], "video": self.video,
            "size": [self.width, self.height], "input_size": list(self.input_size) if self.input_size else None,
            "warnings": list(self.warnings), "nvdec": self.nvdec,
            "post_processes": self.post_processes,
        }
        # One entry per input stream (one today; the schema is ready for several): docs/run.md documents it.
        d["streams"] = [{
            "input": self.video, "frames": self.frames, "declared_frames": self.declared_frames or None,
            "decode_errors": self.decode_errors, "sizes": [{"width": w, "height": h, "from_frame": first} for first, w, h in self.sizes],
            "converted": dict(self.converted), "warnings": list(self.warnings),
            "results": [r.to_json() for r in self.results()],
        }]
        if self.boxes:
            counts = [len(self.boxes.get(i, [])) for i in range(self.frames)]
            last = self.boxes.get(self.frames - 1, [])
            d["detections"] = {"boxes_total": int(sum(counts)), "frames_with_text": int(sum(c > 0 for c in counts)),
                               "boxes_per_frame_mean": round(float(np.mean(counts)) if counts else 0.0, 3),
                               "last_frame": [list(b.bbox) + [round(b.score, 3)] for b in last]}
        elif self.outputs:
            d["outputs"] = self.outputs.get(self.frames - 1, {})
        return d


_CONVERT_HINT = re.compile(r"[.:;]?\s*(e\.g\.\s*)?convert the frame first.*$", re.IGNORECASE | re.DOTALL)


def _summary(out: dict[Any, np.ndarray]) -> dict[str, Any]:
    """A readable line about a generic model's outputs (shape, range, argmax)."""
    s: dict[str, Any] = {}
    for k, v in out.items():
        e: dict[str, Any] = {"shape": list(v.shape), "min": float(v.min()), "max": float(v.max())}
        if v.ndim >= 1 and v.size and v.size == v.shape[-1] * (v.size // v.shape[-1]) and v.ndim <= 2:
            e["argmax"] = int(np.argmax(v.reshape(-1, v.shape[-1])[0]))
        s[str(k)] = e
    return s


_TEXT_MEDIA = (b"#EXTM3U", b"v=0", b"ffconcat", b"[playlist]")  # text formats FFmpeg opens as media (HLS, SDP...)


def _is_text(head: bytes) -> bool:
    """Looks like plain text (FFmpeg's tty demuxer would 'decode' it as ANSI art, a video of a text screen)."""
    if not head or head.lstrip().startswith(_TEXT_MEDIA):
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a character cut at the end of the sample
            return False
    return not any(c < 9 or 13 < c < 32 or c == 127 for c in head)


def _sniff(path: str) -> str:
    """Why FFmpeg could not open ``path``, from its first and last bytes: the one-line reason a user can act on."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(4096)
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    if head[4:8] == b"ftyp":  # an MP4/MOV: FFmpeg reads it only with its index (the moov atom)
        if b"moov" not in head and b"moov" not in tail:
            return ("is an MP4/MOV without its index (no moov atom): the recording was not finished or the file was "
                    "cut; it cannot be decoded as it is (re-record it, or rebuild the index with a repair tool)")
        return "is an MP4/MOV that FFmpeg cannot parse (damaged): re-encode or re-download it"
    return "is not a media file FFmpeg recognises (or is damaged at its start): give a video file"


def open_video(path: str, nvdec: bool = False) -> Any:
    """Open a video with PyAV: (container, stream). Every unreadable input is one VideoInputError saying why.
    ``nvdec``: decode on NVDEC, frames kept on the GPU (``interop.cuda.open_nvdec``)."""
    from .backends import require

    av = require("av", "FFmpeg", "ffmpeg")
    if os.path.isdir(path):
        raise VideoInputError(f"video {path!r} is a directory: give a video file in it (or none, for the bundled clip)")
    if not os.path.exists(path):
        raise VideoInputError(f"video {path!r} not found: give a video file path (or none, for the bundled clip)")
    if not os.path.isfile(path):
        raise VideoInputError(f"video {path!r} is not a regular file (a device or pipe?): give a video file")
    if not os.access(path, os.R_OK):
        raise VideoInputError(f"video {path!r} is not readable by this user: fix its permissions")
    if os.path.getsize(path) == 0:
        raise VideoInputError(f"video {path!r} is empty (0 bytes): the file was not written; give a video file")
    with open(path, "rb") as f:
        if _is_text(f.read(4096)):
            raise VideoInputError(f"video {path!r} is a text file, not a video: give a video file (mp4, mkv, ts, "
                                  f"webm...)")
    try:
        container = _open_nvdec(path) if nvdec else av.open(path)
    except av.error.FFmpegError as e:  # type: ignore[attr-defined]
        raise VideoInputError(f"video {path!r} {_sniff(path)} (FFmpeg: {getattr(e, 'strerror', None) or e})") from e
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams})
        container.close()
        raise VideoInputError(f"{path!r} has no video stream (it has {', '.join(kinds) or 'no streams'}): "
                              f"give a file with video in it")
    stream = container.streams.video[0]
    if nvdec:
        if getattr(stream.codec_context, "is_hwaccel", True) is False:  # PyAV fell back to software decoding
            name = stream.codec_context.name
            container.close()
            raise UnsupportedFormatError(f"NVDEC cannot decode {path!r} ({name}): leave --nvdec out to decode it on "
                                         f"the CPU")
    else:  # NVDEC decodes the pictures: FFmpeg's threads would only parse ahead
        stream.thread_type = "AUTO"  # frame + slice threads: the decoder's own fastest mode for long clips
    return container, stream


def _open_nvdec(path: str) -> Any:
    """``av.open`` on NVDEC; a file NVDEC cannot take (its codec, profile or size) is refused with advice."""
    import av
    from av.codec.hwaccel import hwdevices_available

    from .cuda import open_nvdec

    if "cuda" not in hwdevices_available():
        raise BackendUnavailableError("this PyAV's FFmpeg has no CUDA (NVDEC) hardware decoding: install a PyAV built "
                                      "with CUDA (the PyPI wheels are), or leave --nvdec out", backend="cuda")
    try:
        return open_nvdec(path)
    except BackendUnavailableError as e:
        raise BackendUnavailableError(f"{e}: --nvdec decodes on an NVIDIA GPU; leave it out to decode on the CPU",
                                      backend="cuda") from e
    except av.error.FFmpegError as e:  # type: ignore[attr-defined]
        try:
            av.open(path).close()  # the file itself opens: NVDEC is what refused it
        except av.error.FFmpegError:  # type: ignore[attr-defined]
            raise e from None
        raise UnsupportedFormatError(f"NVDEC cannot decode {path!r} (FFmpeg: {getattr(e, 'strerror', None) or e}): "
                                     f"run without --nvdec to decode it on the CPU") from e


class _Decoded:
    """Frames of ``stream``, decoded packet by packet so that a damaged packet is counted and skipped (FFmpeg's own
    iterator stops the whole video at the first one). ``nvdec``: NVDEC refusing a stream (its profile, bit depth or
    chroma format) refuses every packet: NVDEC_REFUSED packets refused in a row before any frame (or a stream that
    ends so) are raised as that, not counted as damage."""

    NVDEC_REFUSED = 16

    def __init__(self, container: Any, stream: Any, nvdec: bool = False):
        self.errors = 0
        self._nvdec = nvdec
        self._it = self._frames(container, stream)

    def _frames(self, container: Any, stream: Any) -> Iterator[Any]:
        import av

        first = self._nvdec
        refused: Exception | None = None
        for packet in container.demux(stream):  # the last packet is empty: it flushes the decoder's delayed frames
            try:
                frames = packet.decode()
            except av.error.FFmpegError as e:  # type: ignore[attr-defined]
                self.errors += 1
                log.debug("packet at pts %s failed to decode: %s", packet.pts, e)
                refused = e
                if first and self.errors >= self.NVDEC_REFUSED:
                    break
                continue
            if frames:
                first = False
            yield from frames
        if first and refused is not None:
            raise UnsupportedFormatError(
                f"NVDEC cannot decode this {stream.codec_context.name} stream (FFmpeg, on every packet: "
                f"{getattr(refused, 'strerror', None) or refused}): leave --nvdec out to decode it on the CPU")

    def __iter__(self) -> Iterator[Any]:
        return self._it

    def __next__(self) -> Any:
        return next(self._it)


#: an input written ``gst:PIPELINE`` is decoded by GStreamer (the pipeline ends in an appsink), not by PyAV
GST_PREFIX = "gst:"
#: seconds a GStreamer input may go without a frame, EOS or error before the run fails as stalled
GST_TIMEOUT = 10.0
NANOSECONDS = Fraction(1, 1_000_000_000)


def is_gst_input(video: str | None) -> bool:
    return isinstance(video, str) and video.startswith(GST_PREFIX)


#: threads of the run's PyAV decoder at most. The decoder shares the cores with the inference streams, which keep
#: every core busy: the scheduler shares CPU time per thread, so a decoder of too few threads falls behind the model
#: (the run loop then waits on it), while FFmpeg's own default (one thread per core) takes time the streams need.
#: A decode worker of a multi-stream run decodes one of several streams: WORKER_DECODE_THREADS.
DECODE_THREADS = 8
WORKER_DECODE_THREADS = 4


def run_decoder_threads(stream: Any, threads: int | None = None) -> None:
    """Give ``stream``'s decoder the threads ``interop run`` decodes with (before its first packet): ``threads``, by
    default DECODE_THREADS, never more than the machine's CPUs."""
    stream.codec_context.thread_count = max(1, min(threads or DECODE_THREADS, os.cpu_count() or 1))


class _Input:
    """A run's frames: PyAV's decoder over a file, or a GStreamer pipeline (``gst:...``). The loop reads frames
    through ``it`` and their ``format.name``, ``width``, ``height`` and ``pts`` (in ``time_base`` units), which PyAV's
    VideoFrames and interop's GST Frames both have; ``errors`` counts the packets skipped as damaged."""

    width = height = declared = 0
    time_base: Any = None
    convertible = True  # pixel formats the model cannot take may be converted (allow_copy) by PyAV
    memory_type: MemoryType | None = None  # where the decoder leaves frames: CUDA for NVDEC (None: host memory)

    def __init__(self, video: str, decode_threads: int | None = None, nvdec: bool = False):
        self.video = video
        self._gst: Any = None
        self._ahead: _Ahead | None = None
        self._closed = False
        if is_gst_input(video):
            if nvdec:
                raise RunArgumentError("--nvdec decodes files with PyAV; a gst: pipeline decodes in GStreamer: "
                                       "leave one out")
            self._open_gst(video[len(GST_PREFIX):])
        else:
            self.container, self.stream = open_video(video, nvdec)
            if nvdec:  # CUDA frames, pre-processed on the GPU by the Inference (no conversion by PyAV)
                self.memory_type, self.convertible = MemoryType.CUDA, False
            else:
                run_decoder_threads(self.stream, decode_threads)
            cc = self.stream.codec_context
            self.width, self.height, self.declared = cc.width, cc.height, int(self.stream.frames or 0)
            self.time_base = self.stream.time_base
            self._decoded = _Decoded(self.container, self.stream, nvdec)
            self.it: Iterator[Any] = iter(self._decoded)

    def _open_gst(self, description: str) -> None:
        from .elements import frames

        if not description.strip():
            raise VideoInputError("gst: needs a GStreamer pipeline after it, e.g. 'gst:filesrc location=clip.mp4 ! "
                                  "qtdemux ! h264parse ! avdec_h264 ! appsink'")
        self.convertible = False
        self.time_base = NANOSECONDS
        self._gst = frames(description, timeout=GST_TIMEOUT)
        try:
            first = next(self._gst, None)  # the size decides the model's input size, as the container's header does
        except InteropError as e:
            better = _gst_input_error(description, e)
            if better is None:
                raise
            raise better from e
        if first is None:
            self._gst.close()
            raise VideoInputError(f"the GStreamer pipeline {description!r} ended without giving a frame")
        self.width, self.height = first.width, first.height
        self.it = itertools.chain([first], self._gst)

    def stop_ahead(self) -> None:
        """Stop the thread that prepares frames ahead, if there is one (close() does it too)."""
        if self._ahead is not None:
            self._ahead.close()

    def prepare_ahead(self, prepare: Callable[[Any], Any], limit: int | None = None) -> None:
        """Decode and ``prepare`` each frame (at most ``limit``) on a thread of their own, ahead of the loop, which then
        gets (frame, its model input) pairs (``--nvdec``: the Inference's GPU pre-processing). Returns once the first
        pair is made: its one-off start-up (the GPU's context, the kernel's compile, the decoder) is not the run's."""
        self._ahead = _Ahead(iter(self._decoded), prepare, limit)
        self._ahead.start()
        self._ahead.first()
        self.it = self._ahead

    @property
    def is_gst(self) -> bool:
        return self._gst is not None

    @property
    def errors(self) -> int:
        return 0 if self._gst is not None else self._decoded.errors

    def bgr(self, frame: Any) -> np.ndarray:
        """The frame as a BGR image (for --save: a copy, made after the timed run)."""
        if self._gst is not None:
            return gst_bgr(frame)
        if self.memory_type is MemoryType.CUDA:
            return cuda_bgr(frame)
        return frame.to_ndarray(format="bgr24")  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._gst is not None:
            self._gst.close()
        elif not self._closed:
            try:
                if self._ahead is not None:
                    self._ahead.close()  # returns once its thread ended, even past a Ctrl-C (raised after)
            finally:
                self._closed = True
                self.container.close()


class _Ahead:
    """(frame, prepare(frame)) pairs made on a thread of their own, up to DEPTH ahead of the loop. NVDEC decoding and
    the GPU pre-processing wait for the GPU on every frame, and on a machine whose cores all run the network a thread
    that waited gets the GIL and a core back late: doing them ahead takes those waits off the loop that keeps the
    requests busy (FFmpeg's own threads do this for software decoding).

    Whoever holds it must ``close()`` it before the container closes: close returns only once the thread has ended
    (a Ctrl-C meanwhile is raised after), so the decoder is never used after the container is gone."""

    DEPTH = 8  # Inference.GPU_INPUTS_AHEAD keeps host buffers for these
    _END = object()
    NEVER_STARTED_S = 1.0  # a thread with no id this long after start() was called never ran (start was interrupted)

    def __init__(self, frames: Iterator[Any], prepare: Callable[[Any], Any], limit: int | None = None):
        self._frames = frames
        self._prepare = prepare
        self._limit = limit
        self._peeked: list[Any] = []
        self._q: queue.Queue[Any] = queue.Queue(self.DEPTH)
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._launched: float | None = None
        self._thread = threading.Thread(target=self._work, name="interop-decode-ahead", daemon=True)

    def start(self) -> None:
        """Start the thread (held by its owner first, so that an interrupted start is still closed)."""
        self._launched = time.monotonic()
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        n = 0
        try:
            while not self._stop.is_set() and (self._limit is None or n < self._limit):
                try:
                    vf = next(self._frames)
                except StopIteration:
                    break
                n += 1
                if not self._put((vf, self._prepare(vf))):
                    return
            self._put(self._END)
        except BaseException as e:  # noqa: BLE001 - handed to the loop, which raises it
            self._put(e)
        finally:
            self._finished.set()

    def __iter__(self) -> Iterator[Any]:
        return self

    def first(self) -> None:
        """Wait for the first item (kept for the loop's first next()): raises the worker's error if there is one."""
        try:
            self._peeked.append(next(self))
        except StopIteration:  # no frame at all: the loop's first next() says so
            pass

    def __next__(self) -> Any:
        if self._peeked:
            return self._peeked.pop()
        if self._stop.is_set():
            raise StopIteration
        item = self._q.get()
        if item is self._END:
            self._stop.set()
            raise StopIteration
        if isinstance(item, BaseException):
            self._stop.set()
            raise item
        return item

    def close(self) -> None:
        """Stop the thread, wait for it to end, and drop what it made, each model input once the GPU is done with it
        (its kernel may still read the frame and write the buffer). A Ctrl-C while waiting is raised once it ended."""
        self._stop.set()
        interrupted: BaseException | None = None
        while True:
            try:
                self._drop(self._peeked)
                self._drain()
                if self._launched is None or self._finished.is_set() or self._never_ran():
                    break
                self._finished.wait(0.05)
            except KeyboardInterrupt as e:  # the thread still decodes: the container must outlive it
                interrupted = e
        try:
            self._drain()
        finally:
            if interrupted is not None:
                raise interrupted

    def _never_ran(self) -> bool:
        return (self._thread.ident is None and self._launched is not None
                and time.monotonic() - self._launched > self.NEVER_STARTED_S)

    def _drain(self) -> None:
        items = []
        while True:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                break
        self._drop(items)

    @staticmethod
    def _drop(items: list[Any]) -> None:
        while items:
            item = items.pop()
            wait = getattr(item[1], "wait", None) if type(item) is tuple else None
            if wait is not None:
                try:
                    wait()
                except InteropError as e:  # a failed kernel: the run's own error says more; this one is logged
                    log.warning("a pre-processed frame dropped at the end of the run: %s", e)


_SINK_LINK = re.compile(r"could not link (\S+) to appsink\d*")


def cuda_bgr(vf: Any) -> np.ndarray:
    """An NVDEC frame (NV12 or P010 on the GPU, or a CUDA Frame of them) as a BGR image: downloaded (a copy, counted)
    and converted with the frame's own matrix and range (chroma repeated at full size), every row and column kept.
    For --save, after the timed run."""
    import interop

    from .inference._preprocess import color_matrix

    f = interop.map(vf, MemoryType.CPU, allow_copy=True)
    y, uv = (np.asarray(t) for t in f.tensors[:2])
    w, h = f.width, f.height
    to8 = 1.0 if y.dtype == np.uint8 else 1 / 256  # P010: 10 bits in the high bits of 16
    m, bias = color_matrix("yuv", f.colorspace, f.color_range, False, to8)  # rows B, G, R
    luma = y[:h, :w].astype(np.float32)
    chroma = uv[: -(-h // 2), : -(-w // 2)].astype(np.float32).repeat(2, 0).repeat(2, 1)[:h, :w]
    bgr = luma[..., None] * m[:, 0] + chroma[..., :1] * m[:, 1] + chroma[..., 1:] * m[:, 2] + bias
    return np.clip(bgr + 0.5, 0, 255).astype(np.uint8)


def _gst_input_error(description: str, e: InteropError) -> InteropError | None:
    """What the first frame's failure ``e`` means for a run's pipeline, where the library's own message speaks of
    buffers and wrap calls; None to keep ``e``."""
    from .elements import PipelineError
    from .tensors import gst

    link = _SINK_LINK.search(str(e))
    if isinstance(e, PipelineError) and link:  # the appsink appended after a sink of the user's
        return PipelineError(f"the GStreamer pipeline {description!r} ends in {link.group(1)}, which passes nothing "
                             f"on: end the pipeline in appsink (or leave the sink out: one is appended)")
    if isinstance(e, InvalidTensorError) and str(e).startswith(gst.NO_LAYOUT):  # no caps, no video meta
        return VideoInputError(f"the GStreamer pipeline {description!r} gives no raw video (its buffers carry no "
                               f"video caps): end it in decoded video/x-raw, e.g. '... ! decodebin ! "
                               f"{gst.CONVERT_CAPS} ! appsink'")
    return None


def gst_bgr(frame: Any) -> np.ndarray:
    """A GST frame (I420, NV12, BGR/RGB...) as a BGR image: read through a CPU mapping, converted by OpenCV (copies)."""
    import cv2

    import interop
    from interop import FrameFormat, MemoryType

    c: Any = interop.map(frame, MemoryType.CPU)
    with c:
        w, h = c.width, c.height
        planes = [np.asarray(t) for t in c.tensors]
        fmt = c.format
        if fmt in (FrameFormat.I420, FrameFormat.YV12) and w % 2 == 0 and h % 2 == 0:
            img = np.concatenate([planes[0][:h, :w].reshape(-1), planes[1].reshape(-1) if planes[1].flags.c_contiguous
                                  else np.ascontiguousarray(planes[1]).reshape(-1),
                                  np.ascontiguousarray(planes[2]).reshape(-1)]).reshape(h * 3 // 2, w)
            code = cv2.COLOR_YUV2BGR_I420 if fmt is FrameFormat.I420 else cv2.COLOR_YUV2BGR_YV12
            return np.asarray(cv2.cvtColor(img, code))
        if fmt is FrameFormat.NV12 and w % 2 == 0 and h % 2 == 0:
            img = np.concatenate([np.ascontiguousarray(planes[0]).reshape(-1),
                                  np.ascontiguousarray(planes[1]).reshape(-1)]).reshape(h * 3 // 2, w)
            return np.asarray(cv2.cvtColor(img, cv2.COLOR_YUV2BGR_NV12))
        if fmt is FrameFormat.BGR:
            return np.ascontiguousarray(planes[0])
        if fmt is FrameFormat.RGB:
            return np.asarray(cv2.cvtColor(np.ascontiguousarray(planes[0]), cv2.COLOR_RGB2BGR))
        if fmt in (FrameFormat.BGRX, FrameFormat.BGRA):
            return np.ascontiguousarray(planes[0][..., :3])
        if fmt is FrameFormat.GRAY8:
            return np.asarray(cv2.cvtColor(np.ascontiguousarray(planes[0]), cv2.COLOR_GRAY2BGR))
    raise UnsupportedFormatError(f"--save cannot draw a {fmt.name} {w}x{h} GStreamer frame: end the pipeline with "
                                 f"'videoconvert ! video/x-raw,format=I420 ! appsink' (even sizes)")


#: the list of formats in Inference's refusal of a frame's pixel format (FFmpeg's and interop's names, mixed)
_TAKES = re.compile(r"it takes [^.;]*")
#: the list of pixel formats in FFmpeg's wrapper's refusal of a frame
_SUPPORTED = re.compile(r"supported: ([^.;]*)")
#: Inference's refusal of a frame's pixel format (a frame interop could wrap, in a format the model cannot take)
_REFUSAL = re.compile(r"cannot take \S+ frames without a copy")


def _model_formats(names: dict[str, Any]) -> str:
    """The names (FFmpeg's or GStreamer's: ``names`` maps each to its FrameFormat) of the formats Inference takes
    without a copy, sorted."""
    from .inference._preprocess import supported_formats

    ok = set(supported_formats())
    return ", ".join(sorted(n for n, f in names.items() if f in ok))


def _supported_message(e: Exception, fmt: str) -> str:
    """``e`` (a refusal of pixel format ``fmt``) with the way round it that ``interop run`` offers instead of the
    Python-only hint (``frame.reformat()``), and the formats the model takes in FFmpeg's names."""
    from .tensors.ffmpeg import PIXEL_FORMATS

    reason = _CONVERT_HINT.sub("", str(e)).rstrip(" .:;")
    reason = re.sub(r"\s*Pass allow_copy=True to Inference.*$", "", reason).rstrip(" .:;")
    reason = _TAKES.sub(lambda _: f"it takes {_model_formats({n: f for n, (f, _) in PIXEL_FORMATS.items()})}", reason)
    reason = _SUPPORTED.sub(lambda m: f"supported: {', '.join(sorted(m.group(1).split(', ')))}", reason)
    return (f"{reason}. Run with --allow-copy (CLI) or allow_copy=True (interop.pipeline.run) to convert each "
            f"{fmt} frame to {CONVERT_TO} before the model: one counted copy per frame")


def _about_format(e: Exception, fmt: str) -> bool:
    """Whether refusal ``e`` of a frame in pixel format ``fmt`` is about that format (FFmpeg's wrapper listing what it
    maps, Inference's 'cannot take ... frames without a copy', or the format named), not about the model."""
    text = str(e)
    return bool(_REFUSAL.search(text) or _SUPPORTED.search(text) or fmt in text)


def _gst_refusal(fmt: Any) -> UnsupportedFormatError:
    """Inference's refusal of a GStreamer frame of FrameFormat ``fmt``, in GStreamer's names, with the way
    round it: a GStreamer input is converted in its pipeline (allow_copy converts only what PyAV decodes)."""
    from .tensors.gst import CONVERT_CAPS, GST_FORMAT_NAMES, GST_FORMATS

    name = GST_FORMAT_NAMES.get(fmt, getattr(fmt, "name", str(fmt)))
    return UnsupportedFormatError(
        f"the model cannot take GStreamer {name} frames; it takes {_model_formats(GST_FORMATS)}. Convert in the "
        f"pipeline: end it with '{CONVERT_CAPS} ! appsink' (GStreamer copies each frame there)")


def _converted(vf: Any, res: RunResult | None = None) -> Any:
    """``vf`` converted to CONVERT_TO, the copy recorded in the copy meter (it is a copy, and the run says so) and,
    given ``res``, in that stream's own ``copies`` (the meter counts every thread's copies)."""
    out = vf.reformat(format=CONVERT_TO)
    w, h = out.width, out.height
    nbytes = w * h + 2 * (-(-w // 2)) * (-(-h // 2))
    record_copy(convert_record(vf.format.name), nbytes)
    if res is not None:
        res.copies += 1
        res.bytes_copied += nbytes
    return out


def convert_record(fmt: str) -> str:
    """The copy meter's name for the allow_copy conversion of ``fmt`` frames."""
    return f"reformat {fmt}->{CONVERT_TO} (allow_copy)"


class _ResultWorker:
    """Turns outputs into results (text boxes, the caller's on_result/on_progress) on threads of their own. A request's
    callback runs on an OpenVINO thread (with the CPU plugin, one thread takes every completion) and the request is
    not reused until it returns: a callback that only queues the outputs takes the next completion at once, where
    making boxes there would hold every completion behind them (on the Xeon, boxes made in the callback read the same
    as this thread, inside the spread: git log cbb42b5). ``threads`` threads may take from the one queue, but the run
    uses one: every OpenCV call of the post-processing releases the GIL and takes it back, and more threads wanting it
    gained nothing when measured (``bench/xeon_pipeline.sh``). ``close()`` waits for every queued result and re-raises
    the first error."""

    BACKLOG = 64  # outputs queued at most
    THREADS = 1  # the default number of threads; never more than the machine's CPUs

    def __init__(self, work: Any, threads: int | None = None):
        self._work = work
        # bounded: a worker slower than the device (a fast NPU) makes the callbacks wait, not memory grow
        self._queue: queue.Queue[tuple[Any, int] | None] = queue.Queue(maxsize=self.BACKLOG)
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        n = threads or max(1, min(self.THREADS, os.cpu_count() or 1))
        self._threads = [threading.Thread(target=self._loop, name=f"interop-run-results-{k}", daemon=True)
                         for k in range(n)]
        for t in self._threads:
            t.start()

    def put(self, outputs: Any, i: int) -> None:
        if not self._closed:  # requests still running after a failed run are dropped, never left waiting
            self._queue.put((outputs, i))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:  # after an error the rest is drained, not worked on
                try:
                    self._work(*item)
                except BaseException as e:  # noqa: B036 - re-raised by close() on the caller's thread
                    with self._error_lock:
                        if self._error is None:
                            self._error = e

    def drain(self) -> None:
        """Wait for every queued result and raise the first error (the threads stop: BoxProcesses' drain keeps its
        processes, this worker has nothing worth keeping)."""
        self.close()

    def close(self, raise_error: bool = True) -> None:
        self._closed = True
        alive = [t for t in self._threads if t.is_alive()]
        for _ in alive:  # one stop mark per thread: each takes one and ends
            self._queue.put(None)
        for t in alive:
            t.join()
        err, self._error = self._error, None
        if err is not None and raise_error:
            raise err


#: ``run(nvdec=True, post_processes=None)`` makes the text boxes in processes of their own on machines with this many
#: CPUs or more
POST_PROCESSES_FROM_CPUS = 8


def _post_processes(post_processes: int | None, nvdec: bool) -> int:
    """How many post-processing processes a single-stream run of the text detector uses (0: boxes on a thread)."""
    if post_processes is None:
        from .postpool import default_processes

        # With --nvdec the host's cores run the network and have room for the processes, and the GIL is wanted by
        # the thread that decodes and pre-processes ahead, the loop and OpenVINO's completions: boxes on a thread
        # would hold it. On the CPU path the cores are the limit: processes would cost more CPU than a thread.
        return default_processes() if nvdec and (os.cpu_count() or 1) >= POST_PROCESSES_FROM_CPUS else 0
    cpus = os.cpu_count() or 1
    if isinstance(post_processes, bool) or not isinstance(post_processes, int) or not 0 <= post_processes <= cpus:
        raise RunArgumentError(f"post_processes is a number of processes from 0 (the text boxes on a thread) to the "
                               f"machine's {cpus} CPUs, or None (chosen by the path and the CPUs), not "
                               f"{post_processes!r}")
    return post_processes


def _stamped(put: Callable[[Any, int], None], completed_at: list[float]) -> Callable[[Any, int], None]:
    """The requests' callback (OpenVINO's thread): note when the request completed, then queue its outputs."""
    now = time.monotonic

    def callback(outputs: Any, i: int) -> None:
        completed_at.append(now())
        put(outputs, i)

    return callback


@contextlib.contextmanager
def _opencv_single_threaded(on: bool) -> Iterator[None]:
    """OpenCV without its thread pool for the block (then as it was). The run's parallelism is OpenVINO's streams;
    the text-box post-processing makes a few small OpenCV calls per frame, and OpenCV's pool threads spin after
    each one, on cores the inference streams need, without making the calls faster."""
    if not on:
        yield
        return
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


def run(video: str | None = None, model: str | None = None, device: str | None = None, frames: int | None = None,
        precision: str | None = None, keep_last: bool = False, input_size: tuple[int, int] | None = None,
        postprocess: bool = True, allow_copy: bool = False, *,
        on_progress: Callable[[int, int | None], None] | None = None,
        on_result: Callable[[FrameResult], None] | None = None, model_input: ModelInput | None = None,
        nvdec: bool = False, post_processes: int | None = None) -> RunResult:
    """Decode -> map -> infer over a video; returns the measurements (see RunResult). Writes nothing to
    stdout/stderr: warnings go to the ``interop`` logger (and ``RunResult.warnings``), progress and results to the
    callbacks.

    Every frame's results are in that frame's own coordinates: when the size changes mid-stream, the model (whose
    input size is fixed by the first frame) gets the new frames resized by its own pre-processing, and the boxes
    are scaled to each frame's width and height; the change is logged once. A pixel format the model cannot take
    raises UnsupportedFormatError, unless ``allow_copy``: then such frames are converted to yuv420p, each
    conversion counted in the copy meter (``copies``). Damaged packets are skipped and counted; a stream that ends
    before the frame count its container declares is logged (warnings also in ``RunResult.warnings``).
    ``postprocess=False`` skips turning outputs into results (text boxes; done on a thread of their own, see
    _ResultWorker) (benchmarks). ``nvdec=True`` decodes on NVDEC and pre-processes each frame on the GPU, straight
    into the host memory the model reads (docs/cuda.md): the host's CPU runs the network and little else.
    ``post_processes``: the text detector's boxes are made in that many processes of their own (``interop.postpool``;
    each map copied once into their shared memory, counted in ``output_bytes``), 0: on a thread of this process;
    None (the default): in ``default_processes()`` processes with ``nvdec`` on machines of POST_PROCESSES_FROM_CPUS
    CPUs or more, else on a thread (``RunResult.post_processes`` says which).

    ``on_progress(done, total)`` is called once with ``done=0`` before the first frame, then after each frame's
    result is made; ``total`` is the number of frames expected (the container's count, capped by ``frames``) or None
    when unknown. ``on_result(FrameResult)`` gets each frame's result as it is made, in the order the requests
    finish (not always frame order). Both run on the result thread (with the boxes in processes, the thread that
    takes them back), not the caller's: keep them short (a slow one holds the inference back), and an exception in
    one fails the run.
    """
    path = video or _default_clip()
    if nvdec:
        device = _nvdec_device(device)
    nprocs = _post_processes(post_processes, nvdec)  # checked whatever the run (only the text boxes use processes)
    if not postprocess or model is not None:
        nprocs = 0
    src = _Input(path, nvdec=nvdec)
    inf: Any = None
    worker: _ResultWorker | BoxProcesses | None = None
    last_vf = None
    ok = False
    try:
        if nprocs:  # started first: the processes import OpenCV while the model compiles
            _check_detector_size(input_size)
            worker = BoxProcesses(textdet.map_pixels(input_size), nprocs)
        inf, model_name, size = _make_inference(model, device, precision, input_size, src.width, src.height,
                                                model_input)
        if nvdec and inf.memory_type is not MemoryType.OPENVINO:
            raise RunArgumentError(_NVDEC_HOST.format(inf.device))
        if nvdec:
            src.prepare_ahead(inf.gpu_preprocess, frames)
        res = RunResult(path, model_name, inf.device, src.width, src.height, size, declared_frames=src.declared,
                        nvdec=nvdec)
        total = src.declared or None
        if frames is not None:
            total = min(total, frames) if total else frames
        res.post_processes = nprocs
        if isinstance(worker, BoxProcesses):  # the caller's callbacks after each frame's boxes
            worker.attach(res, _result_handler(res, True, False, on_progress, on_result, total))
        else:
            handle = _result_handler(res, model is None, postprocess, on_progress, on_result, total)
            worker = _ResultWorker(handle) if handle is not None else None
        callback = None if worker is None else _stamped(worker.put, res.completed_at)
        if on_progress is not None:
            on_progress(0, total)
        procs = worker if isinstance(worker, BoxProcesses) else None
        with copy_meter() as meter, _opencv_single_threaded(postprocess and model is None and procs is None):
            timer, last_vf = _frame_loop(src, inf, res, callback, frames, allow_copy,
                                         drain=None if worker is None else worker.drain,
                                         views=procs is not None, check=procs.check if procs else None)
        ok = True
    except BaseException:
        # A run stopped by an error or Ctrl-C: the thread making frames ahead stops first; requests still running
        # end here (their results going to the worker, before it stops), and OpenVINO's request threads stop now,
        # as after a run that finished
        try:
            src.stop_ahead()
        finally:
            if inf is not None:
                inf.close()
        raise
    finally:
        if worker is not None:
            worker.close(raise_error=False)  # stopped on every path (after an error of the run's own, quietly)
        if not ok or not keep_last or last_vf is None:
            src.close()
    res.decode, res.map, res.infer, res.compile, res.wall = timer.decode, timer.map, timer.infer, timer.compile, timer.wall
    res.started, res.ended, res.compile_spans = timer.started, timer.ended, timer.compile_spans
    res.copies, res.bytes_copied, res.copy_records = meter.copies, meter.bytes, meter.records
    res.output_bytes = inf.output_bytes
    if isinstance(worker, BoxProcesses):
        res.output_bytes += worker.pool.bytes_copied
        res.post_cpu = worker.cpu_seconds()
    res.decode_errors = src.errors
    inf.close()  # stop OpenVINO's request threads now, not during interpreter teardown
    _damage_warnings(res, stopped_early=frames is not None and res.frames >= frames)
    if keep_last and last_vf is not None:
        try:
            res.last_image = src.bgr(last_vf)  # for --save only, after the timed run
        finally:
            src.close()
    return res


_NVDEC_HOST = ("--nvdec writes the model's input into host memory, which {} does not read as it is: run on the CPU "
               "(--device CPU) or GPU, or without --nvdec")


def _nvdec_device(device: str | None) -> str:
    """The device a --nvdec run infers on: the CPU unless told (the NPU, the default where there is one, imports
    host memory page by page), refused before anything is opened or compiled where it cannot read host tensors."""
    if device is None:
        return "CPU"
    # NPU, NPU.0, and the AUTO/HETERO/MULTI lists that may pick it (not those that leave it out: AUTO:-NPU)
    names = device.upper().split(":", 1)[-1].split(",")
    if any(n.strip().split(".")[0] == "NPU" for n in names):
        raise RunArgumentError(_NVDEC_HOST.format(device))
    return device


def _make_inference(model: str | None, device: str | None, precision: str | None,
                    input_size: tuple[int, int] | None, width: int, height: int,
                    model_input: ModelInput | None = None) -> tuple[Any, str, tuple[int, int] | None]:
    """The run's Inference: the text detector (``model`` None) or the user's model, fed as ``model_input`` says.
    Returns it, the model's name for the report, and the input size reported (the first frame's)."""
    from .inference import Inference

    if model is None and model_input is not None and model_input != ModelInput():
        raise RunArgumentError("--mean, --scale and --bgr (model_input) set the pre-processing of a --model of yours; "
                               "the text detector (the default model) has its own: leave them out, or give --model")
    mi = model_input or ModelInput()
    if model is None:
        from .inference import default_device

        _check_detector_size(input_size)
        config = textdet.compile_config(device or default_device(), precision)
        size = input_size or textdet.input_size_for(width, height)
        # without --input-size the detector runs at each frame's own aspect (a size change mid-stream)
        sizing = input_size or (lambda w, h: textdet.input_size_for(w, h))
        inf = Inference(textdet.model_path(), device, input_size=sizing, mean=textdet.MEAN, scale=textdet.SCALE,
                        rgb=textdet.RGB, config=config, requests=textdet.compile_requests(config))
        return inf, textdet.MODEL_NAME, size
    user_config = {"INFERENCE_PRECISION_HINT": precision} if precision else None
    check_model_file(model)
    inf = Inference(model, device, input_size=input_size, mean=mi.mean, scale=mi.scale, rgb=mi.rgb, config=user_config)
    return inf, inf.model_name, input_size


#: model files OpenVINO's read_model reads, by extension: IR, ONNX, PaddlePaddle, TensorFlow (frozen graph, text
#: graph, MetaGraph), TensorFlow Lite
MODEL_EXTENSIONS = (".xml", ".onnx", ".pdmodel", ".pb", ".pbtxt", ".meta", ".tflite")
#: of those, the binary (protobuf, flatbuffer) ones: a text file named so is not a model, and would reach the
#: TensorFlow frontend's text parser too
_BINARY_MODELS = (".onnx", ".pdmodel", ".pb", ".meta", ".tflite")
_READS = (f"OpenVINO reads {', '.join(MODEL_EXTENSIONS)} files (IR with its .bin, ONNX, PaddlePaddle, TensorFlow, "
          f"TensorFlow Lite)")


def check_model_file(model: Any) -> None:
    """Refuse a file that is no model before it is read: read_model hands a file it cannot place to every frontend in
    turn, and the TensorFlow one writes its parse errors to stderr. OpenVINO places ONNX and IR files by their content,
    whatever their name, so only these are refused (ModelFileError naming what it reads): an IR's weights (.bin), a
    text file named like a binary model, and a text file other than XML or a TensorFlow text graph under any other
    name. A missing path or a directory is left to Inference, which says which; an ov.Model passes."""
    if not isinstance(model, (str, os.PathLike)):
        return
    path = os.fsdecode(os.fspath(model))
    if not os.path.isfile(path):
        return
    ext = os.path.splitext(path)[1].lower()
    if ext == ".bin":
        raise ModelFileError(f"model file {path!r} is the weights of an OpenVINO IR: give its .xml (the .bin beside it "
                             f"is read with it); {_READS}")
    if ext in (".xml", ".pbtxt"):
        return
    with open(path, "rb") as f:
        head = f.read(4096)
    if not _is_text(head) or head.lstrip().startswith((b"<?xml", b"<net")):  # binary, or an IR by another name
        return
    what = f"text, not a {ext} model (a binary file)" if ext in _BINARY_MODELS else \
        f"a text file, not a model ({ext or 'no extension'})"
    raise ModelFileError(f"model file {path!r} is {what}: give the model itself; {_READS}")


def _check_detector_size(input_size: tuple[int, int] | None) -> None:
    """The text detector runs at sizes that are multiples of 32 (its down- and up-sampling): refuse another one
    before compiling, rather than with the compiler's message about node shapes."""
    if input_size is None or all(v % 32 == 0 for v in input_size):
        return
    w, h = input_size
    near = tuple(max(32, int(round(v / 32)) * 32) for v in input_size)
    raise RunArgumentError(f"the text detector (the default model) takes an input_size=(width, height) in multiples "
                           f"of 32, not {w}x{h}: the nearest is {near[0]}x{near[1]} (or leave the size out: it picks one)")


def store_result(res: RunResult, i: int, outputs: dict[Any, np.ndarray], text_boxes: bool) -> None:
    """Frame ``i``'s outputs into ``res``: the detector's text boxes (``text_boxes``), in the frame's own
    coordinates, or an output summary."""
    if text_boxes:
        _, _, fw, fh = res.frame_info[i]
        res.boxes[i] = textdet.boxes_from_map(next(iter(outputs.values())), fw, fh)
    else:
        res.outputs[i] = _summary(outputs)


def _result_handler(res: RunResult, is_textdet: bool, postprocess: bool,
                    on_progress: Callable[[int, int | None], None] | None,
                    on_result: Callable[[FrameResult], None] | None,
                    total: int | None) -> Callable[[dict[Any, np.ndarray], int], None] | None:
    """What the result worker does with frame ``i``'s outputs: boxes or an output summary into ``res``, then the
    caller's callbacks. None when there is nothing to do (no worker then)."""
    if not (postprocess or on_progress is not None or on_result is not None):
        return None
    done = 0
    # the result worker may run several threads: the caller's callbacks run one at a time, ``done`` counts up by one
    callbacks = threading.Lock()

    def handle(outputs: dict[Any, np.ndarray], i: int) -> None:  # a result worker's thread
        nonlocal done
        if postprocess:
            store_result(res, i, outputs, is_textdet)
        if on_result is None and on_progress is None:
            return
        with callbacks:
            if on_result is not None:
                on_result(res.result(i))
            if on_progress is not None:
                done += 1
                on_progress(done, total)

    return handle


@dataclass
class _StageTimer:
    """Seconds of a frame loop: stages summed over frames; compiling for a new layout kept apart (excluded from the
    stages and from ``wall``)."""

    decode: float = 0.0
    map: float = 0.0
    infer: float = 0.0
    compile: float = 0.0
    wall: float = 0.0
    started: float = 0.0  # time.monotonic() at the loop's start and end
    ended: float = 0.0
    compile_spans: list[tuple[float, float]] = field(default_factory=list)  # time.monotonic() around each compile


def _frame_loop(src: _Input, inf: Any, res: RunResult, callback: Callable[[Any, int], None] | None,
                frames: int | None, allow_copy: bool, drain: Callable[[], None] | None = None,
                wait: bool = True, views: bool = False,
                check: Callable[[], None] | None = None) -> tuple[_StageTimer, Any]:
    """Decode -> map -> ``infer_async`` until the input ends or ``frames`` are started, then wait for every result
    (``drain``: the result worker, part of the run's time). Fills ``res``'s per-frame info, frame count, sizes and
    conversions; returns the timings and the last frame decoded. ``wait=False``: return once the last request is
    started (``inf`` is shared with other streams' loops: whoever owns it waits for the requests). ``views``: the
    callback gets the requests' own output tensors (valid during the call); ``check`` runs before each frame (what
    it raises stops the loop: the results stopped coming)."""
    import interop

    timer = _StageTimer()
    perf = time.perf_counter
    info = res.frame_info
    last_vf = None
    it = src.it
    gst_input: Callable[[Any], Any] | None = None
    if src.is_gst:
        from .elements.infer import model_input as gst_input
    layouts: set[tuple[str, int, int]] = set()  # (pixel format, width, height) whose model variant is compiled
    tb = src.time_base
    timer.started = time.monotonic()
    t_start = perf()
    i = 0
    while frames is None or i < frames:
        _sigint.check()  # a Ctrl-C that a C extension swallowed (interop run's handler remembers it)
        if check is not None:
            check()
        t0 = perf()
        try:
            vf = next(it)
        except StopIteration:
            break
        t1 = perf()
        ready = None
        if type(vf) is tuple:  # (frame, its model input) from a thread that prepares ahead (--nvdec)
            vf, ready = vf
        fmt = vf.format.name
        key = (fmt, vf.width, vf.height)
        if gst_input is not None:
            vf = gst_input(vf)  # CPU views of the GStreamer buffer (zero-copy); see elements.model_input
        if key in layouts:
            if res.sizes[-1][1:] != key[1:]:  # back to a size seen before (its model variant is compiled)
                res.sizes.append((i, vf.width, vf.height))
            mapped = ready if ready is not None else interop.map(_converted(vf, res) if fmt in res.converted else vf,
                                                                 inf.memory_type)
            t2 = t2b = perf()
        else:  # a new layout: compile for it, excluded from fps and stage times
            t2 = perf()
            m0 = time.monotonic()
            mapped = _first_of_layout(res, inf, vf, allow_copy and src.convertible, i, src.convertible, ready)
            layouts.add(key)
            timer.compile_spans.append((m0, time.monotonic()))
            t2b = perf()
            timer.compile += t2b - t2
        time_s = float(vf.pts * tb) if vf.pts is not None and tb is not None else None
        info[i] = (vf.pts, time_s, vf.width, vf.height)
        inf.infer_async(mapped, callback, i, copy_outputs=not views)
        res.frames = i + 1  # counted once its request started: a frame that raised there has no result to give
        t3 = perf()
        timer.decode += t1 - t0
        timer.map += t2 - t1
        timer.infer += t3 - t2b
        last_vf = vf
        i += 1
    t0 = perf()
    if wait:
        inf.wait_all()
    if drain is not None:
        drain()  # the last results made: part of the run's time
    t_end = perf()
    timer.infer += t_end - t0
    timer.wall = t_end - t_start - timer.compile
    timer.ended = time.monotonic()
    return timer, last_vf


def _first_of_layout(res: RunResult, inf: Any, vf: Any, allow_copy: bool, i: int, convertible: bool = True,
                     ready: Any = None) -> Any:
    """First frame of a (pixel format, size): note a size change, convert the format when the model cannot take it
    and ``allow_copy``, compile the model for the layout. Returns the frame mapped for the model (``ready``: the
    model input already made from it, e.g. on the GPU)."""
    import interop

    size = (vf.width, vf.height)
    if res.sizes and res.sizes[-1][1:] != size and len(res.sizes) == 1:  # logged once; later changes: `sizes`
        msg = (f"frame size changed from {res.sizes[-1][1]}x{res.sizes[-1][2]} to {size[0]}x{size[1]} at frame {i}: "
               f"results are in each frame's own coordinates")
        log.warning(msg)
        res.warnings.append(msg)
    if not res.sizes:  # the container's header may describe a later part of the stream (MPEG-TS): the frame decides
        res.width, res.height = size
    if not res.sizes or res.sizes[-1][1:] != size:
        res.sizes.append((i, *size))
    fmt = vf.format.name
    if ready is not None:
        inf.compile_for(ready)
        return ready
    if fmt not in res.converted:
        try:
            mapped = interop.map(vf, inf.memory_type)
            inf.compile_for(mapped)
            return mapped
        except UnsupportedFormatError as e:
            if not _about_format(e, fmt):  # the model itself (several inputs, a layout it cannot take): as it is
                raise
            if not convertible:  # a GStreamer frame: the pipeline converts, where the user can see it
                from .tensors.gst import CONVERT_CAPS

                if _REFUSAL.search(str(e)):
                    raise _gst_refusal(vf.format) from e
                raise UnsupportedFormatError(
                    f"{str(e).rstrip(' .')}. Convert in the pipeline: end it with '... ! {CONVERT_CAPS} ! appsink' "
                    f"(GStreamer copies each frame there)") from e
            if not allow_copy or fmt == CONVERT_TO:
                raise UnsupportedFormatError(_supported_message(e, fmt)) from e
        msg = f"pixel format {fmt} is converted to {CONVERT_TO} before the model (allow_copy): a counted copy per frame"
        log.warning(msg)
        res.warnings.append(msg)
        res.converted[fmt] = CONVERT_TO
    mapped = interop.map(_converted(vf, res), inf.memory_type)
    inf.compile_for(mapped)
    return mapped


def _damage_warnings(res: RunResult, stopped_early: bool) -> None:
    """Say (log, and keep in ``res.warnings``) when the stream was shorter than declared or packets were skipped."""
    if res.decode_errors:
        msg = (f"{res.decode_errors} packet{'s' if res.decode_errors != 1 else ''} of {res.video!r} failed to decode "
               f"and {'were' if res.decode_errors != 1 else 'was'} skipped (damaged data)")
        log.warning(msg)
        res.warnings.append(msg)
    if not stopped_early and res.declared_frames and res.frames < res.declared_frames:
        msg = (f"{res.video!r} ended early: {res.frames} of the {res.declared_frames} frames its container declares "
               f"were decoded (the file is cut or damaged)")
        log.warning(msg)
        res.warnings.append(msg)


def _default_clip() -> str:
    from .clip import default_clip

    return default_clip()


def save_image(res: RunResult, path: str) -> str:
    """The last frame, at its own size, with its boxes drawn."""
    import cv2

    if res.last_image is None:
        raise InteropError("no frame was decoded: nothing to save")
    img = res.last_image.copy()
    if res.boxes:
        textdet.draw(img, res.boxes.get(res.frames - 1, []))
    if not cv2.imwrite(path, img):
        raise OutputPathError(f"could not write {path!r}: use a .png or .jpg path in a writable directory")
    return path


def save_video(res: RunResult, path: str) -> str:
    """Re-decode the frames of the run and write them with their boxes drawn (after the timed run: copies here
    are for the picture, outside the copy meter). A video has one size: frames of another size (a resolution change
    mid-stream) get their boxes drawn in their own coordinates and are then scaled to the first frame's size."""
    import av
    import cv2

    src = _Input(res.video)
    try:
        with av.open(path, "w") as out:
            rate = (src.stream.average_rate or 30) if src._gst is None else 30
            s = out.add_stream("libx264", rate=rate)
            first_w, first_h = (res.sizes[0][1], res.sizes[0][2]) if res.sizes else (res.width, res.height)
            s.width, s.height, s.pix_fmt = first_w & ~1, first_h & ~1, "yuv420p"
            for i, vf in enumerate(src.it):
                if i >= res.frames:
                    break
                img = np.ascontiguousarray(src.bgr(vf))
                textdet.draw(img, res.boxes.get(i, []))
                if (vf.width, vf.height) == (first_w, first_h):
                    img = np.ascontiguousarray(img[:s.height, :s.width])
                else:
                    img = np.asarray(cv2.resize(img, (s.width, s.height), interpolation=cv2.INTER_AREA), np.uint8)
                for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")):
                    out.mux(pkt)
            for pkt in s.encode():
                out.mux(pkt)
    finally:
        src.close()
    return path


_VIDEO_EXT = (".mp4", ".mkv", ".mov", ".avi")
_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def check_save_path(save: str) -> str:
    """Refuse a ``--save`` path that cannot be written before any decoding starts; returns its extension."""
    ext = os.path.splitext(save)[1].lower()
    if ext not in _IMAGE_EXT + _VIDEO_EXT:
        raise OutputPathError(f"--save writes the last frame with its boxes (.png/.jpg) or the whole run as a video "
                              f"(.mp4/.mkv): give such a path, not {save!r}")
    if os.path.isdir(save):
        raise OutputPathError(f"--save {save!r} is a directory: give a file path in it (e.g. {os.path.join(save, 'out' + ext)!r})")
    folder = os.path.dirname(os.path.abspath(save))
    if not os.path.isdir(folder):
        raise OutputPathError(f"--save {save!r}: the folder {folder!r} does not exist: create it first or save elsewhere")
    if os.path.exists(save) and not os.access(save, os.W_OK):
        raise OutputPathError(f"--save {save!r} exists and is not writable by this user: save elsewhere")
    try:  # a real write (root passes access() checks on read-only file systems)
        import tempfile

        with tempfile.NamedTemporaryFile(dir=folder, prefix=".interop-save-check-"):
            pass
    except OSError as e:
        raise OutputPathError(f"--save {save!r}: cannot write in {folder!r} ({e.strerror or e}): save to a writable "
                              f"folder") from e
    return ext
