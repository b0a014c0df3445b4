"""Small clips for GPU tests, encoded with PyAV on the machine that runs them (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from interop.clip import encode


def picture(i: int, width: int, height: int) -> np.ndarray:
    """Frame ``i`` of the GPU test clips: RGB ramps moving at different speeds in each channel."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack([(xx * 3 + i * 4) % 256, (yy * 2 + i) % 256, ((xx + yy) // 2 + i * 8) % 256], -1).astype(np.uint8)


def make_clip(path: Path, codec: str = "libx264", width: int = 256, height: int = 144, frames: int = 30,
              pix_fmt: str = "yuv420p") -> Path:
    """A clip of ``picture`` (30 fps; libx264/libx265 ultrafast)."""
    return encode(path, frames, width, height, codec=codec, pix_fmt=pix_fmt, pattern=picture)


def nvdec(path: Path):
    """An input container decoding on NVDEC with frames kept on the GPU."""
    from interop.cuda import open_nvdec

    return open_nvdec(str(path))
