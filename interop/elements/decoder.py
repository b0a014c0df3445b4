"""PyAVDecoderSource: a video file decoded by PyAV (FFmpeg), as a Source of FFMPEG Frames (the decoder's own
planes, zero-copy; map them on with interop.map)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import InteropError
from ..frame import Frame
from .base import Source


class PyAVDecoderSource(Source):
    """Frames of the first video stream of ``path``; ``threads``: FFmpeg's thread type ("AUTO", "FRAME", "SLICE")."""

    def __init__(self, path: str, *, thread_type: str = "AUTO"):
        from ..backends import require

        av = require("av", "FFmpeg", "ffmpeg")
        if not isinstance(path, str) or not os.path.isfile(path):
            raise InteropError(f"video {path!r} not found: give a video file path")
        try:
            self._container: Any = av.open(path)
        except av.error.FFmpegError as e:  # type: ignore[attr-defined]
            raise InteropError(f"FFmpeg cannot open {path!r}: {e}") from e
        if not self._container.streams.video:
            self._container.close()
            raise InteropError(f"{path!r} has no video stream")
        stream = self._container.streams.video[0]
        stream.thread_type = thread_type
        self._frames = self._container.decode(stream)
        self.frames = 0

    def read(self) -> Frame | None:
        import interop

        if self._container is None:
            return None
        vf = next(self._frames, None)
        if vf is None:
            return None
        self.frames += 1
        f = interop.wrap(vf)
        assert isinstance(f, Frame)
        return f

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
