"""``run_streams(..., decode="threads")``: every input decoded in this process, one thread per stream, one Inference.

Each stream's thread runs the single-stream loop of ``interop run`` (``pipeline._frame_loop``): FFmpeg decodes on
threads of its own (PyAV lets go of the GIL while it decodes; a ``gst:`` input's pipeline runs on GStreamer's
threads), the frame is mapped to the model's memory in place and started on the one ``Inference`` every stream
shares, whose request pool the loops keep busy between them. Nothing crosses a process: no pool to copy a PyAV
frame into, no hand-off, so a file's frames reach the model with **no copy** (``decode="processes"`` costs one per
frame). The outputs become results (text boxes, or an output summary) on one result thread. ``interop bench --only
streams`` runs both modes side by side.

What it gives up against decode worker processes: isolation. A decoder that crashes the process (a segfault inside
FFmpeg or a GStreamer element) ends every stream, where a worker process would end its own; an exception (an
unreadable input, a pixel format the model cannot take) ends its own stream here too, and the others go on.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import _sigint, pipeline
from .meter import copy_meter
from .pipeline import FrameResult, RunResult
from .stream_results import MultiRunResult, StreamError, StreamResult, _Results

log = logging.getLogger(__name__)

#: seconds the caller's thread waits for the stream threads between its checks (a Ctrl-C is handled at once)
TICK = 0.2
#: seconds to wait, after a Ctrl-C or a failed result, for each stream's thread to stop at its next frame
STOP_TIMEOUT = 30.0


def _until(stop: threading.Event, frames: Iterator[Any]) -> Iterator[Any]:
    """``frames`` until ``stop`` is set (checked before each frame is handed on)."""
    for f in frames:
        if stop.is_set():
            return
        yield f


def _raising(e: Exception) -> Iterator[Any]:
    """An iterator whose first step raises ``e``."""
    yield from ()
    raise e


def _compile_first(inf: Any, srcs: list[Any], allow_copy: bool) -> float:
    """Compile the model for the first frame of the first stream that has one, before the run's time starts (each
    frame taken goes back in front of its stream); seconds it took. A pixel format the model cannot take is compiled
    for as the stream's loop will convert it (``allow_copy``); a stream whose first frame fails keeps that error for
    its loop, which ends the stream with it, and the next stream's frame is tried."""
    import interop

    from .errors import UnsupportedFormatError

    took = 0.0
    for src in srcs:
        try:
            vf = next(src.it)
        except StopIteration:
            continue
        except Exception as e:  # noqa: BLE001 - the stream's loop raises it and ends that stream with it
            from .elements.interrupt import interrupt_of

            ki = interrupt_of(e)
            if ki is not None:  # a Ctrl-C that PyGObject reported as an error: the run's, not the stream's
                raise ki from None
            src.it = _raising(e)
            continue
        src.it = itertools.chain([vf], src.it)
        t0 = time.perf_counter()
        try:
            if src.is_gst:
                from .elements.infer import model_input

                vf = model_input(vf)  # CPU views of the GStreamer buffer, as the loop maps it
            try:
                mapped = interop.map(vf, inf.memory_type)
                inf.compile_for(mapped)
            except UnsupportedFormatError:
                if not (allow_copy and src.convertible):
                    raise
                # the loop converts these frames (a counted copy per frame): compile for what it will send
                inf.compile_for(interop.map(vf.reformat(format=pipeline.CONVERT_TO), inf.memory_type))
            return took + time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - this stream's loop meets it again and ends the stream with it
            log.debug("stream threads: the first frame's layout is compiled by its stream's loop", exc_info=True)
            took += time.perf_counter() - t0
    return took


class _Stream:
    """One input's thread: the single-stream loop over its ``_Input`` into the shared Inference."""

    def __init__(self, s: StreamResult, src: Any, inf: Any, results: _Results, frames: int | None,
                 allow_copy: bool, stop: threading.Event, ended: queue.Queue[int]):
        self.s, self.src = s, src
        self.timer: Any = None
        self.last: Any = None
        self.fatal: BaseException | None = None  # not an Exception (SystemExit...): re-raised by the run
        # Who closes the input, decided under _lock: the thread once it took it (_running); the run when the thread
        # never ran (a Ctrl-C inside its start()) or has ended; the thread itself when the run stopped waiting for
        # it (_abandoned: it outlived STOP_TIMEOUT).
        self._lock = threading.Lock()
        self._ended = False
        self._abandoned = False
        self._running = False
        k = s.index
        put = results.put

        def callback(outputs: Any, i: int) -> None:  # OpenVINO's thread: hand over, nothing more
            put(outputs, (k, i))

        self._args = (inf, callback, frames, allow_copy, stop, ended)
        self.thread = threading.Thread(target=self._main, name=f"interop-stream-{k}", daemon=True)

    def _main(self) -> None:
        inf, callback, frames, allow_copy, stop, ended = self._args
        s, src = self.s, self.src
        with self._lock:
            if self._abandoned:  # the run gave up on this thread before it ran: the input is the run's to close
                self._ended = True
                return
            self._running = True
        try:
            src.it = _until(stop, src.it)
            self.timer, self.last = pipeline._frame_loop(src, inf, s.run, callback, frames, allow_copy, wait=False)
            s.decode_s = s.run.decode = self.timer.decode
            s.run.decode_errors = src.errors
            early = stop.is_set() or (frames is not None and s.run.frames >= frames)
            pipeline._damage_warnings(s.run, stopped_early=early)
        except Exception as e:  # noqa: BLE001 - this stream ends with its error; the others go on
            s.error, s.error_type = str(e) or type(e).__name__, type(e).__name__
            log.warning("stream %d (%s): %s", s.index, s.run.video, s.error)
            s.run.warnings.append(s.error)
        except BaseException as e:  # noqa: B036 - handed to the caller's thread, which re-raises it
            self.fatal = e
        finally:
            s.worker_copies, s.worker_bytes = s.run.copies, s.run.bytes_copied
            if s.run.converted:
                s.worker_copy = "; ".join(pipeline.convert_record(f) for f in s.run.converted)
            with self._lock:
                self._ended = True
                abandoned = self._abandoned
            if abandoned:
                self._close()
            ended.put(s.index)

    def take_input_if_never_ran(self) -> None:
        """The run's clean-up: a thread that has not taken its input by now never will (it returns at once if it
        runs later), and the input is the run's to close."""
        with self._lock:
            if not self._running:
                self._abandoned = self._ended = True

    def close_input(self) -> None:
        """Close this stream's input now if its thread has ended (or never ran); else leave that to the thread, when
        it ends."""
        with self._lock:
            if not self._ended:
                self._abandoned = True
                return
        self._close()

    def _close(self) -> None:
        self.last = None
        with contextlib.suppress(Exception):
            self.src.close()


def run_in_threads(inputs: Sequence[str], model: str | None, device: str | None, frames: int | None,
                   precision: str | None, input_size: tuple[int, int] | None, *, keep_last: bool,
                   on_progress: Callable[[int, int, int | None], None] | None,
                   on_result: Callable[[int, FrameResult], None] | None,
                   on_stream_end: Callable[[StreamResult], None] | None, allow_copy: bool,
                   model_input: pipeline.ModelInput | None = None) -> MultiRunResult:
    """run_streams' ``decode="threads"`` (see its docstring and this module's)."""
    streams: list[StreamResult] = []
    out = MultiRunResult(streams, decode="threads")
    srcs: dict[int, Any] = {}
    inf: Any = None
    results: _Results | None = None
    loops: list[_Stream] = []
    stop = threading.Event()
    ended: queue.Queue[int] = queue.Queue()
    # one stream decodes as `interop run CLIP` does; several share the cores as decode workers do
    threads_each = pipeline.DECODE_THREADS if len(inputs) == 1 else pipeline.WORKER_DECODE_THREADS
    try:
        for k, video in enumerate(inputs):
            try:
                src = pipeline._Input(video, threads_each)
            except Exception as e:  # noqa: BLE001 - an input that cannot be opened ends its stream; the others go on
                s = StreamResult(k, RunResult(video, "", "", 0, 0, input_size), error=str(e) or type(e).__name__,
                                 error_type=type(e).__name__)
                log.warning("stream %d (%s): %s", k, video, s.error)
                s.run.warnings.append(s.error or "")
            else:
                srcs[k] = src
                s = StreamResult(k, RunResult(video, "", "", src.width, src.height, input_size,
                                              declared_frames=src.declared))
            streams.append(s)
        if not srcs:
            raise StreamError("no input could be opened: " + "; ".join(f"{s.run.video}: {s.error}" for s in streams))
        first = srcs[min(srcs)]  # the model's input size, as a single run takes it from its input
        inf, model_name, size = pipeline._make_inference(model, device, precision, input_size, first.width,
                                                          first.height, model_input)
        out.model, out.device, out.input_size = model_name, inf.device, size
        for s in streams:
            s.run.model, s.run.device, s.run.input_size = model_name, inf.device, size
        perf = time.perf_counter
        out.compile = _compile_first(inf, [srcs[k] for k in sorted(srcs)], allow_copy)
        # OpenCV's pool threads spin after each small post-processing call, on the cores inference needs (as in
        # pipeline.run): off for the run
        with copy_meter() as meter, pipeline._opencv_single_threaded(model is None):
            out.started = time.monotonic()
            t0 = perf()
            results = _Results(streams, on_result, on_progress, t0, frames, detector=model is None)
            for k in sorted(srcs):
                lp = _Stream(streams[k], srcs[k], inf, results, frames, allow_copy, stop, ended)
                loops.append(lp)  # before start(): a Ctrl-C inside it may come after the thread exists
                lp.thread.start()
            left = len(loops)
            waiting: list[StreamResult] = []  # decoded to the end, results still to come: on_stream_end after them
            while left:
                _sigint.check()  # a Ctrl-C that a C extension swallowed (interop run's handler remembers it)
                try:
                    k = ended.get(timeout=TICK / 4 if waiting else TICK)
                except queue.Empty:
                    k = -1
                if results.error is not None:  # the caller's callback failed: stop decoding, raise it below
                    stop.set()
                if k >= 0:
                    left -= 1
                    lp = next(x for x in loops if x.s.index == k)
                    lp.thread.join()
                    if lp.fatal is not None:
                        stop.set()
                        raise lp.fatal
                    waiting.append(lp.s)
                if on_stream_end is not None:
                    results.end_when_finished(waiting, on_stream_end)
            t3 = perf()
            try:
                inf.wait_all()
                results.close()  # the last results made (and the callbacks' error, if any, raised): part of the run
            except Exception:
                results.end_on_failure(waiting, on_stream_end)
                raise
            last_wait = perf() - t3
            if on_stream_end is not None:
                results.end_when_finished(waiting, on_stream_end, every=True)
            results = None
        # A layout compiled after the start (a stream of another size) holds only its own stream: the others go on
        # meanwhile, so that time stays in the run's wall time; the first layout was compiled before it.
        out.wall = perf() - t0
        out.ended = time.monotonic()
        timers = [lp.timer for lp in loops if lp.timer is not None]
        for lp in loops:
            if lp.timer is not None:
                r = lp.s.run
                r.map, r.infer, r.compile, r.compile_spans = lp.timer.map, lp.timer.infer, lp.timer.compile, \
                    lp.timer.compile_spans
                r.started, r.ended = lp.timer.started, lp.timer.ended
        # the stages of the busiest stream's thread (the threads' stages overlap: their sum would exceed the wall)
        out.map = max((t.map for t in timers), default=0.0)
        out.infer = max((t.infer for t in timers), default=0.0) + last_wait
        stream_copies = sum(s.worker_copies for s in streams)
        out.copies = max(0, meter.copies - stream_copies)  # copies of this process beside the streams' own
        out.bytes_copied = max(0, meter.bytes - sum(s.worker_bytes for s in streams))
        out.output_bytes = inf.output_bytes
        if keep_last:
            for lp in loops:
                if lp.last is not None:
                    lp.s.run.last_image = lp.src.bgr(lp.last)
        return out
    except KeyboardInterrupt as e:
        out.interrupted = True
        e.result = out  # type: ignore[attr-defined]
        if e.__traceback__ is not None:  # a frame in the interrupted calls' locals would keep its buffer
            traceback.clear_frames(e.__traceback__.tb_next)
        raise
    finally:
        stop.set()
        try:
            deadline = time.monotonic() + STOP_TIMEOUT
            for lp in loops:  # each stops at its next frame (a request it waits for completes meanwhile)
                lp.take_input_if_never_ran()
                if lp.thread.ident is None:  # never started
                    continue
                lp.thread.join(max(0.0, deadline - time.monotonic()))  # at once for one that never took its input
                if lp.thread.is_alive():
                    log.warning("stream %d (%s) did not stop within %.0f s; left running", lp.s.index,
                                lp.s.run.video, STOP_TIMEOUT)
            if inf is not None:
                with contextlib.suppress(Exception):
                    inf.wait_all()
        finally:
            try:
                if results is not None:
                    with contextlib.suppress(Exception):
                        results.close()
            finally:
                for lp in loops:
                    lp.close_input()
                given = {lp.s.index for lp in loops}
                for k, src in srcs.items():  # inputs opened before the streams' threads were made
                    if k not in given:
                        with contextlib.suppress(Exception):
                            src.close()
                if inf is not None:
                    inf.close()
