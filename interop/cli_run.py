"""``interop run`` on the command line: options checked, the progress bar, the report, ``--save`` and ``--json``.

The run itself is ``interop.pipeline.run``, which returns a RunResult and never writes to stdout/stderr; everything a
user reads on the terminal is written here.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from .cli_lines import json_line
from .errors import InteropError
from .pipeline import (
    _IMAGE_EXT,
    _VIDEO_EXT,
    ModelInput,
    OutputPathError,
    RunArgumentError,
    RunResult,
    check_save_path,
    run,
    save_image,
    save_video,
)

if TYPE_CHECKING:
    from .streams import MultiRunResult


def _n(count: int, word: str) -> str:
    """``count`` ``word``s, singular for one ("1 frame", "2 frames")."""
    return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('x') else 's'}"


def report(res: RunResult, out: TextIO) -> None:
    """The human-readable report."""
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"interop run: {res.video} ({res.width}x{res.height}) -> {res.model} on {res.device}"
      + (f", model input {res.input_size[0]}x{res.input_size[1]}" if res.input_size else "")
      + (" (decoded on NVDEC, pre-processed on the GPU)" if res.nvdec else ""))
    p(f"  frames        {res.frames}" + (f" of {res.declared_frames} declared" if res.declared_frames > res.frames
                                            else "") + (f"   ({res.decode_errors} damaged packets skipped)"
                                                        if res.decode_errors else ""))
    if len(res.sizes) > 1:
        p("  sizes         " + ", ".join(f"{w}x{h} from frame {first}" for first, w, h in res.sizes)
          + "   (results in each frame's own coordinates)")
    for fmt, to in res.converted.items():
        p(f"  converted     {fmt} -> {to} on every such frame (allow_copy: counted in copies)")
    p(f"  fps           {res.fps:.1f}   ({_n(res.frames, 'frame')} in {res.wall:.3f} s; model compilation {res.compile:.2f} s excluded)")
    p(f"  stages (s)    decode {res.decode:.3f}   map {res.map:.3f}   infer (waiting for results) {res.infer:.3f}")
    p(f"  copies        {res.copies}   bytes copied {res.bytes_copied}   (copy_meter over the run)")
    for r in res.copy_records[:5]:
        p(f"                copy by {r.mapper}: {r.bytes} bytes")
    p(f"  output bytes  {res.output_bytes}   (results read out of the infer requests; not a mapper copy)")
    if res.boxes:
        counts = [len(res.boxes.get(i, [])) for i in range(res.frames)]
        p(f"  text boxes    {sum(counts)} in {_n(res.frames, 'frame')} (per frame: min {min(counts)}, "
          f"mean {np.mean(counts):.1f}, max {max(counts)})")
        show = sorted({0, res.frames // 2, res.frames - 1})
        for i in show:
            bs = res.boxes.get(i, [])
            p(f"    frame {i:4d}: {_n(len(bs), 'box')} " + " ".join(f"[{x0},{y0} {x1 - x0}x{y1 - y0}]" for x0, y0, x1, y1 in
                                                       (b.bbox for b in bs)))
    elif res.outputs:
        for k, v in next(iter(res.outputs.values())).items():
            p(f"  output {k}: {v}")


class _Bar:
    """A tqdm bar on stderr, made when the run says how many frames to expect (``run``'s ``on_progress``): the
    bar is the CLI's, the library only counts. Without tqdm, no bar."""

    def __init__(self) -> None:
        self._bar: Any = None

    def __call__(self, done: int, total: int | None) -> None:  # the run's result thread, after each frame
        if self._bar is None:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, unit="frame", file=sys.stderr, leave=False, desc="interop run")
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def model_input(args: Any) -> ModelInput | None:
    """--mean, --scale, --bgr as the run's ModelInput (None when none is given)."""
    mean, scale, bgr = getattr(args, "mean", None), getattr(args, "scale", None), bool(getattr(args, "bgr", False))
    if mean is None and scale is None and not bgr:
        return None
    one = lambda v: None if v is None else (v[0] if len(v) == 1 else tuple(v))  # noqa: E731
    return ModelInput(mean=one(mean), scale=one(scale), rgb=not bgr)


def main(args: argparse.Namespace) -> int:
    """``interop run``: args has video, model, device, frames, save, json, precision, no_progress, allow_copy."""
    as_json = bool(getattr(args, "json", False))
    out = sys.stderr if as_json else sys.stdout
    frames = getattr(args, "frames", None)
    if frames is not None and frames <= 0:
        raise RunArgumentError(f"--frames must be a positive number of frames, not {frames} (leave it out for all)")
    input_size = getattr(args, "input_size", None)
    if input_size is not None and min(input_size) <= 0:
        raise RunArgumentError(f"--input-size W H must be positive, not {' '.join(map(str, input_size))}")
    save = getattr(args, "save", None)
    ext = check_save_path(save) if save else ""
    bar = _Bar() if not getattr(args, "no_progress", False) and sys.stderr.isatty() else None
    try:
        res = run(getattr(args, "video", None), getattr(args, "model", None), getattr(args, "device", None), frames,
                  getattr(args, "precision", None), keep_last=bool(save) and ext in _IMAGE_EXT,
                  input_size=tuple(input_size) if input_size else None,  # type: ignore[arg-type]
                  allow_copy=bool(getattr(args, "allow_copy", False)), on_progress=bar, model_input=model_input(args),
                  nvdec=bool(getattr(args, "nvdec", False)))
    finally:
        if bar is not None:
            bar.close()
    report(res, out)
    try:
        if save and ext in _VIDEO_EXT:
            print(f"  saved         {save_video(res, save)} ({_n(res.frames, 'frame')} with their boxes"
                  + (", scaled to the first frame's size" if len(res.sizes) > 1 else "") + ")", file=out)
        elif save:
            print(f"  saved         {save_image(res, save)} (last frame with its boxes)", file=out)
    except OSError as e:  # the folder went away or filled up while the video ran
        if isinstance(e, InteropError):
            raise
        raise OutputPathError(f"could not write --save {save!r}: {e.strerror or e}") from e
    if as_json:
        out.flush()
        json_line(res.to_json())
    return 0


# ---- the command line (``interop run A B ...``) ----------------------------------------------------------


def streams_main(args: Any) -> int:
    """``interop run`` with several inputs: a line per stream as it goes (stderr), a report, --json, --save."""
    from .pipeline import _IMAGE_EXT, _VIDEO_EXT, RunArgumentError, check_save_path, save_image, save_video
    from .streams import StreamResult, run_streams, save_path

    inputs = list(args.video)
    as_json = bool(getattr(args, "json", False))
    out = sys.stderr if as_json else sys.stdout
    save = getattr(args, "save", None)
    ext = check_save_path(save) if save else ""
    input_size = getattr(args, "input_size", None)
    if input_size is not None and min(input_size) <= 0:
        raise RunArgumentError(f"--input-size W H must be positive, not {' '.join(map(str, input_size))}")
    show = not getattr(args, "no_progress", False)
    last_line = [0.0] * len(inputs)
    lock = threading.Lock()

    def progress(k: int, done: int, total: int | None) -> None:  # a line per stream, at most one a second each
        now = time.monotonic()
        if show and (now - last_line[k] >= 1.0 or done == total):
            last_line[k] = now
            with lock:
                print(f"[stream {k}] {inputs[k]}: {done}" + (f"/{total}" if total else "")
                      + (" frame" if (total or done) == 1 else " frames"),
                      file=sys.stderr, flush=True)

    def ended(s: StreamResult) -> None:
        if show:
            state = f"error: {s.error}" if s.error else "done"
            print(f"[stream {s.index}] {s.run.video}: {_n(s.run.frames, 'frame')}, {state}", file=sys.stderr, flush=True)

    try:
        res = run_streams(inputs, getattr(args, "model", None), getattr(args, "device", None),
                          getattr(args, "frames", None), getattr(args, "precision", None),
                          tuple(input_size) if input_size else None,  # type: ignore[arg-type]
                          keep_last=bool(save) and ext in _IMAGE_EXT, on_progress=progress, on_stream_end=ended,
                          allow_copy=bool(getattr(args, "allow_copy", False)),
                          decode=getattr(args, "decode", None), model_input=model_input(args))
    except KeyboardInterrupt as e:
        print("interop run: interrupted (every stream stopped)", file=sys.stderr, flush=True)
        partial = getattr(e, "result", None)
        if as_json:  # stdout is one JSON line on every path: the streams so far, "interrupted": true
            doc = partial.to_json() if partial is not None else \
                {"error": {"type": "KeyboardInterrupt", "message": "interrupted (every stream stopped)"}}
            json_line(doc)
        return 130
    streams_report(res, out)
    if save:
        for s in res.streams:
            if s.error is not None or not s.run.frames:
                # saving re-reads the input, which failed: said, not skipped silently
                print(f"  not saved     stream {s.index} ({'it ended with an error' if s.error else 'no frame'})",
                      file=out)
                continue
            p = save_path(save, s.index, len(res.streams))
            if ext in _VIDEO_EXT:
                print(f"  saved         {save_video(s.run, p)} (stream {s.index})", file=out)
            else:
                print(f"  saved         {save_image(s.run, p)} (stream {s.index}, last frame with its boxes)", file=out)
    if as_json:
        out.flush()
        json_line(res.to_json())
    return 1 if any(s.error for s in res.streams) else 0


def streams_report(res: MultiRunResult, out: Any) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"interop run: {_n(len(res.streams), 'stream')} -> {res.model} on {res.device}"
      + (f", model input {res.input_size[0]}x{res.input_size[1]}" if res.input_size else ""))
    # decoded in threads, a stream's own compile (a layout other than the first: another size, pixel format or
    # colour matrix) runs inside the time while the others go on
    inside = sum(s.run.compile for s in res.streams) if res.decode == "threads" else 0.0
    p(f"  frames        {res.frames}   fps {res.fps:.1f} aggregate ({res.wall:.3f} s; model compilation "
      f"{res.compile:.2f} s excluded" + (f"; {inside:.2f} s compiling other layouts inside it, the other streams "
                                         f"going on" if inside > max(0.05, 0.2 * res.compile) else "") + ")")
    if res.decode == "threads":
        p(f"  copies        {res.total_copies}   bytes copied {res.total_bytes_copied}   (decoded in threads of this "
          f"process: frames reach the model in place"
          + (f"; {_n(res.total_copies - res.copies, '--allow-copy conversion')}" if res.total_copies > res.copies else "")
          + ")")
    else:
        p(f"  copies        {res.total_copies}   bytes copied {res.total_bytes_copied}   (each decoded frame written "
          f"into its worker's pool: PyAV cannot decode into it; {res.copies} in the inference process)")
    p(f"  output bytes  {res.output_bytes}   (results read out of the infer requests; not a mapper copy)")
    for s in res.streams:
        r = s.run
        line = (f"  stream {s.index}      {r.video} ({r.width}x{r.height}): {_n(r.frames, 'frame')}, "
                f"{r.frames / s.wall if s.wall > 0 else 0:.1f} fps, copies {s.worker_copies}")
        if r.boxes:
            line += f", text boxes {sum(len(b) for b in r.boxes.values())}"
        if s.error:
            line += f"   ERROR {s.error_type}: {s.error}"
        p(line)
        for w in r.warnings:  # skipped packets, a stream shorter than declared, a size change (the error is above)
            if w != s.error:
                p(f"    warning     {w}")
