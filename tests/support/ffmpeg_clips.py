"""Small H.264 clips made with PyAV's bundled libx264 for the FFmpeg tests (nothing is downloaded).

A pytest plugin (tests/conftest.py lists it in ``pytest_plugins``) that tests also import helpers from. PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from interop.clip import encode, gradient
from tests.support.requirements import need_module


def pattern(width: int, height: int, i: int) -> np.ndarray:
    """An RGB test image that moves with the frame index ``i``: frame ``i`` of the clips below."""
    return gradient(i, width, height)


def make_clip(path: Path, width: int, height: int, frames: int, pix_fmt: str = "yuv420p") -> Path:
    """H.264 (libx264, ultrafast), 25 fps, of ``pattern``."""
    return encode(path, frames, width, height, pix_fmt=pix_fmt, fps=25, pattern="gradient")


def raw_clip(tmp_path: Path, fmt: str) -> str:
    """A few frames in pixel format ``fmt`` (rawvideo keeps any format) that no model input takes as it is."""
    import av

    path = tmp_path / f"raw_{fmt}.nut"
    with av.open(str(path), "w") as o:
        s = o.add_stream("rawvideo", rate=25)
        s.width, s.height, s.pix_fmt = 96, 64, fmt
        for i in range(3):
            vf = av.VideoFrame.from_ndarray(np.full((64, 96, 3), 40 * i, np.uint8), format="rgb24").reformat(format=fmt)
            for pkt in s.encode(vf):
                o.mux(pkt)
        for pkt in s.encode():
            o.mux(pkt)
    return str(path)


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_module("av")
    return tmp_path_factory.mktemp("ffmpeg_clips")


@pytest.fixture(scope="session")
def clip_854(clip_dir: Path) -> Path:
    """854x480: odd width, so decoded planes have padded rows (Y pitch 896 > 854)."""
    return make_clip(clip_dir / "odd_854x480.mp4", 854, 480, 12)


@pytest.fixture(scope="session")
def clip_small(clip_dir: Path) -> Path:
    return make_clip(clip_dir / "small_320x240.mp4", 320, 240, 12)


@pytest.fixture(scope="session")
def clip_yuvj(clip_dir: Path) -> Path:
    return make_clip(clip_dir / "full_range_160x120.mp4", 160, 120, 3, pix_fmt="yuvj420p")


def decode(path: Path) -> list:
    import av

    with av.open(str(path)) as c:
        return list(c.decode(video=0))
