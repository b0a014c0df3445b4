"""What a run over several streams returns (``MultiRunResult``, one ``StreamResult`` per input), and how the
requests' outputs become each stream's results (``_Results``), for streams decoded in worker processes
(``interop.streams``) and in threads (``interop.stream_threads``) alike."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import InteropError
from .pipeline import FrameResult, RunResult, store_result

log = logging.getLogger(__name__)

COPY_PYAV = "decoded frame written into the worker's pool buffer (PyAV cannot decode into it)"


class StreamError(InteropError, RuntimeError):
    """A stream of a multi-stream run failed (its worker died, or its input cannot be read); the others go on."""


@dataclass
class StreamResult:
    """One stream of a multi-stream run: the single-stream RunResult (results per frame, sizes, warnings) plus what
    the decode worker reports (its decode time and the copy into the pool) and the error that ended it, if any."""

    index: int
    run: RunResult
    error: str | None = None
    error_type: str | None = None
    worker_copies: int = 0
    worker_bytes: int = 0
    worker_zero_copy: int = 0  # frames the decoder wrote straight into the pool (GStreamer took the offered pool)
    worker_copy: str | None = None  # what the worker's copy is, when it made one
    decode_s: float = 0.0
    exit_status: int | None = None
    wall: float = 0.0  # from the run's start to this stream's last result

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.run.to_json()["streams"][0])
        d.update({"index": self.index, "error": None if self.error is None else
                  {"type": self.error_type or "StreamError", "message": self.error},
                  "fps": round(self.run.frames / self.wall, 3) if self.wall > 0 else 0.0,
                  "copies": self.worker_copies, "bytes_copied": self.worker_bytes,
                  "copy": (self.worker_copy or COPY_PYAV) if self.worker_copies else None,
                  "zero_copy_frames": self.worker_zero_copy,
                  "decode_s": round(self.decode_s, 6)})
        return d


@dataclass
class MultiRunResult:
    """A run over several streams: each stream's result, and the run as a whole (aggregate fps over the wall time,
    copies over every process)."""

    streams: list[StreamResult]
    model: str = ""
    device: str = ""
    input_size: tuple[int, int] | None = None
    wall: float = 0.0
    compile: float = 0.0
    map: float = 0.0
    infer: float = 0.0
    copies: int = 0  # in this process (mapping received frames: 0)
    bytes_copied: int = 0
    output_bytes: int = 0
    interrupted: bool = False
    pool_size: int = 0  # buffers in each worker's pool (0: decoded in threads, no pool)
    warnings: list[str] = field(default_factory=list)
    decode: str = "processes"  # where the inputs were decoded: "threads" of this process, or worker "processes"
    started: float = 0.0  # time.monotonic() when the timed run started and ended (as RunResult's)
    ended: float = 0.0

    @property
    def frames(self) -> int:
        return sum(s.run.frames for s in self.streams)

    @property
    def fps(self) -> float:
        return self.frames / self.wall if self.wall > 0 else 0.0

    @property
    def total_copies(self) -> int:
        return self.copies + sum(s.worker_copies for s in self.streams)

    @property
    def total_bytes_copied(self) -> int:
        return self.bytes_copied + sum(s.worker_bytes for s in self.streams)

    def to_json(self) -> dict[str, Any]:
        first = self.streams[0].run if self.streams else None
        return {
            "frames": self.frames, "fps": round(self.fps, 3), "copies": self.total_copies,
            "bytes_copied": self.total_bytes_copied, "output_bytes": self.output_bytes, "device": self.device,
            "model": self.model,
            "stages": {"decode": round(sum(s.decode_s for s in self.streams), 6), "map": round(self.map, 6),
                       "infer": round(self.infer, 6)},
            "wall_s": round(self.wall, 6), "compile_s": round(self.compile, 6),
            "monotonic_s": [round(self.started, 6), round(self.ended, 6)],
            "video": [s.run.video for s in self.streams],
            "size": [first.width, first.height] if first else None,
            "input_size": list(self.input_size) if self.input_size else None,
            "warnings": list(self.warnings), "interrupted": self.interrupted, "pool_size": self.pool_size,
            "decode": self.decode,
            "streams": [s.to_json() for s in self.streams],
        }


class _Boxes:
    """The text detector's PostPool, started before the model compiles (its processes import OpenCV meanwhile);
    its boxes go to the run's _Results once that exists."""

    def __init__(self, max_map_pixels: int):
        from .postpool import PostPool

        self.results: _Results | None = None
        self.pool = PostPool(self._boxes, max_map_pixels)

    def _boxes(self, key: tuple[int, int], boxes: list[Any]) -> None:  # the PostPool's reader thread
        assert self.results is not None  # maps are submitted only by the run's callbacks, made with the results
        self.results.boxes(key, boxes)


class _Results:
    """Outputs -> results, per stream; the caller's callbacks after each. Text boxes are made by a PostPool (processes
    of their own: this process's GIL stays with the frame hand-off and the requests), or, ``detector`` without one
    (streams decoded in threads), on a thread of their own as an output summary is. Both bounded: a slow consumer of
    results holds inference back, not memory. ``put`` runs on OpenVINO's thread; with ``views`` (text boxes) its
    outputs are the request's own tensors, valid during the call. After ``close()`` outputs are dropped."""

    def __init__(self, streams: list[StreamResult], on_result: Callable[[int, FrameResult], None] | None,
                 on_progress: Callable[[int, int, int | None], None] | None, t0: float, frames: int | None,
                 boxes: _Boxes | None = None, detector: bool = False):
        self.streams = streams
        self.frames = frames
        self.views = boxes is not None
        self.detector = detector  # without a PostPool: the text boxes are made on the result thread
        self._closed = False
        self.on_result = on_result
        self.on_progress = on_progress
        self.done = [0] * len(streams)
        self.t0 = t0
        self.error: BaseException | None = None
        self._pool: Any = None
        self._t: threading.Thread | None = None
        if boxes is not None:
            self._pool = boxes.pool
            boxes.results = self
        else:
            self._q: queue.Queue[tuple[Any, tuple[int, int]] | None] = queue.Queue(maxsize=64)
            self._t = threading.Thread(target=self._loop, name="interop-streams-results", daemon=True)
            self._t.start()

    def put(self, outputs: Any, key: tuple[int, int]) -> None:  # OpenVINO's thread: hand over, nothing more
        if self._closed:  # a request still running after the run ended (a stream thread it gave up on): dropped
            return
        if self._pool is not None:
            _, _, fw, fh = self.streams[key[0]].run.frame_info[key[1]]
            self._pool.submit(next(iter(outputs.values())), key, fw, fh)
        else:
            self._q.put((outputs, key))

    def boxes(self, key: tuple[int, int], boxes: list[Any]) -> None:  # the PostPool's reader thread
        k, i = key
        self.streams[k].run.boxes[i] = boxes
        self._after(k, i)

    def _loop(self) -> None:
        while (item := self._q.get()) is not None:
            if self.error is not None:
                continue
            outputs, (k, i) = item
            try:
                store_result(self.streams[k].run, i, outputs, self.detector)
                self._after(k, i)
            except BaseException as e:  # noqa: B036 - re-raised on the caller's thread by close()
                self.error = e

    def _after(self, k: int, i: int) -> None:
        s = self.streams[k]
        res = s.run
        done = self.done[k] + 1
        s.wall = time.perf_counter() - self.t0
        if self.on_result is not None:
            self.on_result(k, res.result(i))
        if self.on_progress is not None:
            total = res.declared_frames or None
            if self.frames is not None:
                total = min(total, self.frames) if total else self.frames
            self.on_progress(k, done, total)
        self.done[k] = done  # counted once the callbacks of this result returned (see finished)

    def finished(self, k: int) -> bool:
        """Whether every frame stream ``k`` started has its result, its callbacks returned (a stream whose decoding
        ended: from here on_stream_end sees all of it)."""
        return self.done[k] >= self.streams[k].run.frames

    def end_when_finished(self, waiting: list[StreamResult], on_stream_end: Callable[[StreamResult], None],
                          every: bool = False) -> None:
        """Call ``on_stream_end`` for each stream of ``waiting`` (their decoding ended) whose results are all in, and
        drop it from ``waiting``; ``every``: for all of them (the run's results are closed: a frame whose request
        failed never gets one)."""
        for s in [s for s in waiting if every or self.finished(s.index)]:
            waiting.remove(s)
            on_stream_end(s)

    def end_on_failure(self, waiting: list[StreamResult], on_stream_end: Callable[[StreamResult], None] | None) -> None:
        """The run is failing (its requests or results raised): still end every stream that was waiting, as far as
        the caller's callback lets it (its own error is logged: the run's is the one raised)."""
        if on_stream_end is None:
            return
        try:
            self.end_when_finished(waiting, on_stream_end, every=True)
        except Exception:  # noqa: BLE001 - the run's own error is raised by the caller
            log.exception("on_stream_end raised while the run was failing")

    def check(self) -> None:
        """Raise what ended the text-box pool (a post-processing process that died or hangs, or an exception of the
        caller's callbacks), so that the run stops at once rather than decode on."""
        if self._pool is not None:
            self._pool.check()

    @property
    def output_bytes(self) -> int:
        """Map bytes the PostPool read out of the requests (into its shared memory)."""
        return int(self._pool.bytes_copied) if self._pool is not None else 0

    def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            self._pool.close()
            return
        assert self._t is not None
        self._q.put(None)
        self._t.join()
        if self.error is not None:
            raise self.error
