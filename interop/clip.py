"""Synthetic clips: one encoder for every clip the library, its benchmarks and its tests make, and the bundled clip.

``encode(dest, frames, width, height, ...)`` encodes generated pictures (a named ``pattern`` or your own function)
or your own frames with PyAV. The bundled clip (``interop/data/text.mp4``) is what ``interop run`` decodes by
default; ``make_clip`` makes it (moving rendered text), and ``python -m interop.clip`` regenerates it (the same
pictures and the same bytes every time with libx264's options here; the shipped file was encoded before x264's
macroblock tree was turned off, so a regenerated one is a slightly different bitstream of the same pictures).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .errors import (
    InteropError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
    missing_backend,
)

log = logging.getLogger("interop")

Dest = TypeVar("Dest", bound="str | os.PathLike[str] | io.IOBase")
#: A picture function: ``pattern(i, width, height)`` is frame ``i``, an ndarray in ``array_format`` or an
#: av.VideoFrame.
Pattern = Callable[[int, int, int], Any]

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
DEFAULT_CLIP = os.path.join(DATA_DIR, "text.mp4")
DEFAULT_SPEC: dict[str, int] = {"width": 640, "height": 480, "frames": 150, "fps": 30}

_LINES = ["ZERO-COPY INTEROP", "decode -> map -> infer", "FFmpeg  OpenVINO  NPU", "frame 0000",
          "HELLO WORLD 2026", "no pixel copied"]


def default_clip() -> str:
    """Path of the bundled clip (150 frames, 640x480, H.264)."""
    if not os.path.isfile(DEFAULT_CLIP):
        raise InteropError(f"the bundled clip {DEFAULT_CLIP} is missing: regenerate it with `python -m interop.clip` "
                           f"or pass a video path")
    return DEFAULT_CLIP


def render(i: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """Frame ``i`` of the ``"text"`` pattern (the bundled clip's) as a BGR uint8 image: a soft moving background and
    scrolling text lines. Needs OpenCV."""
    import cv2

    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = i / 30.0
    bg = 60 + 40 * np.sin(xx / width * 3 + t * 0.7 + seed) * np.cos(yy / height * 2 - t * 0.4)
    img = np.empty((height, width, 3), np.uint8)
    img[..., 0] = np.clip(bg + 30, 0, 255)
    img[..., 1] = np.clip(bg * 0.8 + 20, 0, 255)
    img[..., 2] = np.clip(bg * 0.6 + 40, 0, 255)
    scale = height / 480.0
    n = len(_LINES)
    for k, text in enumerate(_LINES):
        if text.startswith("frame"):
            text = f"frame {i:04d}"
        fs = (0.9 + 0.25 * (k % 3)) * scale
        thick = max(1, int(round(2 * scale)))
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, fs, thick)
        speed = (2 + k) * scale * (1 if k % 2 == 0 else -1)
        span = max(1, width - tw - 8)  # bounce between the edges so the whole line stays visible
        pos = (k * 97 * scale + abs(speed) * i) % (2 * span)
        x = 4 + int(pos if pos < span else 2 * span - pos)
        if speed < 0:
            x = width - tw - x
        y = int((k + 1) * height / (n + 1) + 10 * scale * np.sin(t * 1.3 + k))
        colour = (245, 245, 245) if k % 2 == 0 else (20, 20, 30)
        cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, fs, colour, thick, cv2.LINE_AA)
    return img


def gradient(i: int, width: int, height: int) -> np.ndarray:
    """Frame ``i`` of the ``"gradient"`` pattern: an RGB ramp that moves with ``i`` (cheap; no OpenCV)."""
    img = np.empty((height, width, 3), np.uint8)
    img[..., 0] = (np.arange(width)[None, :] + 7 * i) % 256
    img[..., 1] = (np.arange(height)[:, None] * 2 + 3 * i) % 256
    img[..., 2] = 128
    return img


#: name -> (picture function, the av format of the arrays it returns)
PATTERNS: dict[str, tuple[Pattern, str]] = {"gradient": (gradient, "rgb24"), "text": (render, "bgr24")}


def encode(dest: Dest, frames: int | Iterable[Any], width: int, height: int, *, codec: str = "libx264",
           pix_fmt: str = "yuv420p", fps: int = 30, pattern: str | Pattern = "gradient", array_format: str | None = None,
           options: dict[str, str] | None = None, container: str | None = None, thread_type: str | None = None,
           reuse: bool = False) -> Dest:
    """Encode a clip with PyAV into ``dest`` (a path, or a writable binary file object) and return ``dest``.

    ``frames`` is a count (frame ``i`` is ``pattern(i, width, height)``; ``pattern`` is a name of
    :data:`PATTERNS` or your own function) or an iterable of pictures: av.VideoFrames or ndarrays in
    ``array_format`` (default: the named pattern's, else ``"rgb24"``). Every picture must be ``width`` x
    ``height``: PyAV would otherwise rescale it silently. ``options`` are the encoder's (libx264/libx265 get
    ``preset=ultrafast`` unless given; libx264 gets ``x264-params=mbtree=0`` unless ``options`` set x264-params,
    whose caller adds ``mbtree=0`` for repeatable bytes); ``container`` the muxer (default: from the file name;
    ``"mp4"`` for a file object); ``thread_type`` the encoder's threading (``"AUTO"``). With libx264, the same bytes
    for fixed arguments and encoder threads (other encoders are not checked). A path is written to a temporary file
    renamed into place, so it is never left half-written; ``reuse=True`` returns an existing non-empty file untouched
    (a cache for benchmark clips).

    Bad arguments raise InvalidTensorError / UnsupportedTypeError; an encoder or muxer this FFmpeg lacks, or a size
    it refuses, UnsupportedFormatError; no PyAV, BackendUnavailableError.
    """
    for name, v in (("width", width), ("height", height), ("fps", fps)):
        if type(v) is not int or v < 1:
            raise InvalidTensorError(f"encode(): {name} must be a positive int, not {v!r}")
    if isinstance(frames, np.integer):
        frames = int(frames)
    if isinstance(frames, bool) or (isinstance(frames, int) and frames < 1):
        raise InvalidTensorError(f"encode(): frames must be a positive count or an iterable of pictures, not {frames!r}")
    if isinstance(pattern, str):
        if pattern not in PATTERNS:
            raise InvalidTensorError(f"encode(): unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}, or pass "
                                     f"a function pattern(i, width, height)")
        pattern, implied = PATTERNS[pattern]
        array_format = array_format or implied
    elif not callable(pattern):
        raise UnsupportedTypeError(f"encode(): pattern must be a name ({', '.join(PATTERNS)}) or a function "
                                   f"pattern(i, width, height), not {type(pattern).__name__}")
    if isinstance(frames, int):
        pictures: Iterable[Any] = (pattern(i, width, height) for i in range(frames))
    elif isinstance(frames, Iterable) and not isinstance(frames, (str, bytes, np.ndarray)):
        pictures = frames
    else:
        raise UnsupportedTypeError(f"encode(): frames must be a count or an iterable of av.VideoFrames/ndarrays, "
                                   f"not {type(frames).__name__}")
    try:
        import av
    except ImportError as e:
        raise missing_backend("ffmpeg", "av", "ffmpeg") from e

    if isinstance(dest, (str, os.PathLike)):
        path = Path(dest)
        if reuse and path.is_file() and path.stat().st_size > 0:
            return dest
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.part{path.suffix}")
        try:
            _encode(av, str(tmp), pictures, width, height, codec, pix_fmt, fps, array_format or "rgb24", options,
                    container, thread_type)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return dest
    if not hasattr(dest, "write"):
        raise UnsupportedTypeError(f"encode(): dest must be a path or a writable binary file object, "
                                   f"not {type(dest).__name__}")
    _encode(av, dest, pictures, width, height, codec, pix_fmt, fps, array_format or "rgb24", options,
            container or "mp4", thread_type)
    return dest


def _encode(av: Any, dest: Any, pictures: Iterable[Any], width: int, height: int, codec: str, pix_fmt: str, fps: int,
            array_format: str, options: dict[str, str] | None, container: str | None, thread_type: str | None) -> None:
    opts = {"preset": "ultrafast"} if codec in ("libx264", "libx265") else {}
    if codec == "libx264":
        # x264's macroblock-tree rate control (on in every preset but ultrafast and superfast) made the bitstream
        # differ from one encode of the same pictures to the next, even on one thread (why is not known: x264 is
        # meant to repeat itself there): off, the clip is the same bytes every time
        opts["x264-params"] = "mbtree=0"
    if codec == "libx265":
        opts["x265-params"] = "log-level=error"
    opts.update(options or {})
    try:
        with av.open(dest, "w", format=container) as out:
            s: Any = out.add_stream(codec, rate=fps)
            s.width, s.height, s.pix_fmt = width, height, pix_fmt
            if thread_type is not None:
                s.thread_type = thread_type
            s.options = opts
            for i, pic in enumerate(pictures):
                vf = pic if isinstance(pic, av.VideoFrame) else av.VideoFrame.from_ndarray(pic, format=array_format)
                if (vf.width, vf.height) != (width, height):
                    raise InvalidTensorError(f"encode(): picture {i} is {vf.width}x{vf.height}, the clip "
                                             f"{width}x{height}; make every picture the clip's size")
                for pkt in s.encode(vf):
                    out.mux(pkt)
            for pkt in s.encode():
                out.mux(pkt)
    except InteropError:
        raise
    except (av.FFmpegError, ValueError) as e:  # no such encoder/muxer/pixel format, or a size the encoder refuses
        raise UnsupportedFormatError(f"encode(): this FFmpeg cannot encode {width}x{height} {pix_fmt} with {codec} "
                                     f"into {container or 'the container of ' + repr(str(dest))} ({e}); pick another "
                                     f"codec, pixel format or size (4:2:0 needs even sizes)") from e


def make_clip(path: str, width: int = 640, height: int = 480, frames: int = 150, fps: int = 30, *,
              crf: int = 28, preset: str = "medium", seed: int = 0, threads: int = 1) -> str:
    """The synthetic text clip (``render``) as H.264 yuv420p with libx264: the bundled clip's recipe.
    Deterministic for fixed arguments."""
    return encode(path, frames, width, height, fps=fps, pattern=lambda i, w, h: render(i, w, h, seed),
                  array_format="bgr24", options={"crf": str(crf), "preset": preset, "threads": str(threads)})


#: how the clip script is run (its usage and error lines say so)
PROG = "python -m interop.clip"


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as the interop CLI's one typed line (``PROG: error: UsageError: ...``), exit 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        from .cli_lines import UsageError, error_line

        error_line(self.prog, UsageError.__name__, f"{message} (see `{self.prog} --help`)")
        self.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from .cli_lines import at_least_one as positive  # the interop CLI's own check of a count

    w, h, n = DEFAULT_SPEC["width"], DEFAULT_SPEC["height"], DEFAULT_SPEC["frames"]
    p = _Parser(prog=PROG, description=f"(Re)generate the synthetic text clip (H.264 yuv420p, {DEFAULT_SPEC['fps']} "
                                       f"fps, deterministic): the bundled one, or one of another size elsewhere.",
                epilog=f"WIDTH HEIGHT FRAMES: all three or none ({w} {h} {n}); even sizes (4:2:0).")
    p.add_argument("path", nargs="?", default=DEFAULT_CLIP, metavar="PATH",
                   help="where to write the clip (default: the bundled clip, interop/data/text.mp4)")
    p.add_argument("width", nargs="?", type=positive, metavar="WIDTH", help=f"frame width in pixels ({w})")
    p.add_argument("height", nargs="?", type=positive, metavar="HEIGHT", help=f"frame height in pixels ({h})")
    p.add_argument("frames", nargs="?", type=positive, metavar="FRAMES", help=f"number of frames ({n})")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m interop.clip [PATH] [WIDTH HEIGHT FRAMES]``: (re)generate a clip (default: the bundled one).
    Returns the exit status: 0, 1 when the clip cannot be written (one error line), 2 for a usage error."""
    import sys

    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    numbers = [v for v in (args.width, args.height, args.frames) if v is not None]
    if len(numbers) not in (0, 3):
        parser.error(f"give WIDTH HEIGHT FRAMES, all three or none, not {len(numbers)} "
                     f"number{'s' if len(numbers) != 1 else ''} ({' '.join(map(str, numbers))})")
    spec = dict(DEFAULT_SPEC)
    if numbers:
        spec.update(width=args.width, height=args.height, frames=args.frames)
    try:
        make_clip(args.path, spec["width"], spec["height"], spec["frames"], spec["fps"])
    except (InteropError, OSError) as e:  # a size the encoder refuses, a folder that cannot be written
        from .cli_lines import error_line

        where = getattr(e, "filename", None) if not isinstance(e, InteropError) else None
        return error_line(PROG, e, f"{e.strerror or e}: {where!r}" if isinstance(e, OSError) and where else None)
    log.info("%s: %d bytes", args.path, os.path.getsize(args.path))
    return 0


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the script's own output; the library only logs
    sys.exit(main())
