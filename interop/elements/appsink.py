"""AppSinkSource: frames pulled from any GStreamer pipeline that ends in an ``appsink``, as GST Frames.

The frames are ``interop.wrap(sample)``: planes over the buffer's own memory (map them to CPU, DMA, OpenVINO...
without a copy). The appsink's pad answers the ALLOCATION query with GstVideoMeta support, so a decoder may hand
over its padded buffers instead of copying them into tight ones. A bus ERROR raises PipelineError with
GStreamer's text; EOS ends the iteration; no frame, EOS or error within ``timeout`` seconds raises
PipelineTimeoutError. A LATENCY message (an element whose delay changed) makes the pipeline query its latency
again, as gst-launch does. The source reads its pipeline's bus for those two (when a pull waits, and every
``LATENCY_EVERY`` frames): other messages posted there are dropped, as ``Gst.Bus.pop_filtered`` drops them. ``frames(pipeline, timeout)`` is the one-call form (what ``interop run gst:...`` uses).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator
from typing import Any

from ..errors import InteropError
from ..frame import Frame
from ..native import gst as ng
from ..tensors.gst import gst, wrap_sample
from .base import PipelineError, PipelineTimeoutError, Source
from .interrupt import emit

log = logging.getLogger("interop")

#: every how many frames a read looks at the bus for LATENCY messages (also whenever a pull waits)
LATENCY_EVERY = 16
#: how often a blocked pull looks at the bus (seconds): an error upstream surfaces within this
POLL = 0.05


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 or timeout != timeout:
        raise InteropError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def poll_bus(pipeline: Any) -> PipelineError | None:
    """The first ERROR message waiting on ``pipeline``'s bus as a PipelineError, or None; a LATENCY message met on
    the way makes the pipeline query its latency again, as gst-launch does (an element whose delay changed posts it,
    e.g. a decoder once it knows its reorder depth; the bin does not act on it by itself). One filter for both:
    ``pop_filtered`` discards the messages of other types posted before the one it returns."""
    Gst = gst()
    bus = pipeline.get_bus()
    recalc, err = False, None
    while err is None:
        msg = bus.pop_filtered(Gst.MessageType.ERROR | Gst.MessageType.LATENCY)
        if msg is None:
            break
        if msg.type == Gst.MessageType.LATENCY:
            recalc = True
        else:
            err = _error_of(msg)
    if recalc:
        pipeline.recalculate_latency()
    return err


def _error_of(msg: Any) -> PipelineError:
    err, debug = msg.parse_error()
    src = msg.src.get_name() if msg.src is not None else "pipeline"
    return PipelineError(f"GStreamer error from {src}: {err.message}" + (f" ({debug})" if debug else ""))


def bus_error(pipeline: Any) -> PipelineError | None:
    """The first ERROR message waiting on ``pipeline``'s bus as a PipelineError, or None."""
    Gst = gst()
    msg = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    return None if msg is None else _error_of(msg)


def parse(description: str) -> Any:
    """``Gst.parse_launch`` with its failure as a PipelineError (a bad element name, a missing plugin...)."""
    Gst = gst()
    if not isinstance(description, str) or not description.strip():
        raise InteropError(f"a GStreamer pipeline is a non-empty string like 'videotestsrc ! appsink', not "
                           f"{description!r}")
    if "interopdec" in description:  # interop's own decoder element: registered in this process on first use
        from .gst_decoder import register

        register()
    try:
        p = Gst.parse_launch(description)
    except Exception as e:  # GLib.Error: no such element, syntax error
        raise PipelineError(f"GStreamer cannot build {description!r}: {e}. Check the element names "
                            f"(gst-inspect-1.0) and the Debian plugin packages (interop doctor)") from e
    if not isinstance(p, Gst.Pipeline):  # a single element
        pipe = Gst.Pipeline.new(None)
        pipe.add(p)
        p = pipe
    return p


def find(pipeline: Any, factory: str, name: str | None) -> Any:
    """The element called ``name`` or, without a name, the only element made by ``factory`` (None when absent)."""
    if name is not None:
        return pipeline.get_by_name(name)
    found = []
    it = pipeline.iterate_recurse()
    while True:
        ok, e = it.next()
        if ok != gst().IteratorResult.OK:
            break
        f = e.get_factory()
        if f is not None and f.get_name() == factory:
            found.append(e)
    if len(found) > 1:
        raise InteropError(f"the pipeline has {len(found)} {factory} elements: name the one to use")
    return found[0] if found else None


def _stop(pipeline: Any) -> None:
    pipeline.set_state(gst().State.NULL)


class AppSinkSource(Source):
    """Frames from ``pipeline`` (a string, or a built Gst.Pipeline), pulled from its ``appsink`` (the one called
    ``sink_name``, or the only one; a string without an appsink gets ``! appsink`` appended).

    ``sync=False`` (the default) makes the appsink deliver as fast as upstream decodes rather than at the clock's
    pace (None keeps the pipeline's own setting). ``max_buffers`` bounds the frames waiting in the appsink:
    upstream blocks when it is full (back-pressure). The pipeline starts on the first ``read()`` and is set to
    NULL by ``close()`` (frames mapped before stay valid: their mappings hold the buffers).

    ``pool`` (an ``interop.elements.pool.GstFramePool``) is offered in the ALLOCATION query instead of GstVideoMeta
    support alone, so that upstream may write straight into FramePool buffers (``pool.claim(frame.native)``);
    ``close()`` stops it first, so an element waiting for one of its buffers lets the pipeline stop."""

    def __init__(self, pipeline: Any, *, timeout: float = 10.0, sink_name: str | None = None,
                 sync: bool | None = False, max_buffers: int = 4, offer_video_meta: bool = True,
                 pool: Any = None):
        Gst = gst()
        self.timeout = _check_timeout(timeout)
        if isinstance(pipeline, str):
            if sink_name is None and isinstance(pipeline, str) and "appsink" not in pipeline:
                pipeline = pipeline + " ! appsink"
            p = parse(pipeline)
        elif isinstance(pipeline, Gst.Pipeline):
            p = pipeline
        else:
            raise InteropError(f"AppSinkSource takes a pipeline string or a Gst.Pipeline, not {type(pipeline).__name__}")
        sink = find(p, "appsink", sink_name)
        if sink is None:
            raise InteropError(f"no appsink{f' called {sink_name!r}' if sink_name else ''} in the pipeline: end it "
                               f"with '! appsink'")
        if sync is not None:
            sink.set_property("sync", bool(sync))
        sink.set_property("max-buffers", int(max_buffers))
        sink.set_property("emit-signals", False)
        # GStreamer's sinks keep the last sample by default (for its "last-sample" property, which nothing here
        # reads): that held one more buffer - one of a GstFramePool's, out of the pool - until the next sample came,
        # and the last one until the sink itself went
        sink.set_property("enable-last-sample", False)
        if pool is not None:
            pool.offer(sink)  # GstVideoMeta support and the pool
        elif offer_video_meta:
            ng.offer_video_meta(sink)
        self.pool = pool
        self.max_buffers = int(max_buffers)
        self.pipeline = p
        self.sink = sink
        self.frames = 0
        self._error: PipelineError | None = None  # found on the bus while frames still came
        self._error_at = 0  # ... raised by the read after this many frames
        self._started = False
        self._closed = False
        self._eos = False
        # a source dropped without close() still stops its pipeline (GStreamer warns about PLAYING elements)
        self._fin = weakref.finalize(self, _stop, p)

    def start(self) -> None:
        """Set the pipeline PLAYING (``read()`` does it on first use)."""
        Gst = gst()
        if self._closed:
            raise InteropError("this AppSinkSource is closed")
        if self._started:
            return
        self._started = True
        if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            err = bus_error(self.pipeline)
            self.close()
            raise err or PipelineError("GStreamer could not start the pipeline (state change to PLAYING failed)")

    @property
    def eos(self) -> bool:
        """The pipeline reached its end (or the source was closed)."""
        return self._eos or self._closed

    def read(self) -> Frame | None:
        """The next frame; None at EOS. PipelineError on a bus error, PipelineTimeoutError when stalled."""
        return self._read(self.timeout, True)

    def try_read(self, seconds: float) -> Frame | None:
        """The next frame if one comes within ``seconds``, else None (``eos`` tells the end from no frame yet).
        PipelineError on a bus error."""
        return self._read(float(seconds), False)

    def _read(self, seconds: float, stall_error: bool) -> Frame | None:
        if self._eos or self._closed:
            return None
        self.start()
        Gst = gst()
        deadline = time.monotonic() + seconds
        while True:
            held = self._error
            if held is not None and self.frames >= self._error_at:
                self._error = None
                self.close()
                raise held
            sample = emit(self.sink, "try-pull-sample", int(POLL * Gst.SECOND))
            if sample is not None:
                self.frames += 1
                if self.frames % LATENCY_EVERY == 1 and self._error is None:
                    self._error = poll_bus(self.pipeline)
                    # raised once the frames the appsink held when it was found are read (a live source may go on
                    # producing: it is not left for a pull that waits)
                    self._error_at = self.frames + self.max_buffers
                return wrap_sample(sample)
            err, self._error = self._error or poll_bus(self.pipeline), None
            if err is not None:
                self.close()
                raise err
            if self.sink.get_property("eos"):
                self._eos = True
                self.close()
                return None
            if time.monotonic() > deadline:
                if not stall_error:
                    return None
                self.close()
                raise PipelineTimeoutError(
                    f"the GStreamer pipeline gave no frame, EOS or error in {self.timeout:g} s (after {self.frames} "
                    f"frames): it is stalled (a live source without data, a queue deadlock, a blocked tee). Pass a "
                    f"longer timeout= for slow sources")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.pool is not None:
            self.pool.stop()  # an element waiting in the pool's acquire returns FLUSHING: the state change can finish
        self._fin()


def frames(pipeline: Any, timeout: float = 10.0, **options: Any) -> Iterator[Frame]:
    """Frames (GST memory: width, height, format, pts in ns) from a GStreamer pipeline string ending in appsink;
    the pipeline is closed when the iteration ends or is abandoned. Options as AppSinkSource's."""
    src = AppSinkSource(pipeline, timeout=timeout, **options)
    try:
        yield from src
    finally:
        src.close()
