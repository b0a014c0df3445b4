"""Decode a video with PyAV and run OpenVINO text detection on every frame, zero-copy.

The decoder's I420 planes are mapped (not copied) into OpenVINO tensors; colour conversion, resize and
normalisation run inside the model. Usage:

    python examples/decode_infer.py [VIDEO] [--frames N]
"""

from __future__ import annotations

import argparse
import functools
import sys

import interop
from interop import textdet
from interop.cli_lines import error_line
from interop.clip import default_clip
from interop.pipeline import open_video

# one line on stderr in the interop CLI's style ("decode_infer: error: Type: message"); returns the exit status, 1
_error = functools.partial(error_line, "decode_infer")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("video", nargs="?", default=None)
    ap.add_argument("--frames", type=int, default=30, help="stop after N frames (default 30)")
    args = ap.parse_args(argv)
    if args.frames < 1:  # 0 or a negative count would run nothing, or every frame, without a word
        ap.error(f"argument --frames: must be a positive number of frames, not {args.frames}")
    need = textdet.missing_for_detection("av")
    if need:
        print(f"decode_infer: cannot run here: needs {need}", file=sys.stderr)
        return 2
    import av

    video = args.video or default_clip()
    try:
        container, _ = open_video(video)  # VideoInputError saying why for a missing, text, non-video file...
        return _run(container, args.frames)
    except interop.InteropError as e:  # interop's messages say what to do
        return _error(e)
    except av.error.FFmpegError as e:
        return _error(e, f"decoding {video!r} failed: {e.strerror or e}: the file is damaged; "
                         f"re-encode it or give another video")


def _run(container, frames: int) -> int:  # type: ignore[no-untyped-def]
    with container:
        stream = container.streams.video[0]
        w, h = stream.codec_context.width, stream.codec_context.height
        inf = interop.Inference(textdet.model_path(), input_size=textdet.input_size_for(w, h),
                                mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB)
        boxes: dict[int, list[textdet.TextBox]] = {}

        def on_result(outputs: dict, index: int) -> None:  # runs on OpenVINO's thread
            boxes[index] = textdet.boxes_from_map(next(iter(outputs.values())), w, h)

        with interop.copy_meter() as meter:
            for i, vf in enumerate(container.decode(stream)):
                if i == frames:
                    break
                frame = interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO)  # zero-copy
                inf.infer_async(frame, on_result, i)
            inf.wait_all()

    for i in sorted(boxes):
        print(f"frame {i:3d}: {len(boxes[i])} text boxes", *(b.bbox for b in boxes[i][:3]))
    print(f"device {inf.device}; {len(boxes)} frames; copies {meter.copies} ({meter.bytes} bytes)")
    inf.close()  # stop OpenVINO's request threads before the interpreter exits
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
