"""The text boxes of a single-stream ``interop run`` made in post-processing processes (``interop.postpool``) rather
than on a thread of the run's process: what ``run(post_processes=N)`` and ``interop run --nvdec`` use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import textdet
from .postpool import PostPool, PostPoolError

if TYPE_CHECKING:
    from .pipeline import RunResult


class BoxProcesses:
    """The text boxes of a single-stream run made in post-processing processes (``interop.postpool``), in the
    _ResultWorker's place: ``put`` (OpenVINO's thread) copies the map out of the request's own output tensor into
    the pool's shared memory; the boxes come back on the pool's reader thread, which stores them and runs the
    caller's callbacks (``after``: on_result and on_progress run there, in the order the processes
    finish). Made before the model compiles (the processes import OpenCV meanwhile);
    ``attach`` waits for them before the timed loop, ``drain`` for the last boxes, ``close`` stops them."""

    def __init__(self, max_pixels: int, processes: int):
        self.res: RunResult | None = None
        self.after: Callable[[Any, int], None] | None = None
        self.pool = PostPool(self._boxes, max_pixels, processes=processes)
        self._cpu0 = 0.0

    def attach(self, res: RunResult, after: Callable[[Any, int], None] | None) -> None:
        self.res, self.after = res, after
        self.pool.wait_ready()
        self._cpu0 = self.pool.cpu_seconds()  # their start (imports) is not the boxes' work

    def put(self, outputs: dict[Any, np.ndarray], i: int) -> None:  # views, valid during the call
        assert self.res is not None
        _, _, fw, fh = self.res.frame_info[i]
        try:
            self.pool.submit(next(iter(outputs.values())), i, fw, fh)
        except PostPoolError:
            if self.pool.error is None and not self.pool.closed:
                raise
            # the pool has ended: the run raises what ended it (check, drain: the caller's own exception as it is),
            # not each later request's account of it; or the run has closed it (requests that outlived the run's
            # wait, as the thread path drops their outputs)

    def _boxes(self, i: int, boxes: list[textdet.TextBox]) -> None:  # the pool's reader thread
        assert self.res is not None
        self.res.boxes[i] = boxes
        if self.after is not None:
            self.after(None, i)

    def check(self) -> None:
        """Raise what ended the pool (a process that died or hangs, an exception of the caller's callbacks)."""
        self.pool.check()

    def drain(self) -> None:
        """Wait for every frame's boxes and callbacks (part of the run's time; the processes stop in close())."""
        self.pool.wait_done()

    def cpu_seconds(self) -> float:
        """CPU the processes used since ``attach`` (the boxes)."""
        return max(0.0, self.pool.cpu_seconds() - self._cpu0)

    def close(self, raise_error: bool = True) -> None:
        self.pool.close(raise_error)
