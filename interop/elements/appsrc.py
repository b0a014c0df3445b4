"""AppSrcSink: frames pushed into a GStreamer pipeline that starts with an ``appsrc``, without a copy.

A frame in GST memory is pushed as its own Gst.Buffer; CPU frames become buffers over their numpy planes
(cpu_to_gst) and DMA frames buffers of fd memory (dma_to_gst): GStreamer reads interop's memory, which stays
alive until GStreamer frees the buffer. The appsrc's caps come from the first frame (format, size, frame rate when
known). ``block=True`` with a bounded appsrc queue: ``write()`` waits while the pipeline is behind (back-pressure).
``close()`` sends EOS and waits for it to reach the sink (a file is complete then), raising bus errors.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..errors import InteropError
from ..frame import Frame
from ..native import gst as ng
from ..tensors.gst import caps_for, gst
from ..types import MemoryType
from .appsink import _check_timeout, bus_error, find, parse
from .base import PipelineError, PipelineTimeoutError, Sink
from .interrupt import emit


class AppSrcSink(Sink):
    """Pushes frames into ``pipeline`` (a string such as ``"appsrc ! videoconvert ! jpegenc ! multifilesink"``)
    through its ``appsrc`` (``src_name``, or the only one). ``fps`` stamps frames that carry no pts."""

    accepts = (MemoryType.GST, MemoryType.DMA, MemoryType.CPU)  # GST pushed as is, others through their mapper

    def __init__(self, pipeline: Any, *, src_name: str | None = None, fps: Fraction | int = 30, timeout: float = 10.0,
                 max_buffers: int = 4):
        Gst = gst()
        self.timeout = _check_timeout(timeout)
        p = parse(pipeline) if isinstance(pipeline, str) else pipeline
        src = find(p, "appsrc", src_name)
        if src is None:
            raise InteropError("no appsrc in the pipeline: start it with 'appsrc ! ...'")
        src.set_property("format", Gst.Format.TIME)
        src.set_property("block", True)
        src.set_property("max-bytes", 0)
        if src.find_property("max-buffers") is not None:
            src.set_property("max-buffers", int(max_buffers))
        self.fps = Fraction(fps)
        self.pipeline = p
        self.src = src
        self.frames = 0
        self._caps: Any = None
        self._closed = False
        self._started = False

    def write(self, frame: Frame) -> None:
        import interop

        Gst = gst()
        if self._closed:
            raise InteropError("this AppSrcSink is closed")
        if frame.memory_type is not MemoryType.GST:
            frame = interop.map(frame, MemoryType.GST)  # type: ignore[assignment]
        buffer = getattr(frame, "buffer", None)
        if buffer is None:
            raise InteropError(f"a {frame.memory_type.name} frame has no Gst.Buffer to push")
        if self._caps is None:
            fps = frame.metadata.get("framerate") or self.fps
            self._caps = caps_for(frame.format, frame.width, frame.height, Fraction(fps))
            self.src.set_property("caps", self._caps)
        if not self._started:
            self._started = True
            if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
                raise bus_error(self.pipeline) or PipelineError("GStreamer could not start the pipeline")
        if buffer.pts == Gst.CLOCK_TIME_NONE:
            if not ng.is_writable(ng.pointer_of(buffer, "Gst.Buffer")):
                buffer = buffer.copy()  # a shallow copy: new metadata, same memory
            buffer.pts = int(self.frames / self.fps * Gst.SECOND)
            buffer.duration = int(Gst.SECOND / self.fps)
        ret = emit(self.src, "push-buffer", buffer)
        if ret != Gst.FlowReturn.OK:
            raise bus_error(self.pipeline) or PipelineError(f"the pipeline refused the frame ({ret.value_nick})")
        self.frames += 1
        err = bus_error(self.pipeline)
        if err is not None:
            raise err

    def close(self) -> None:
        """End the stream: EOS, wait until it has gone through (``timeout``), then stop the pipeline."""
        if self._closed:
            return
        self._closed = True
        Gst = gst()
        try:
            if self._started:
                emit(self.src, "end-of-stream")
                msg = self.pipeline.get_bus().timed_pop_filtered(int(self.timeout * Gst.SECOND),
                                                                 Gst.MessageType.EOS | Gst.MessageType.ERROR)
                if msg is None:
                    raise PipelineTimeoutError(f"the pipeline did not finish within {self.timeout:g} s of EOS")
                if msg.type == Gst.MessageType.ERROR:
                    err, debug = msg.parse_error()
                    raise PipelineError(f"GStreamer error: {err.message} ({debug})")
        finally:
            self.pipeline.set_state(Gst.State.NULL)
