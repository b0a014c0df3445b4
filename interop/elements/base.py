"""Source / Transform / Sink: the elements a video pipeline is written with, and the Chain that runs them.

A Source yields Frames, a Transform turns a Frame into a Frame (or drops it: None), a Sink consumes Frames. An
element names the memory types it takes (``accepts``); the chain maps a frame into the first of them with
``interop.map`` before handing it over (no copy unless the element sets ``allow_copy``; a copying route is refused
otherwise, as everywhere in interop). A Chain runs in the caller's thread, or pulls the source on a worker thread
into a bounded queue (``queue_size``): a full queue makes the source wait (back-pressure), never memory grow.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import InteropError
from ..frame import Frame
from ..types import AccessMode, MemoryType


class PipelineError(InteropError, RuntimeError):
    """The media pipeline reported an error (GStreamer bus ERROR, a decoder failure); the text is the framework's."""


class PipelineTimeoutError(InteropError, TimeoutError):
    """The pipeline produced nothing (no frame, no EOS, no error) within the timeout: it is stalled."""


class Element:
    """What every element shares: the memory types it takes, the access mode it needs, whether it allows copies."""

    #: memory types this element takes, preferred first; empty: any
    accepts: tuple[MemoryType, ...] = ()
    mode: AccessMode = AccessMode.READ
    allow_copy: bool = False

    def prepare(self, frame: Frame) -> Frame:
        """``frame`` in a memory type this element takes (``interop.map``; unchanged when it already is one)."""
        if not self.accepts or frame.memory_type in self.accepts:
            return frame
        import interop

        out = interop.map(frame, self.accepts[0], mode=self.mode, allow_copy=self.allow_copy)
        assert isinstance(out, Frame)
        return out

    def close(self) -> None:
        """Free what the element holds (pipelines, threads); idempotent."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Source(Element):
    """Yields Frames: ``read()`` returns the next one, or None at the end of the stream."""

    def read(self) -> Frame | None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Frame]:
        while (f := self.read()) is not None:
            yield f


class Transform(Element):
    """Turns a Frame into a Frame (the same one, annotated, or a new one), or None to drop it."""

    def process(self, frame: Frame) -> Frame | None:
        raise NotImplementedError


class Sink(Element):
    """Consumes Frames; ``close()`` ends the stream (EOS) and waits for it to drain."""

    def write(self, frame: Frame) -> None:
        raise NotImplementedError


_END = object()


class Chain:
    """``source -> transforms... [-> sink]``. Iterate it to get the frames that leave the last transform (when
    there is no sink), or call ``run()``. ``queue_size=0`` pulls the source in the caller's thread; ``> 0`` pulls it
    on a worker thread into a queue of that many frames. Errors of any element (and of the worker) are raised in
    the caller's thread; the source's end of stream ends the iteration; ``close()`` closes every element."""

    def __init__(self, source: Source, *elements: Transform | Sink, queue_size: int = 0):
        if not isinstance(source, Source):
            raise InteropError(f"a Chain starts with a Source, not {type(source).__name__}")
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 0:
            raise InteropError(f"queue_size must be an int >= 0, not {queue_size!r}")
        self.source = source
        self.transforms: list[Transform] = []
        self.sink: Sink | None = None
        for i, e in enumerate(elements):
            if isinstance(e, Sink) and i == len(elements) - 1:
                self.sink = e
            elif isinstance(e, Transform):
                self.transforms.append(e)
            else:
                raise InteropError(f"element {i} ({type(e).__name__}) must be a Transform, or a Sink in last place")
        self.queue_size = queue_size
        self.frames = 0

    def _pulled(self) -> Iterator[Frame]:
        if not self.queue_size:
            yield from self.source
            return
        q: queue.Queue[Any] = queue.Queue(maxsize=self.queue_size)
        stop = threading.Event()

        def work() -> None:
            try:
                for f in self.source:
                    while not stop.is_set():
                        try:
                            q.put(f, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                q.put(_END)
            except BaseException as e:  # noqa: B036 - handed to the caller's thread
                q.put(e)

        t = threading.Thread(target=work, name="interop-chain-source", daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            t.join()

    def __iter__(self) -> Iterator[Frame]:
        for f in self._pulled():
            out: Frame | None = f
            for e in self.transforms:
                assert out is not None
                out = e.process(e.prepare(out))
                if out is None:
                    break
            if out is None:
                continue
            self.frames += 1
            if self.sink is not None:
                self.sink.write(self.sink.prepare(out))
            else:
                yield out

    def run(self) -> int:
        """Run to the end of the stream; returns the frames that reached the end; closes every element."""
        try:
            for _ in self:
                pass
        finally:
            self.close()
        return self.frames

    def close(self) -> None:
        first: BaseException | None = None
        for e in [self.source, *self.transforms, *([self.sink] if self.sink else [])]:
            try:
                e.close()
            except BaseException as err:  # noqa: B036 - every element is closed; the first error is raised
                first = first or err
        if first is not None:
            raise first

    def __enter__(self) -> Chain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
