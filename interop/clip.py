"""Synthetic test clips with moving rendered text, and the clip bundled with interop.

The bundled clip (``interop/data/text.mp4``) is what ``interop run`` decodes by default. Regenerate it with
``python -m interop.clip`` (deterministic: same frames, same encoder settings). Benchmarks and tests make their
own clips with ``make_clip``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
DEFAULT_CLIP = os.path.join(DATA_DIR, "text.mp4")
DEFAULT_SPEC: dict[str, int] = {"width": 640, "height": 480, "frames": 150, "fps": 30}

_LINES = ["ZERO-COPY INTEROP", "decode -> map -> infer", "FFmpeg  OpenVINO  NPU", "frame 0000",
          "HELLO WORLD 2026", "no pixel copied"]


def default_clip() -> str:
    """Path of the bundled clip (150 frames, 640x480, H.264)."""
    if not os.path.isfile(DEFAULT_CLIP):
        from .errors import InteropError

        raise InteropError(f"the bundled clip {DEFAULT_CLIP} is missing: regenerate it with `python -m interop.clip` "
                           f"or pass a video path")
    return DEFAULT_CLIP


def render(i: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """Frame ``i`` of the synthetic clip as a BGR uint8 image: a soft moving background and scrolling text lines."""
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


def make_clip(path: str, width: int = 640, height: int = 480, frames: int = 150, fps: int = 30, *,
              crf: int = 28, preset: str = "medium", seed: int = 0, threads: int = 1) -> str:
    """Encode the synthetic clip as H.264 (yuv420p) with PyAV's libx264. Deterministic for fixed arguments."""
    import av

    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with av.open(path, "w") as out:
        s = out.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        s.options = {"crf": str(crf), "preset": preset, "threads": str(threads)}
        for i in range(frames):
            vf = av.VideoFrame.from_ndarray(render(i, width, height, seed), format="bgr24")
            for pkt in s.encode(vf.reformat(format="yuv420p")):
                out.mux(pkt)
        for pkt in s.encode():
            out.mux(pkt)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m interop.clip [PATH] [WIDTH HEIGHT FRAMES]``: (re)generate a clip (default: the bundled one)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    path = argv[0] if argv else DEFAULT_CLIP
    spec = dict(DEFAULT_SPEC)
    if len(argv) >= 4:
        spec.update(width=int(argv[1]), height=int(argv[2]), frames=int(argv[3]))
    make_clip(path, spec["width"], spec["height"], spec["frames"], spec["fps"])
    print(f"{path}: {os.path.getsize(path)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
