"""``interop run`` over several inputs: one decode worker process per stream, one inference process for all
(``run_streams(decode="processes")``; the default, ``decode="threads"``, decodes every input on a thread of this
process instead: ``interop.stream_threads``).

Each input (a file, or ``gst:PIPELINE``) is decoded in a worker process of its own, so decoders never wait on the
GIL of the process that runs inference. A worker writes each decoded frame into a buffer of its own ``FramePool`` and
hands it over by slot reference (``interop.dma``: the buffer's fd crosses once, then each frame is a small message).
PyAV cannot decode into a foreign buffer, so that write is one copy per frame: counted (``copies``,
``bytes_copied``) and reported per stream. A ``gst:`` worker offers its pool in the appsink's ALLOCATION query
(``interop.elements.pool``): an element that takes it writes into pool buffers and the frame is sent with no copy
(``zero_copy_frames``); samples in the element's own buffers are copied, counted, per frame. The inference process (this one) owns one ``Inference`` and keeps its
whole request pool busy with frames of every stream: it maps each received frame to the model's memory type (zero
copy, the pool buffer itself) and starts a request; the buffer goes back to the worker's pool when the request is
done. The detector's text boxes are made in post-processing processes (``interop.postpool``), fed each map through
shared memory, so this process's GIL stays with the frames and the requests. Results are kept per stream, in frame
order.

Back-pressure: a worker's pool is bounded; when inference falls behind, the frames it holds are the pool's buffers,
and the worker waits for one to come back before decoding on. Nothing queues without bound.

Faults: a worker that dies (killed, crashed, an unreadable input), sends a message that is not a frame, or sends
nothing for ``STALL_TIMEOUT`` seconds while inference holds none of its frames (a stuck decoder, a stopped process:
it is killed) ends its stream with an error (``error`` in that stream's entry) and the others go on. When this
process dies, each worker notices its socket closing and exits. Ctrl-C (SIGINT, which the workers ignore) stops the
run: sockets close, workers exit, every fd is released.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _sigint, textdet
from ._spawn import ignoring_ctrl_c
from .errors import InteropError
from .pipeline import FrameResult, ModelInput, RunArgumentError, RunResult
from .stream_results import COPY_PYAV, MultiRunResult, StreamError, StreamResult, _Boxes, _Results

__all__ = ["COPY_GST", "COPY_PYAV", "MultiRunResult", "StreamError", "StreamResult", "run_streams", "save_path"]

log = logging.getLogger(__name__)

#: buffers in each worker's pool at least; by default a stream's pool holds the model's whole request pool plus
#: POOL_SPARE (one the worker fills, one the stream keeps, one in the socket), so one stream alone can keep every
#: request busy
POOL_SIZE = 6
POOL_SPARE = 3
#: seconds a worker may take to open its input and say so
START_TIMEOUT = 60.0
#: seconds a worker may go without sending anything while none of its frames is held here (every frame it sent has
#: its result): past that its decoder is stuck, or the process was stopped, and its stream ends
STALL_TIMEOUT = 60.0



# ---- the decode worker (its own process) ----------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent dies (a second way out, beside the socket closing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _say(obj: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):  # the inference process is gone: nobody to tell
        pass


def worker_main(sock_fd: int, video: str, frames: int | None, allow_copy: bool = False) -> int:
    """Decode ``video`` into pool frames and send them over the socket ``sock_fd``. Status lines (JSON) on stdout:
    ``{"hello": ...}`` once the input is open, then ``{"done": ...}`` or ``{"error": ...}``. Between the two it reads
    ``{"pool": N}`` on stdin (the inference process sizes the pools once its model is compiled); EOF there: stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the inference process's to handle: it closes our socket
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    _die_with_parent()
    from .pipeline import GST_PREFIX, is_gst_input

    if is_gst_input(video):
        return _gst_worker(sock_fd, video[len(GST_PREFIX):], frames)
    return _av_worker(sock_fd, video, frames, allow_copy)


def _read_pool_size() -> int:
    try:
        return int(json.loads(sys.stdin.readline() or "{}").get("pool", 0))
    except (ValueError, AttributeError, OSError):
        return 0


class _CopyIn:
    """The counted copy of a decoded frame (CPU views) into a frame of the worker's own FramePool."""

    def __init__(self, pool_size: int):
        self.pool_size = pool_size
        self.pool: Any = None

    def __call__(self, cpu: Any, what: str) -> Any:
        import interop
        from interop import AccessMode, MemoryType
        from interop.meter import record_copy

        from .dma import FramePool

        if self.pool is None or (self.pool.format, self.pool.width, self.pool.height) != (cpu.format, cpu.width,
                                                                                          cpu.height):
            if self.pool is not None:
                self.pool.close()
            self.pool = FramePool(cpu.format, cpu.width, cpu.height, self.pool_size)
        f = self.pool.acquire()  # waits while inference holds the whole pool: the back-pressure
        nbytes = 0
        with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as dst:
            assert isinstance(dst, interop.Frame)
            for s, d in zip(cpu.tensors, dst.tensors):
                a = np.asarray(s)
                np.copyto(np.asarray(d), a)
                nbytes += a.nbytes
        record_copy(what, nbytes)
        return f

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _av_worker(sock_fd: int, video: str, frames: int | None, allow_copy: bool = False) -> int:
    """A file decoded by PyAV: each frame copied into the pool (PyAV cannot decode into a foreign buffer). With
    ``allow_copy`` a pixel format interop has no planes for is converted first (as ``interop run --allow-copy`` does
    for one input), that copy counted too."""
    import interop
    from interop import MemoryType
    from interop.errors import UnsupportedFormatError
    from interop.inference._inputs import refusal
    from interop.inference._preprocess import supported_formats
    from interop.meter import copy_meter
    from interop.pipeline import CONVERT_TO, WORKER_DECODE_THREADS, _converted, _Input, _supported_message

    from .dma import FrameSender, PeerClosedError

    try:
        src = _Input(video, WORKER_DECODE_THREADS)
    except InteropError as e:
        _say({"error": {"type": type(e).__name__, "message": str(e)}})
        return 1
    _say({"hello": {"width": src.width, "height": src.height, "declared": src.declared}})
    pool_size = _read_pool_size()
    if pool_size < 3:  # the inference process is gone, or failed before starting us
        src.close()
        return 0
    tx = FrameSender(socket.socket(fileno=sock_fd))
    copy_in = _CopyIn(pool_size)
    sent = 0
    decode_s = 0.0
    perf = time.perf_counter
    # A format the model cannot take is refused (or converted) here, as threads mode does, not by the inference
    # process, whose Inference serves every stream: its refusal there ended the whole run
    takes = set(supported_formats())
    converted: set[str] = set()
    try:
        with copy_meter() as meter:
            it = iter(src.it)
            while frames is None or sent < frames:
                t0 = perf()
                try:
                    vf = next(it)
                except StopIteration:
                    break
                decode_s += perf() - t0
                name = vf.format.name
                cpu = None
                if name not in converted:
                    try:
                        cpu = interop.map(vf, MemoryType.CPU)  # views of the decoder's planes (no copy)
                        if cpu.format not in takes:
                            what = cpu.format.name
                            cpu.release()
                            cpu = None
                            raise refusal(what)  # Inference's own words for it
                    except UnsupportedFormatError as e:
                        if not allow_copy or name == CONVERT_TO:
                            raise UnsupportedFormatError(_supported_message(e, name)) from None
                        converted.add(name)
                        _say({"converted": {"from": name, "to": CONVERT_TO}})
                if cpu is None:  # converted (a counted copy), as threads mode converts it
                    vf = _converted(vf)
                    cpu = interop.map(vf, MemoryType.CPU)
                with cpu:
                    assert isinstance(cpu, interop.Frame)
                    f = copy_in(cpu, "decode worker: decoded frame -> pool buffer")
                f.pts, f.time_base = vf.pts, src.time_base
                f.colorspace, f.color_range = cpu.colorspace, cpu.color_range
                tx.send(f)
                f.release()
                sent += 1
        # frames still held by the inference process stay valid there (it owns its fds): no need to wait for them
        _say({"done": {"frames": sent, "decode_errors": src.errors, "copies": meter.copies, "bytes": meter.bytes,
                       "decode_s": decode_s, "zero_copy_frames": 0,
                       "copy": COPY_PYAV if meter.copies else None}})
        return 0
    except PeerClosedError:  # the inference process stopped (Ctrl-C, killed, done with us): a clean exit
        return 0
    except InteropError as e:
        _say({"error": {"type": type(e).__name__, "message": str(e)}})
        return 1
    finally:
        copy_in.close()  # before the sender gives back the buffers in flight (see _gst_worker)
        tx.close()
        src.close()


#: what a stream's copy is, in its report
COPY_GST = ("GStreamer frame copied into the worker's pool buffer: the element before the appsink did not write into "
            "the pool offered in its ALLOCATION query (it keeps its own buffers, e.g. avdec_*, or dropped the query)")
#: seconds a GStreamer pipeline may go without a frame, EOS or error
GST_TIMEOUT = 10.0


def _gst_worker(sock_fd: int, description: str, frames: int | None) -> int:
    """A GStreamer pipeline whose appsink offers the worker's FramePool in the ALLOCATION query: an element that
    takes it writes each picture straight into a pool buffer, and that frame is sent as it is (no copy). A sample
    in a buffer of its own (the element kept its pool) is copied into the pool, counted, per frame."""
    from fractions import Fraction

    import interop
    from interop import MemoryType
    from interop.meter import copy_meter

    from .dma import FrameSender, PeerClosedError
    from .elements.appsink import AppSinkSource
    from .elements.base import PipelineError
    from .elements.pool import GstFramePool
    from .inference._preprocess import supported_formats
    from .pipeline import VideoInputError, _gst_input_error, _gst_refusal

    tx: Any = None
    copy_in: _CopyIn | None = None
    pool: GstFramePool | None = None
    src: Any = None
    try:
        if not description.strip():
            raise VideoInputError("gst: needs a GStreamer pipeline after it, e.g. 'gst:filesrc location=clip.mp4 ! "
                                  "qtdemux ! h264parse ! avdec_h264 ! appsink'")
        pool = GstFramePool()
        src = AppSinkSource(description, timeout=GST_TIMEOUT, pool=pool)
        # the size: from the caps the pool was configured with (the element then waits in its acquire until the
        # pool is sized), or from the first frame when no element took the pool
        first = None
        deadline = time.monotonic() + GST_TIMEOUT
        while not pool.configured.is_set() and first is None:
            first = src.try_read(0.05)
            if first is None and src.eos:
                raise VideoInputError(f"the GStreamer pipeline {description!r} ended without giving a frame")
            if time.monotonic() > deadline:
                raise PipelineError(f"the GStreamer pipeline {description!r} gave no frame within {GST_TIMEOUT:g} s")
        if first is not None:
            width, height, fmt = first.width, first.height, first.format
        else:
            assert pool.layout is not None
            width, height, fmt = pool.layout.width, pool.layout.height, pool.layout.format
        if fmt not in supported_formats():  # refused here, as threads mode does: the inference process's refusal
            raise _gst_refusal(fmt)  # of one stream's frame would end every stream
    except InteropError as e:
        if src is not None:
            src.close()
        if pool is not None:
            pool.close()
        e = _gst_input_error(description, e) or e  # worded for a run's pipeline, as threads mode words it
        _say({"error": {"type": type(e).__name__, "message": str(e)}})
        return 1
    _say({"hello": {"width": width, "height": height, "declared": 0}})
    pool_size = _read_pool_size()
    if pool_size < 3:
        src.close()
        pool.close()
        return 0
    # the appsink holds up to max_buffers samples (each a pool buffer) beside those inference holds
    pool.set_count(pool_size + src.max_buffers)
    tx = FrameSender(socket.socket(fileno=sock_fd))
    copy_in = _CopyIn(pool_size)
    ns = Fraction(1, 1_000_000_000)
    sent = zero = 0
    decode_s = 0.0
    perf = time.perf_counter
    try:
        with copy_meter() as meter:
            while frames is None or sent < frames:
                t0 = perf()
                gf = first if first is not None else src.read()
                first = None
                if gf is None:
                    break
                decode_s += perf() - t0
                f = pool.claim(gf.native)
                if f is not None:
                    zero += 1
                else:
                    with interop.map(gf, MemoryType.CPU) as cpu:
                        f = copy_in(cpu, "decode worker: GStreamer frame -> pool buffer (the pool was not used)")
                f.pts, f.time_base = gf.pts, ns
                f.colorspace, f.color_range = gf.colorspace, gf.color_range
                gf.release()
                gf = None  # the sample goes: GStreamer lets go of the buffer
                tx.send(f)
                f.release()
                sent += 1
        _say({"done": {"frames": sent, "decode_errors": 0, "copies": meter.copies, "bytes": meter.bytes,
                       "decode_s": decode_s, "zero_copy_frames": zero, "copy": COPY_GST if meter.copies else None}})
        return 0
    except PeerClosedError:
        return 0
    except InteropError as e:
        if sent == 0:  # the first frame's failure, as threads mode words it
            e = _gst_input_error(description, e) or e
        _say({"error": {"type": type(e).__name__, "message": str(e)}})
        return 1
    finally:
        # Every writer of the pool stops before the sender closes: close() gives back the buffers of the frames still
        # in flight (the inference process may not have read them yet), and an element waiting in the pool's acquire
        # would take one and write into it under the consumer's eyes (a torn frame, dropped there). Setting the
        # pipeline to NULL returns once its streaming threads stopped; the closed FramePools hand out nothing more.
        # Each step runs even when one before it fails (a pipeline that will not stop: the pools still close, and
        # then nothing can be handed out again), and the sender closes last.
        try:
            src.close()
        finally:
            try:
                pool.close()
            finally:
                try:
                    if copy_in is not None:
                        copy_in.close()
                finally:
                    if tx is not None:
                        tx.close()


# ---- the inference process ------------------------------------------------------------------------------


class _Worker:
    """A decode worker process and our ends of its socket (frames) and stdout (status lines)."""

    def __init__(self, index: int, video: str, frames: int | None, allow_copy: bool = False):
        from .dma import FrameReceiver, seqpacket_pair

        self.index = index
        self.video = video
        ours, theirs = seqpacket_pair()
        args = ignoring_ctrl_c([sys.executable, "-m", "interop.streams", "--worker", str(theirs.fileno()), video,
                                str(frames or 0), "1" if allow_copy else "0"])
        try:
            self.proc = subprocess.Popen(args, pass_fds=[theirs.fileno()], stdout=subprocess.PIPE,
                                         stdin=subprocess.PIPE, start_new_session=False)
        finally:
            theirs.close()
        self.rx = FrameReceiver(ours)
        self.status: dict[str, Any] = {}
        self.eof = False  # no more frames (the worker closed its socket)
        self.status_eof = False
        self._buf = b""
        self.heard = time.monotonic()  # when it last sent a frame or a status line (or was told to start)

    def read_status(self) -> list[dict[str, Any]]:
        """Status lines available now (call when stdout is readable)."""
        assert self.proc.stdout is not None
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:
            self.status_eof = True
            return []
        self._buf += data
        lines, _, self._buf = self._buf.rpartition(b"\n")
        out = []
        for line in lines.split(b"\n"):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    log.warning("stream %d: a worker status line that is not JSON: %r", self.index, line[:200])
        return out

    def go(self, pool_size: int) -> None:
        """Tell the worker its pool size: it starts decoding."""
        assert self.proc.stdin is not None
        self.heard = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps({"pool": pool_size}).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:  # it died already: its socket says so
            pass

    def kill(self) -> None:
        """End a worker that is not trusted any more (it sent a bad message, or nothing for too long)."""
        with contextlib.suppress(OSError):
            self.proc.kill()

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # a worker still waiting for its pool size stops
        self.rx.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()



def _check(inputs: Sequence[str | os.PathLike[str]], pool_size: int | None, frames: int | None) -> list[str]:
    """The arguments checked before anything starts; the inputs as a list of str (a path-like object's path: the
    ``--json`` object names each input as it is kept)."""
    if isinstance(inputs, (str, bytes, os.PathLike)):  # a str is a sequence too: each character would be a stream
        raise RunArgumentError(f"run_streams takes a list of inputs, not one input: run_streams([{inputs!r}])")
    try:
        given = list(inputs)
    except TypeError:
        raise RunArgumentError(f"run_streams takes a list of inputs (paths, or 'gst:PIPELINE'), not "
                               f"{type(inputs).__name__}") from None
    if not given:
        raise RunArgumentError("run_streams needs at least one input")
    paths = [os.fspath(v) if isinstance(v, os.PathLike) else v for v in given]
    for k, v in enumerate(paths):
        if not isinstance(v, str):
            raise RunArgumentError(f"input {k} is {type(v).__name__} {v!r}: each input is a path (str or "
                                   f"os.PathLike) or 'gst:PIPELINE'")
    if frames is not None and frames <= 0:
        raise RunArgumentError(f"--frames must be a positive number of frames, not {frames} (leave it out for all)")
    if pool_size is not None and pool_size < 3:
        raise RunArgumentError(f"pool_size must be at least 3 (a frame in a request, one kept, one being written), "
                               f"not {pool_size}")
    return paths


def run_streams(inputs: Sequence[str | os.PathLike[str]], model: str | None = None, device: str | None = None,
                frames: int | None = None, precision: str | None = None, input_size: tuple[int, int] | None = None, *,
                pool_size: int | None = None, keep_last: bool = False,
                on_progress: Callable[[int, int, int | None], None] | None = None,
                on_result: Callable[[int, FrameResult], None] | None = None,
                on_stream_end: Callable[[StreamResult], None] | None = None,
                allow_copy: bool = False, decode: str | None = None,
                model_input: ModelInput | None = None) -> MultiRunResult:
    """Decode each of ``inputs`` and run them all through one ``Inference``; returns a MultiRunResult (one
    StreamResult per input, in the order given). ``frames`` caps each stream. ``allow_copy``: frames of a pixel
    format interop has no planes for are converted to yuv420p (counted in the stream's copies); without it such a
    stream ends with UnsupportedFormatError.

    ``decode="threads"`` (the default): each input is decoded on a thread of this process and its frames reach the
    model in place, with no copy (``interop.stream_threads``). ``decode="processes"`` (the default when
    ``pool_size`` is given): each input in a worker process of its own, its frames handed over through a pool of
    ``pool_size`` buffers (one copy per PyAV frame into the pool); a decoder that crashes its process then ends only
    its own stream.

    A stream whose decoding fails ends with its ``error`` set; the run goes on with the others and raises nothing for
    it. KeyboardInterrupt stops every worker and re-raises after cleaning up (``interrupted`` on the result is for
    callers that catch it: the partial result is attached as ``e.result``). ``keep_last``: each stream's last frame as
    a BGR image (``run.last_image``, for ``--save``). Callbacks run on the result thread: ``on_progress(stream, done,
    total)``, ``on_result(stream, FrameResult)``; ``on_stream_end(StreamResult)`` on the caller's thread, once the
    stream's decoding ended and its last result was made (after its last on_result/on_progress)."""
    import interop
    from interop.meter import copy_meter
    from interop.pipeline import _make_inference, _opencv_single_threaded

    from .dma import ProtocolError, TransportTimeoutError
    from .errors import UnsupportedFormatError

    paths = _check(inputs, pool_size, frames)
    if decode is None:
        decode = "threads" if pool_size is None else "processes"
    if decode not in ("threads", "processes"):
        raise RunArgumentError(f"decode must be 'threads' or 'processes', not {decode!r}")
    if decode == "threads":
        if pool_size is not None:
            raise RunArgumentError("pool_size sizes the decode worker processes' pools: pass decode='processes' "
                                   "with it (streams decoded in threads need no pool)")
        from .stream_threads import run_in_threads

        return run_in_threads(paths, model, device, frames, precision, input_size, keep_last=keep_last,
                              on_progress=on_progress, on_result=on_result, on_stream_end=on_stream_end,
                              allow_copy=allow_copy, model_input=model_input)
    workers = [_Worker(k, v, frames, allow_copy) for k, v in enumerate(paths)]
    streams: list[StreamResult] = []
    last: dict[int, Any] = {}
    inf: Any = None
    results: _Results | None = None
    boxes: _Boxes | None = None
    out = MultiRunResult(streams)
    sel = selectors.DefaultSelector()
    f: Any = None
    mapped: Any = None
    try:
        if model is None:
            boxes = _Boxes(textdet.map_pixels(input_size))
        hello = _await_hello(workers)
        for w in workers:
            h = hello.get(w.index, {})
            r = RunResult(w.video, "", "", int(h.get("width", 0)), int(h.get("height", 0)), input_size,
                          declared_frames=int(h.get("declared", 0)))
            s = StreamResult(w.index, r)
            if "error" in h:
                s.error, s.error_type = h["error"].get("message"), h["error"].get("type")
                log.warning("stream %d (%s): %s", w.index, w.video, s.error)
                s.run.warnings.append(s.error or "")
            streams.append(s)
        live = [w for w in workers if streams[w.index].error is None]
        if not live:
            raise StreamError("no input could be opened: " + "; ".join(f"{s.run.video}: {s.error}" for s in streams))
        first = streams[live[0].index].run
        inf, model_name, size = _make_inference(model, device, precision, input_size, first.width, first.height,
                                                model_input)
        out.model, out.device, out.input_size = model_name, inf.device, size
        for s in streams:
            s.run.model, s.run.device, s.run.input_size = model_name, inf.device, size
        if pool_size is None:
            try:
                pool_size = max(POOL_SIZE, int(inf.pool_size()) + POOL_SPARE)
            except Exception:  # noqa: BLE001 - a model whose raw variant cannot be sized: the default
                pool_size = POOL_SIZE
        out.pool_size = pool_size
        for w in workers:
            if streams[w.index].error is not None:
                w.stop()
                continue
            w.go(pool_size)
            sel.register(w.rx._sock, selectors.EVENT_READ, ("frame", w))
            assert w.proc.stdout is not None
            sel.register(w.proc.stdout, selectors.EVENT_READ, ("status", w))
        if boxes is not None:
            boxes.pool.wait_ready()  # started meanwhile: not part of the run's time
        out.started = time.monotonic()
        t0 = time.perf_counter()
        results = _Results(streams, on_result, on_progress, t0, frames, boxes)
        layouts: set[tuple[Any, ...]] = set()
        perf = time.perf_counter
        open_streams = {w.index for w in live}
        waiting: list[StreamResult] = []  # decoded to the end, results still to come: on_stream_end after them
        # OpenCV's pool threads spin after each small post-processing call, on the cores inference needs (as in
        # pipeline.run): off for the run
        with copy_meter() as meter, _opencv_single_threaded(model is None):
            while open_streams:
                _sigint.check()  # a Ctrl-C that a C extension swallowed (interop run's handler remembers it)
                ready = sel.select(timeout=0.05 if waiting else 1.0)
                # silence is measured up to the select: what a worker sent later (while a frame of this batch was
                # compiled for, or waited for a request) is in the next one
                polled = time.monotonic()
                for key, _ in ready:
                    kind, w = key.data
                    s = streams[w.index]
                    w.heard = polled
                    if kind == "status":
                        for msg in w.read_status():
                            _on_status(s, msg)
                        if w.status_eof:
                            sel.unregister(key.fileobj)
                    else:
                        try:
                            f = w.rx.recv(timeout=0)
                        except TransportTimeoutError:  # a slot message (FORGET) or a dropped frame: nothing to run
                            continue
                        except ProtocolError as e:
                            s.error, s.error_type = f"the decode worker sent a bad message: {e}", "ProtocolError"
                            f = None
                            # a worker we stop reading would wait for ever for the pool buffers its unread frames
                            # hold, and its stream (the run with it) would never end: it is not trusted any more
                            w.kill()
                        if f is None:
                            w.eof = True
                            sel.unregister(key.fileobj)
                            continue
                        i = s.run.frames
                        tb = f.time_base
                        s.run.frame_info[i] = (f.pts, float(f.pts * tb) if f.pts is not None and tb else None,
                                               f.width, f.height)
                        if not s.run.sizes or s.run.sizes[-1][1:] != (f.width, f.height):
                            s.run.sizes.append((i, f.width, f.height))
                        s.run.frames = i + 1
                        t1 = perf()
                        lay = (f.format, f.width, f.height, tuple(t.info.strides for t in f.tensors))
                        try:
                            mapped = interop.map(f, inf.memory_type)
                            if lay not in layouts:
                                t2 = perf()
                                inf.compile_for(mapped)
                                layouts.add(lay)
                                out.compile += perf() - t2
                        except UnsupportedFormatError as e:  # the workers refuse what they can tell: a safety net
                            s.run.frames = i
                            s.run.frame_info.pop(i, None)
                            _refused(s, w, f, e)
                            sel.unregister(key.fileobj)
                            f.release()
                            f = mapped = None
                            continue
                        t2 = perf()
                        inf.infer_async(mapped, results.put, (w.index, i), copy_outputs=not results.views)
                        out.map += t2 - t1
                        out.infer += perf() - t2
                        if keep_last:
                            last[w.index] = f  # the newest frame stays held (one buffer of the pool)
                        f = mapped = None
                results.check()
                for w in live:
                    if w.index in open_streams and not w.eof:
                        if not results.finished(w.index):
                            # inference holds frames of it (back-pressure): silence counts from when they came back
                            w.heard = polled
                        elif polled - w.heard > STALL_TIMEOUT:
                            _stalled(streams[w.index], w)
                            sel.unregister(w.rx._sock)
                    if w.index in open_streams and w.eof and (w.status_eof or w.proc.poll() is not None):
                        open_streams.discard(w.index)
                        _end_stream(streams[w.index], w, frames)
                        waiting.append(streams[w.index])
                if on_stream_end is not None:
                    results.end_when_finished(waiting, on_stream_end)
            t3 = perf()
            try:
                try:
                    inf.wait_all()
                except Exception:
                    results.check()  # the pool's own error (or the caller's callback's), not its echo in the requests
                    raise
                results.close()
            except Exception:
                results.end_on_failure(waiting, on_stream_end)
                raise
            if on_stream_end is not None:
                results.end_when_finished(waiting, on_stream_end, every=True)
            pooled_bytes, results = results.output_bytes, None
            out.infer += perf() - t3
        out.wall = perf() - t0 - out.compile
        out.ended = time.monotonic()
        out.copies, out.bytes_copied = meter.copies, meter.bytes
        out.output_bytes = inf.output_bytes + pooled_bytes
        if keep_last:
            from .pipeline import gst_bgr

            for k, f in last.items():
                streams[k].run.last_image = gst_bgr(f)
        return out
    except KeyboardInterrupt as e:
        out.interrupted = True
        e.result = out  # type: ignore[attr-defined]
        # the calls it interrupted may hold a received frame in their locals, which the traceback keeps: drop them
        # so that every fd is closed by the time the caller sees the exception
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__.tb_next)
        raise
    finally:
        # an exception's traceback keeps this frame's locals: a received frame there would keep its buffer's fd
        f = mapped = None
        # each step runs even when the one before is interrupted (a second Ctrl-C during the clean-up)
        try:
            sel.close()
            for w in workers:
                w.stop()
            if inf is not None:
                with contextlib.suppress(Exception):
                    inf.wait_all()
        finally:
            try:
                if boxes is not None:  # the post-processing processes and their shared memory
                    with contextlib.suppress(Exception):
                        boxes.pool.close(raise_error=False)
                elif results is not None:
                    with contextlib.suppress(Exception):
                        results.close()
            finally:
                for f in last.values():
                    f.release()
                last.clear()
                if inf is not None:
                    inf.close()


def _await_hello(workers: list[_Worker]) -> dict[int, dict[str, Any]]:
    """Each worker's first status line: its input's size (or why it could not open it)."""
    got: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + START_TIMEOUT
    with selectors.DefaultSelector() as sel:
        for w in workers:
            assert w.proc.stdout is not None
            sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        while len(got) < len(workers):
            left = deadline - time.monotonic()
            if left <= 0:
                for w in workers:
                    if w.index not in got:
                        got[w.index] = {"error": {"type": "StreamError",
                                                  "message": f"the decode worker did not open {w.video!r} within "
                                                             f"{START_TIMEOUT:.0f} s"}}
                break
            for key, _ in sel.select(timeout=left):
                w = key.data
                msgs = w.read_status()
                if w.status_eof and not msgs:
                    code = w.proc.wait()
                    got[w.index] = {"error": {"type": "StreamError", "message": _died(w.video, code, 0)}}
                    sel.unregister(key.fileobj)
                for m in msgs:
                    if "hello" in m:
                        got[w.index] = m["hello"]
                    elif "error" in m:
                        got[w.index] = {"error": m["error"]}
                    if w.index in got:
                        sel.unregister(key.fileobj)
                        break
    return got


def _on_status(s: StreamResult, msg: dict[str, Any]) -> None:
    if "converted" in msg:  # the worker converts this pixel format (allow_copy), as a stream's thread would
        c = msg["converted"]
        fmt, to = str(c.get("from")), str(c.get("to"))
        if fmt not in s.run.converted:
            s.run.converted[fmt] = to
            text = f"pixel format {fmt} is converted to {to} before the model (allow_copy): a counted copy per frame"
            log.warning("stream %d (%s): %s", s.index, s.run.video, text)
            s.run.warnings.append(text)
    elif "done" in msg:
        d = msg["done"]
        s.worker_copies, s.worker_bytes = int(d.get("copies", 0)), int(d.get("bytes", 0))
        s.worker_zero_copy = int(d.get("zero_copy_frames", 0))
        s.worker_copy = d.get("copy") if isinstance(d.get("copy"), str) else None
        s.decode_s = float(d.get("decode_s", 0.0))
        s.run.decode_errors = int(d.get("decode_errors", 0))
        s.run.decode = s.decode_s
    elif "error" in msg and s.error is None:
        s.error, s.error_type = msg["error"].get("message"), msg["error"].get("type")


def _died(video: str, code: int, frames: int) -> str:
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    return f"the decode worker of {video!r} {how} after {frames} frames: the stream ends here"


def _stalled(s: StreamResult, w: _Worker) -> None:
    """The worker sent nothing for STALL_TIMEOUT while it had every buffer of its pool: not back-pressure (inference
    holds none of its frames) but a decoder that is stuck or a process that was stopped. The run would wait for it
    for ever: its stream ends here, the others go on."""
    s.error = (f"the decode worker of {w.video!r} sent nothing for {STALL_TIMEOUT:g} s after {s.run.frames} frames, "
               f"none of them held by inference (its decoder is stuck, or the process was stopped): the stream ends "
               f"here")
    s.error_type = "StreamError"
    w.kill()
    w.eof = True


def _refused(s: StreamResult, w: _Worker, f: Any, e: Exception) -> None:
    """The model refused a frame of this stream (its pixel format, its layout): as in threads mode, the stream ends
    with the refusal, worded for a run, and the others go on. Its worker is not read any more: it is killed."""
    from .inference._preprocess import supported_formats
    from .pipeline import _about_format, _gst_refusal, _supported_message, is_gst_input

    if is_gst_input(w.video):
        msg = str(_gst_refusal(f.format)) if f.format not in supported_formats() else str(e)
    elif _about_format(e, f.format.name):
        msg = _supported_message(e, f.format.name)
    else:  # about the model itself (several inputs, a layout it cannot take): as it is, as threads mode says it
        msg = str(e)
    s.error, s.error_type = msg, type(e).__name__
    w.kill()
    w.eof = True


def _end_stream(s: StreamResult, w: _Worker, frames: int | None) -> None:
    """The worker closed its socket: note how it ended (status line, exit status) and, as one stream's run does,
    the packets it skipped and a stream shorter than its container declares."""
    try:
        code = w.proc.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    s.exit_status = code
    torn = w.rx.torn
    if torn:  # never an honest worker's (it commits each frame before sending it), but never silent either
        msg = (f"{torn} frame{'s' if torn != 1 else ''} of {w.video!r} {'were' if torn != 1 else 'was'} dropped on "
               f"arrival: the decode worker was still writing {'them' if torn != 1 else 'it'} (torn); the stream "
               f"has {s.run.frames} frames")
        log.warning("stream %d (%s): %s", s.index, s.run.video, msg)
        s.run.warnings.append(msg)
    if s.error is None and code not in (0, None):
        s.error, s.error_type = _died(w.video, code, s.run.frames), "StreamError"
    if s.error is not None:
        log.warning("stream %d (%s): %s", s.index, s.run.video, s.error)
        s.run.warnings.append(s.error)
    else:
        from .pipeline import _damage_warnings

        _damage_warnings(s.run, stopped_early=frames is not None and s.run.frames >= frames)


def save_path(path: str, k: int, n: int) -> str:
    """``--save`` for stream ``k`` of ``n``: ``out.png`` -> ``out-0.png``, ``out-1.png`` ... (one stream: as given)."""
    if n == 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}-{k}{ext}"


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        raise SystemExit(worker_main(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]) or None, sys.argv[5] == "1"))
    raise SystemExit("usage: python -m interop.streams --worker SOCKET_FD INPUT FRAMES (started by interop run with "
                     "several inputs)")
