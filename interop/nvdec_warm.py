"""Keep NVDEC warm: one idle decoder per device, held while the process runs.

Closing a process's *last* NVDEC decoder is slow: NVIDIA's decoder service ends on a tick every ~250 ms counted
from when the decoders were made, so that close takes anything up to ~250 ms while every other close takes ~22 ms
(`bench/cuda_teardown.py`, H100, driver 580). A pipeline pays it each time its decoders all end: file after file
with one decoder, or N streams that finish together, where it rounds the whole run up to the next tick. With one
idle decoder held in the process, no close is the last one and each takes ~22 ms.

``open_nvdec()`` calls ``keep_nvdec_warm(device)`` first (``keep_warm=False`` opts out). The idle decoder decodes
one 256x144 H.264 picture (made in memory by libx264 once per process) and keeps its container open until
``release_nvdec_warm()`` or exit. It costs one NVDEC session and ~8 MiB of GPU memory per device, and ~0.15 s
once per process to make (H100: clip 46 ms, decoder 104 ms).
"""

from __future__ import annotations

import atexit
import io
import logging
import threading
from typing import Any

from .errors import BackendUnavailableError

_lock = threading.Lock()
_held: dict[int, Any] = {}  # device -> the idle decoder's open av container
_failed: dict[int, str] = {}  # device -> why no idle decoder could be held there (not tried again)
_clip: list[bytes] = []  # the one-picture H.264 clip, made on first use
log = logging.getLogger("interop")


def _tiny_clip() -> bytes:
    """One 256x144 H.264 picture in MP4, made in memory (nothing shipped, nothing downloaded)."""
    if not _clip:
        import av
        import numpy as np

        buf = io.BytesIO()
        try:
            with av.open(buf, "w", format="mp4") as out:
                s: Any = out.add_stream("libx264", rate=1)
                s.width, s.height, s.pix_fmt = 256, 144, "yuv420p"
                picture = av.VideoFrame.from_ndarray(np.full((216, 256), 128, np.uint8), format="yuv420p")
                for p in [*s.encode(picture), *s.encode()]:
                    out.mux(p)
        except (av.FFmpegError, ValueError) as e:  # an FFmpeg build without libx264
            raise BackendUnavailableError(f"cannot make the idle NVDEC decoder's clip ({e}); this PyAV's FFmpeg has "
                                          f"no libx264 encoder: pass keep_warm=False to open_nvdec") from e
        _clip.append(buf.getvalue())
    return _clip[0]


def keep_nvdec_warm(device: int = 0) -> None:
    """Hold one idle NVDEC decoder on ``device`` for the rest of the process (once per device; later calls return
    at once). Raises what ``open_nvdec`` raises where NVDEC cannot decode."""
    with _lock:
        if device in _held:
            return
        from .mappers.ffmpeg_to_cuda import open_nvdec

        c = open_nvdec(io.BytesIO(_tiny_clip()), device=device, keep_warm=False)
        try:
            for _vf in c.decode(video=0):  # FFmpeg makes the NVDEC decoder with the first picture
                break
        except BaseException:
            c.close()
            raise
        if not _held:
            atexit.register(release_nvdec_warm)
        _held[device] = c


def try_keep_nvdec_warm(device: int = 0) -> bool:
    """``keep_nvdec_warm(device)`` where it can be done (what ``open_nvdec`` calls): False, logged once, where it
    cannot; the caller's own open then says what is wrong with NVDEC."""
    if device in _held:
        return True
    if device in _failed:
        return False
    try:
        keep_nvdec_warm(device)
        return True
    except Exception as e:  # noqa: BLE001 - a speed-up, never a reason for the caller's open to fail
        _failed[device] = f"{type(e).__name__}: {e}"
        log.info("no idle NVDEC decoder held on device %d (%s): closing the last decoder may take up to ~250 ms",
                 device, _failed[device])
        return False


def nvdec_warm_devices() -> list[int]:
    """The devices on which an idle NVDEC decoder is held."""
    with _lock:
        return sorted(_held)


def release_nvdec_warm(device: int | None = None) -> None:
    """Close the idle decoder of ``device`` (all devices when None); the next close of a last decoder is slow
    again."""
    with _lock:
        for d in [device] if device is not None else list(_held):
            c = _held.pop(d, None)
            if c is not None:
                c.close()
