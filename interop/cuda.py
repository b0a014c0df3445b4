"""NVDEC and CUDA helpers, the public second tier of the CUDA backend: decode on NVDEC with frames kept on the GPU,
hand them to torch, keep NVDEC warm.

- ``open_nvdec(file)``: ``av.open`` decoding on NVDEC, frames left in GPU memory; ``nvdec_frames(file)`` decodes on
  a worker thread and yields CUDA Frames; ``from_video_frame(vf)`` is one such Frame of an NVDEC av.VideoFrame.
- ``torch_views(x)``: torch tensors over a CUDA tensor, a CUDA frame or an NVDEC av.VideoFrame, ordered after the
  producer on torch's current stream.
- ``keep_nvdec_warm(device)`` / ``release_nvdec_warm()``: one idle NVDEC decoder held per device (see below).
- ``exportable_empty(shape)``: CUDA memory that OpenCL can import (``cuda_to_opencl`` maps it without a copy).

Keeping NVDEC warm: closing a process's *last* NVDEC decoder is slow, because NVIDIA's decoder service ends on a
periodic tick counted from when the decoders were made (docs/cuda.md has the figures). A pipeline pays it each time
its decoders all end: file after file with one decoder, or N streams that finish together. With one idle decoder
held in the process no close is the last one. ``open_nvdec()`` calls ``try_keep_nvdec_warm(device)`` first
(``keep_warm=False`` opts out). The idle decoder decodes one 256x144 H.264 picture (made in memory by libx264 once
per process) and keeps its container open until ``release_nvdec_warm()`` or exit: one NVDEC session and a few MiB
of GPU memory per device.

Nothing here imports av or torch before a function needs them.
"""

from __future__ import annotations

import atexit
import io
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

from .errors import BackendUnavailableError, InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError
from .frame import Frame
from .tensor import Tensor
from .tensors.cuda import (
    LEGACY_STREAM,
    NVDEC_SW_FORMATS,
    CUDATensor,
    exportable_empty,
    unsupported_nvdec_format,
)
from .types import AccessMode, MemoryType

__all__ = [
    "open_nvdec",
    "nvdec_frames",
    "from_video_frame",
    "torch_views",
    "exportable_empty",
    "keep_nvdec_warm",
    "try_keep_nvdec_warm",
    "release_nvdec_warm",
    "nvdec_warm_devices",
]

log = logging.getLogger("interop")

# ---- decoding on NVDEC ----------------------------------------------------------------------------------------

_CU_CTX_SCHED_BLOCKING_SYNC = 4  # the primary-context flags FFmpeg insists on


def open_nvdec(file: Any, *, device: int = 0, frame_threads: bool = False, keep_warm: bool = True, **kw: Any) -> Any:
    """``av.open(file)`` decoding on NVDEC with frames kept on the GPU (``HWAccel('cuda', is_hw_owned=True)``).

    FFmpeg wants the device's primary CUDA context with blocking-sync flags; when torch or CuPy made it first
    (default flags), PyAV's open fails with "Operation not supported". Then the primary context is made current
    here and FFmpeg is told to use the current context: the frames land in the same context torch uses.
    ``frame_threads=True`` turns on FFmpeg's frame threads, which overlap the CPU side of several pictures (the gain
    depends on the clip: docs/cuda.md). ``keep_warm=True`` first holds one idle NVDEC decoder on the device for
    the process (``keep_nvdec_warm``), so closing this container never waits for the driver's teardown tick; where
    that cannot be done the open goes on without it.
    """
    import av
    from av.codec.hwaccel import HWAccel

    from .native.cuda_driver import driver

    if keep_warm:
        try_keep_nvdec_warm(device)

    dev = None if device == 0 else str(device)
    d = driver()
    flags, active = d.primary_state(device)
    if not active or flags == _CU_CTX_SCHED_BLOCKING_SYNC:
        c = av.open(file, hwaccel=HWAccel("cuda", device=dev, allow_software_fallback=False, is_hw_owned=True), **kw)
    else:
        d.push(device)
        try:
            c = av.open(file, hwaccel=HWAccel("cuda", device=dev, allow_software_fallback=False, is_hw_owned=True,
                                              options={"primary_ctx": "0", "current_ctx": "1"}), **kw)
        finally:
            d.pop()
    if frame_threads:
        for s in c.streams.video:
            s.thread_type = "AUTO"
    return c


_mapper: list[Any] = []  # the one FFMPEG -> CUDA mapper from_video_frame maps with


def from_video_frame(vf: Any, *, parent: Any = None) -> Frame:
    """A CUDA Frame over an NVDEC-decoded av.VideoFrame (format 'cuda'), zero-copy: what ``interop.map(vf, CUDA)``
    gives, with errors for frames it cannot take. ``parent`` replaces the frame's parent (by default the FFmpeg
    frame, made on first ask), e.g. to keep a source alive."""
    if vf.format.name != "cuda":
        raise InvalidTensorError(f"this av.VideoFrame is a software frame ({vf.format.name}); decode with "
                                 f"HWAccel('cuda', is_hw_owned=True) or map it with allow_copy=True to upload it")
    sw = vf.sw_format.name
    if sw not in NVDEC_SW_FORMATS:
        raise unsupported_nvdec_format(sw)
    if not _mapper:
        from .mappers.ffmpeg_to_cuda import FFmpegToCUDA

        _mapper.append(FFmpegToCUDA())
    f = _mapper[0].map_native(vf, AccessMode.READ, False)
    if f is None:
        raise InvalidTensorError(f"the planes of this NVDEC frame ({vf.width}x{vf.height} {sw}) do not match its "
                                 f"size; is it a complete decoded frame?")
    if parent is not None:
        f._parent = parent
    return f  # type: ignore[no-any-return]


def nvdec_frames(file: Any, *, device: int = 0, frame_threads: bool = False, prefetch: int = 8,
                 **kw: Any) -> Iterator[Frame]:
    """CUDA Frames of a video decoded on NVDEC by a worker thread, up to ``prefetch`` frames ahead.

    PyAV's decode releases the GIL, so the next pictures decode while the caller's Python (mapping, launching
    kernels) runs: the loop costs max(decode, consume) per frame instead of their sum. Each Frame's ``native`` is
    its av.VideoFrame; the planes are zero-copy views of the decoder's surfaces (see ``from_video_frame``).
    """
    c = open_nvdec(file, device=device, frame_threads=frame_threads, **kw)
    q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
    stop = threading.Event()

    def work() -> None:
        try:
            for vf in c.decode(video=0):
                if stop.is_set():
                    return
                q.put(vf)
        except BaseException as e:  # handed to the consumer
            q.put(e)
            return
        q.put(None)

    t = threading.Thread(target=work, name="interop-nvdec", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield from_video_frame(item)
    finally:
        stop.set()
        while t.is_alive():  # unblock a worker waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.01)
        c.close()


# ---- torch views of CUDA tensors, frames and NVDEC frames ----------------------------------------------------

_torch: list[Any] = []  # [torch module, its current-raw-stream function or None], filled on first use


def _torch_mod() -> list[Any]:
    if not _torch:
        import torch

        _torch[:] = [torch, getattr(torch._C, "_cuda_getCurrentRawStream", None)]
    return _torch


def _torch_stream(device: int) -> int:
    torch, raw = _torch_mod()
    h = int(raw(device)) if raw is not None else int(torch.cuda.current_stream(device).cuda_stream)
    return LEGACY_STREAM if h == 0 else h


def torch_views(obj: Any) -> list[Any]:
    """torch tensors over a CUDA tensor or each plane of a CUDA frame, ordered after the producer on torch's current
    stream: what ``torch.from_dlpack(plane)`` gives, for less per-frame overhead (one stream query per frame).

    ``obj`` may also be an NVDEC-decoded av.VideoFrame (format ``cuda``, sw_format nv12 or p010le): its planes go
    to torch the shortest way, PyAV's own DLPack capsules, when torch's current stream is the legacy default
    stream FFmpeg decodes on (nothing to order), and through ``interop.map(vf, CUDA)`` otherwise. The tensors are
    the ones ``torch_views(interop.map(vf, MemoryType.CUDA))`` gives, with no interop objects made per frame:
    for many concurrent decoders in one process, where all Python run per frame is shared through the GIL.
    """
    if not isinstance(obj, (Tensor, Frame)):
        return _nvdec_views(obj)
    planes = [p for p in (obj.tensors if isinstance(obj, Frame) else [obj]) if isinstance(p, CUDATensor)]
    if not planes or len(planes) != (len(obj) if isinstance(obj, Frame) else 1):
        raise UnsupportedTypeError("torch_views() takes a CUDA tensor or frame: interop.map(x, MemoryType.CUDA) first")
    stream = _torch_stream(planes[0].device_id)
    from_dlpack = _torch_mod()[0].from_dlpack
    if stream == LEGACY_STREAM:
        # whole decoded planes on the stream torch uses: nothing to order, the producers' own capsules
        caps = [p._own_capsule() for p in planes]
        if None not in caps:
            return [from_dlpack(c) for c in caps]
    return [from_dlpack(p.__dlpack__(stream=stream)) for p in planes]


def _nvdec_views(vf: Any) -> list[Any]:
    fmt = getattr(vf, "format", None)
    planes = getattr(vf, "planes", None) if getattr(fmt, "name", None) == "cuda" else None  # PyAV makes them per call
    if planes is None:
        from .tensors.ffmpeg import is_video_frame

        if is_video_frame(vf):
            raise InvalidTensorError(f"torch_views() got a software av.VideoFrame ({vf.format.name}): decode with "
                                     f"HWAccel('cuda', is_hw_owned=True) (interop.cuda.open_nvdec), or "
                                     f"upload it with interop.map(vf, MemoryType.CUDA, allow_copy=True)")
        raise UnsupportedTypeError(f"torch_views() takes a CUDA tensor or frame, or an NVDEC-decoded av.VideoFrame, "
                                   f"not {type(vf).__name__}: interop.map(x, MemoryType.CUDA) first")
    sw = vf.sw_format.name
    if sw not in NVDEC_SW_FORMATS:
        raise unsupported_nvdec_format(sw)
    if _torch_stream(planes[0].__dlpack_device__()[1]) == LEGACY_STREAM:
        torch = _torch_mod()[0]
        return [torch.from_dlpack(p.__dlpack__(stream=None)) for p in planes]
    from .api import map as imap

    return torch_views(imap(vf, MemoryType.CUDA))


# ---- keeping NVDEC warm ---------------------------------------------------------------------------------------

_lock = threading.Lock()
_held: dict[int, Any] = {}  # device -> the idle decoder's open av container
_failed: dict[int, str] = {}  # device -> why no idle decoder could be held there (not tried again)
_clip: list[bytes] = []  # the one-picture H.264 clip, made on first use


def _tiny_clip() -> bytes:
    """One 256x144 H.264 picture in MP4, made in memory (nothing shipped, nothing downloaded)."""
    if not _clip:
        import numpy as np

        from .clip import encode

        try:
            buf = encode(io.BytesIO(), [np.full((216, 256), 128, np.uint8)], 256, 144, fps=1,
                         array_format="yuv420p", options={"preset": "medium"})
        except UnsupportedFormatError as e:  # an FFmpeg build without libx264
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
        log.info("no idle NVDEC decoder held on device %d (%s): closing the last decoder may wait for the driver's "
                 "teardown tick", device, _failed[device])
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
