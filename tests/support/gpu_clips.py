"""Small clips for GPU tests, encoded with PyAV on the machine that runs them (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def make_clip(path: Path, codec: str = "libx264", width: int = 256, height: int = 144, frames: int = 30,
              pix_fmt: str = "yuv420p") -> Path:
    import av

    with av.open(str(path), "w") as out:
        s = out.add_stream(codec, rate=30)
        s.width, s.height, s.pix_fmt = width, height, pix_fmt
        s.options = {"preset": "ultrafast"} if codec in ("libx264", "libx265") else {}
        if codec == "libx265":
            s.options["x265-params"] = "log-level=error"
        yy, xx = np.mgrid[0:height, 0:width]
        for i in range(frames):
            rgb = np.stack([(xx * 3 + i * 4) % 256, (yy * 2 + i) % 256, ((xx + yy) // 2 + i * 8) % 256], -1).astype(np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


def nvdec(path: Path):
    """An input container decoding on NVDEC with frames kept on the GPU."""
    from interop.cuda import open_nvdec

    return open_nvdec(str(path))
