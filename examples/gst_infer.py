"""GStreamer -> interop -> OpenVINO -> GStreamer: text detection on a decoded stream, boxes drawn, re-encoded.

Frames come from a GStreamer pipeline (filesrc ! decodebin ! appsink: any container and codec GStreamer can read;
the frames stay in system memory and go zero-copy into OpenVINO), the detections are drawn onto the frame and the
frame goes back into GStreamer (appsrc ! videoconvert ! avenc_mpeg4 ! mp4mux ! filesink). Drawing needs a writable
frame, and a decoder's frames are read-only references: each drawn frame is a counted copy (``allow_copy=True``);
everything else is zero-copy. The last line printed is JSON: frames, copies, bytes copied. Bad input (a missing
file, one GStreamer cannot decode) is one line on stderr, exit status 1.
Usage:

    python examples/gst_infer.py [VIDEO] [--out OUT.mp4] [--frames N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import numpy as np

import interop
from interop import AccessMode, MemoryType, textdet
from interop.cli_lines import error_line
from interop.clip import default_clip


def draw_luma(y: np.ndarray, boxes: list[textdet.TextBox], value: int = 255) -> None:
    """Box outlines drawn into a Y plane (in place), 2 pixels wide."""
    h, w = y.shape[:2]  # a packed RGB plane too
    for b in boxes:
        x0, y0, x1, y1 = (int(v) for v in b.bbox)
        x0, x1 = max(0, min(x0, w - 1)), max(0, min(x1, w - 1))
        y0, y1 = max(0, min(y0, h - 1)), max(0, min(y1, h - 1))
        y[y0:y0 + 2, x0:x1 + 1] = value
        y[max(y1 - 1, 0):y1 + 1, x0:x1 + 1] = value
        y[y0:y1 + 1, x0:x0 + 2] = value
        y[y0:y1 + 1, max(x1 - 1, 0):x1 + 1] = value


# one line on stderr in the interop CLI's style ("gst_infer: error: Type: message"); returns the exit status, 1
_error = functools.partial(error_line, "gst_infer")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("video", nargs="?", default=None)
    ap.add_argument("--out", default="gst_infer.mp4")
    ap.add_argument("--frames", type=int, default=0, help="stop after N frames (0: all)")
    args = ap.parse_args(argv)
    need = textdet.missing_for_detection("gi")
    if need:
        print(f"gst_infer: cannot run here: needs {need}", file=sys.stderr)
        return 2
    from interop.elements import PipelineError

    video = args.video or default_clip()
    if not os.path.isfile(video):
        return _error("FileNotFoundError", f"video {video!r} not found (or not a file): give a video file path (or "
                                           f"no VIDEO, for the bundled clip)")
    if os.path.splitext(args.out)[1].lower() != ".mp4":  # the pipeline below muxes MP4, whatever the name says
        return _error("UsageError", f"--out {args.out!r}: this example writes an MP4 file; give a name ending in .mp4")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        return _error("FileNotFoundError", f"cannot write {args.out!r}: its folder {folder!r} does not exist; "
                                           f"create it or give another --out")
    try:
        return _run(video, args.out, args.frames)
    except PipelineError as e:  # GStreamer's own error: an input it cannot read, an output it cannot write
        return _error(e, f"GStreamer failed on {video!r} -> {args.out!r}: {e}. Give a video file GStreamer can "
                         f"decode and a writable --out")
    except interop.InteropError as e:  # interop's messages say what to do
        return _error(e)


def _run(video: str, out_path: str, frames: int) -> int:
    from interop.elements import AppSinkSource, AppSrcSink

    # decodebin picks the demuxer and decoder for whatever the file holds (MP4, MKV, NUT, TS...); the caps keep the
    # decoded frames in system memory, which the model reads in place. The file names are set as properties, not
    # written into the pipeline text, so that any path (spaces, quotes) works.
    src = AppSinkSource("filesrc name=in ! decodebin ! video/x-raw ! appsink")
    src.pipeline.get_by_name("in").set_property("location", video)
    sink = AppSrcSink("appsrc ! videoconvert ! avenc_mpeg4 ! mp4mux ! filesink name=out")
    sink.pipeline.get_by_name("out").set_property("location", out_path)
    inf = None
    boxes_total = 0
    with interop.copy_meter() as meter:
        with src, sink:
            for f in src:
                if inf is None:
                    inf = interop.Inference(textdet.model_path(), "CPU", input_size=textdet.input_size_for(f.width, f.height),
                                            mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB)
                out = inf.infer(f)  # zero-copy: the decoder's planes become the model's input
                boxes = textdet.boxes_from_map(next(iter(out.values())), f.width, f.height)
                boxes_total += len(boxes)
                # the decoder's frame is read-only: draw into a deep copy of it (counted by the meter)
                c = interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)
                draw_luma(np.asarray(c[0]), boxes)
                drawn = c.parent  # the copy's Gst frame
                c.release()  # unmapped before GStreamer reads it
                sink.write(drawn)
                if frames and sink.frames >= frames:
                    break
    print(json.dumps({"frames": sink.frames, "boxes": boxes_total, "copies": meter.copies,
                      "bytes_copied": meter.bytes, "out": out_path}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
