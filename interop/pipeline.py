"""The main job, ``interop run``: decode a video, map each frame zero-copy into ``Inference``, report.

Per frame: decode (PyAV) -> ``interop.map(frame, MemoryType.OPENVINO)`` (the decoder's planes
become OpenVINO tensors over the same memory) -> ``Inference.infer_async`` (colour conversion, crop, resize and
normalisation run inside the model). The copy meter is open over the whole run: on the bundled clip it reads 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from . import textdet
from .errors import InteropError


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

    @property
    def fps(self) -> float:
        return self.frames / self.wall if self.wall > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "frames": self.frames, "fps": round(self.fps, 3), "copies": self.copies, "bytes_copied": self.bytes_copied,
            "output_bytes": self.output_bytes, "device": self.device, "model": self.model,
            "stages": {"decode": round(self.decode, 6), "map": round(self.map, 6), "infer": round(self.infer, 6)},
            "wall_s": round(self.wall, 6), "compile_s": round(self.compile, 6), "video": self.video,
            "size": [self.width, self.height], "input_size": list(self.input_size) if self.input_size else None,
        }
        if self.boxes:
            counts = [len(self.boxes.get(i, [])) for i in range(self.frames)]
            last = self.boxes.get(self.frames - 1, [])
            d["detections"] = {"boxes_total": int(sum(counts)), "frames_with_text": int(sum(c > 0 for c in counts)),
                               "boxes_per_frame_mean": round(float(np.mean(counts)) if counts else 0.0, 3),
                               "last_frame": [list(b.bbox) + [round(b.score, 3)] for b in last]}
        elif self.outputs:
            d["outputs"] = self.outputs.get(self.frames - 1, {})
        return d


def _summary(out: dict[Any, np.ndarray]) -> dict[str, Any]:
    """A readable line about a generic model's outputs (shape, range, argmax)."""
    s: dict[str, Any] = {}
    for k, v in out.items():
        e: dict[str, Any] = {"shape": list(v.shape), "min": float(v.min()), "max": float(v.max())}
        if v.ndim >= 1 and v.size and v.size == v.shape[-1] * (v.size // v.shape[-1]) and v.ndim <= 2:
            e["argmax"] = int(np.argmax(v.reshape(-1, v.shape[-1])[0]))
        s[str(k)] = e
    return s


def open_video(path: str) -> Any:
    """Open a video with PyAV: (container, stream)."""
    from .backends import require

    av = require("av", "FFmpeg", "ffmpeg")
    if not os.path.isfile(path):
        raise InteropError(f"video {path!r} not found: give a video file path (or none, for the bundled clip)")
    try:
        container = av.open(path)
    except av.error.FFmpegError as e:  # type: ignore[attr-defined]
        raise InteropError(f"FFmpeg cannot open {path!r}: {e}") from e
    if not container.streams.video:
        container.close()
        raise InteropError(f"{path!r} has no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame + slice threads: the decoder's own fastest mode for long clips
    return container, stream


class _ResultWorker:
    """Turns outputs into results (text boxes, the progress bar) on a thread of its own. OpenVINO calls a request's
    callback on the thread of the inference stream that ran it, and that stream takes no new request until the
    callback returns: a callback that only queues the outputs gives the stream back at once, where making boxes
    there held it ~1.5-2 ms a frame, longer while waiting for the GIL the other callbacks and the decode loop want.
    ``close()`` waits for every queued result and re-raises the first error."""

    BACKLOG = 64  # outputs queued at most

    def __init__(self, work: Any):
        self._work = work
        # bounded: a worker slower than the device (a fast NPU) makes the callbacks wait, not memory grow
        self._queue: queue.Queue[tuple[Any, int] | None] = queue.Queue(maxsize=self.BACKLOG)
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="interop-run-results", daemon=True)
        self._thread.start()

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
                    self._error = e

    def close(self, raise_error: bool = True) -> None:
        self._closed = True
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        err, self._error = self._error, None
        if err is not None and raise_error:
            raise err


@contextlib.contextmanager
def _opencv_single_threaded(on: bool) -> Iterator[None]:
    """OpenCV without its thread pool for the block (then as it was). The run's parallelism is OpenVINO's streams;
    the text-box post-processing makes a few small OpenCV calls per frame, and OpenCV's pool threads spin after
    each one: on the 16-core Xeon a call took 4.4-4.7 ms of CPU for 1.5 ms of wall time (1.5 ms single-threaded),
    spinning on cores the inference streams need."""
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
        precision: str | None = None, progress: bool = False, keep_last: bool = False,
        input_size: tuple[int, int] | None = None, postprocess: bool = True) -> RunResult:
    """Decode -> map -> infer over a video; returns the measurements (see RunResult).

    ``postprocess=False`` skips turning outputs into results (text boxes; done on a thread of their own, see
    _ResultWorker) (benchmarks).
    """
    import interop

    from .inference import Inference

    path = video or _default_clip()
    container, stream = open_video(path)
    width, height = stream.codec_context.width, stream.codec_context.height
    config = {"INFERENCE_PRECISION_HINT": precision} if precision else None
    is_textdet = model is None
    size: tuple[int, int] | None
    if is_textdet:
        size = input_size or textdet.input_size_for(width, height)
        inf = Inference(textdet.model_path(), device, input_size=size, mean=textdet.MEAN, scale=textdet.SCALE,
                        rgb=textdet.RGB, config=config)
        model_name = textdet.MODEL_NAME
    else:
        assert model is not None
        size = input_size
        inf = Inference(model, device, input_size=size, config=config)
        model_name = inf.model_name
    res = RunResult(path, model_name, inf.device, width, height, size)
    total = stream.frames or None
    if frames is not None:
        total = min(total, frames) if total else frames
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="frame", file=sys.stderr, leave=False, desc="interop run")
        except ImportError:
            bar = None

    def on_result(outputs: dict[Any, np.ndarray], i: int) -> None:  # the result worker's thread
        if not postprocess:
            pass
        elif is_textdet:
            res.boxes[i] = textdet.boxes_from_map(next(iter(outputs.values())), width, height)
        elif i == res.frames - 1 or len(res.outputs) < 1:
            res.outputs = {i: _summary(outputs)}
        if bar is not None:
            bar.update(1)

    worker = _ResultWorker(on_result) if (postprocess or bar is not None) else None
    callback = worker.put if worker is not None else None  # on OpenVINO's thread: queue the outputs, nothing more
    perf = time.perf_counter
    last_vf = None
    it = container.decode(stream)
    try:
        with interop.copy_meter() as meter, _opencv_single_threaded(postprocess and is_textdet):
            t_start = perf()
            i = 0
            while frames is None or i < frames:
                t0 = perf()
                try:
                    vf = next(it)
                except StopIteration:
                    break
                t1 = perf()
                mapped = interop.map(vf, inf.memory_type)  # the decoded frame's planes, in one step
                t2 = perf()
                if i == 0:  # compile the model for this plane layout; excluded from fps and stage times
                    inf.compile_for(mapped)
                    res.compile = perf() - t2
                t2b = perf()
                res.frames = i + 1
                inf.infer_async(mapped, callback, i)
                t3 = perf()
                res.decode += t1 - t0
                res.map += t2 - t1
                res.infer += t3 - t2b
                last_vf = vf
                i += 1
            t0 = perf()
            inf.wait_all()
            if worker is not None:
                worker.close()  # the last results made: part of the run's time
            t_end = perf()
            res.infer += t_end - t0
            res.wall = t_end - t_start - res.compile
    finally:
        if worker is not None:
            worker.close(raise_error=False)  # stopped on every path (after an error of the run's own, quietly)
        if bar is not None:
            bar.close()
        container.close()
    res.copies, res.bytes_copied, res.copy_records = meter.copies, meter.bytes, meter.records
    res.output_bytes = inf.output_bytes
    inf.close()  # stop OpenVINO's request threads now, not during interpreter teardown
    if keep_last and last_vf is not None:
        res.last_image = last_vf.to_ndarray(format="bgr24")  # for --save only, after the timed run
    return res


def _default_clip() -> str:
    from .clip import default_clip

    return default_clip()


def report(res: RunResult, out: TextIO) -> None:
    """The human-readable report."""
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"interop run: {res.video} ({res.width}x{res.height}) -> {res.model} on {res.device}"
      + (f", model input {res.input_size[0]}x{res.input_size[1]}" if res.input_size else ""))
    p(f"  frames        {res.frames}")
    p(f"  fps           {res.fps:.1f}   ({res.frames} frames in {res.wall:.3f} s; model compilation {res.compile:.2f} s excluded)")
    p(f"  stages (s)    decode {res.decode:.3f}   map {res.map:.3f}   infer (waiting for results) {res.infer:.3f}")
    p(f"  copies        {res.copies}   bytes copied {res.bytes_copied}   (copy_meter over the run)")
    for r in res.copy_records[:5]:
        p(f"                copy by {r.mapper}: {r.bytes} bytes")
    p(f"  output bytes  {res.output_bytes}   (results read out of the infer requests; not a mapper copy)")
    if res.boxes:
        counts = [len(res.boxes.get(i, [])) for i in range(res.frames)]
        p(f"  text boxes    {sum(counts)} in {res.frames} frames (per frame: min {min(counts)}, "
          f"mean {np.mean(counts):.1f}, max {max(counts)})")
        show = sorted({0, res.frames // 2, res.frames - 1})
        for i in show:
            bs = res.boxes.get(i, [])
            p(f"    frame {i:4d}: {len(bs)} boxes " + " ".join(f"[{x0},{y0} {x1 - x0}x{y1 - y0}]" for x0, y0, x1, y1 in
                                                       (b.bbox for b in bs)))
    elif res.outputs:
        for k, v in next(iter(res.outputs.values())).items():
            p(f"  output {k}: {v}")


def save_image(res: RunResult, path: str) -> str:
    import cv2

    if res.last_image is None:
        raise InteropError("no frame was decoded: nothing to save")
    img = res.last_image.copy()
    if res.boxes:
        textdet.draw(img, res.boxes.get(res.frames - 1, []))
    if not cv2.imwrite(path, img):
        raise InteropError(f"could not write {path!r}: use a .png or .jpg path in a writable directory")
    return path


def save_video(res: RunResult, path: str) -> str:
    """Re-decode the frames of the run and write them with their boxes drawn (after the timed run: copies here
    are for the picture, outside the copy meter)."""
    import av

    container, stream = open_video(res.video)
    try:
        with av.open(path, "w") as out:
            rate = stream.average_rate or 30
            s = out.add_stream("libx264", rate=rate)
            s.width, s.height, s.pix_fmt = res.width & ~1, res.height & ~1, "yuv420p"
            for i, vf in enumerate(container.decode(stream)):
                if i >= res.frames:
                    break
                img = np.ascontiguousarray(vf.to_ndarray(format="bgr24")[:s.height, :s.width])
                textdet.draw(img, res.boxes.get(i, []))
                for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")):
                    out.mux(pkt)
            for pkt in s.encode():
                out.mux(pkt)
    finally:
        container.close()
    return path


_VIDEO_EXT = (".mp4", ".mkv", ".mov", ".avi")
_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def main(args: argparse.Namespace) -> int:
    """``interop run``: args has video, model, device, frames, save, json, precision, no_progress."""
    as_json = bool(getattr(args, "json", False))
    out = sys.stderr if as_json else sys.stdout
    frames = getattr(args, "frames", None)
    if frames is not None and frames <= 0:
        raise InteropError(f"--frames must be positive, not {frames}")
    save = getattr(args, "save", None)
    ext = os.path.splitext(save)[1].lower() if save else ""
    if save and ext not in _IMAGE_EXT + _VIDEO_EXT:
        raise InteropError(f"--save writes the last frame with its boxes (.png/.jpg) or the whole run as a video "
                           f"(.mp4/.mkv): give such a path, not {save!r}")
    progress = not getattr(args, "no_progress", False) and sys.stderr.isatty()
    res = run(getattr(args, "video", None), getattr(args, "model", None), getattr(args, "device", None), frames,
              getattr(args, "precision", None), progress=progress, keep_last=bool(save) and ext in _IMAGE_EXT)
    report(res, out)
    if save and ext in _VIDEO_EXT:
        print(f"  saved         {save_video(res, save)} ({res.frames} frames with their boxes)", file=out)
    elif save:
        print(f"  saved         {save_image(res, save)} (last frame with its boxes)", file=out)
    if as_json:
        out.flush()
        print(json.dumps(res.to_json()), file=sys.stdout, flush=True)
    return 0
