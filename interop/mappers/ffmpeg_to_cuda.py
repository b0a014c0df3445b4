"""FFMPEG -> CUDA: NVDEC frames that PyAV kept on the GPU become CUDA planes over the same device memory.

Decode with ``av.open(path, hwaccel=HWAccel("cuda", is_hw_owned=True))``: frames are ``format.name == "cuda"``
with a ``sw_format`` (nv12, p010le). Each plane becomes a CUDATensor whose pointer *is* ``plane.buffer_ptr``
(plus the region's offset) with the decoder's pitch; ``native`` is the av.VideoPlane, which holds a reference on
the AVFrame, so the decoder does not reuse the surface while a tensor (or a DLPack capsule of it) is alive.
FFmpeg queues its NVDEC output copies on its device context's stream, the legacy default stream: the planes say
so (``stream == 1``) and consumers passing another stream are ordered after it.

Only NVDEC frames are taken: a software (CPU) frame raises WrongMemoryError, so routing takes FFMPEG -> CPU ->
CUDA for it (an upload, refused unless ``allow_copy=True`` and then counted by cpu_to_cuda).
Decoding on NVDEC (``open_nvdec``, ``nvdec_frames``, ``from_video_frame``) lives in ``interop.cuda``.
"""

from __future__ import annotations

from typing import Any

from ..errors import WrongMemoryError
from ..frame import Frame
from ..mapper import Cost, register
from ..tensor import Tensor
from ..tensors._fastpath import trusted_frame
from ..tensors.cuda import (
    LEGACY_STREAM,
    NVDEC_SW_FORMATS,
    CUDAContext,
    CUDATensor,
    fast_tensor,
)
from ..tensors.ffmpeg import (
    DecodedSource,
    FFmpegMapper,
    FFmpegTensor,
    SourcedTensor,
    ffmpeg_context,
    hardware_planes,
    sourced_frame,
)
from ..types import AccessMode, MemoryType

_FORMATS = frozenset(NVDEC_SW_FORMATS.values())
_contexts: dict[Any, CUDAContext] = {}  # FFmpeg hardware context -> CUDA context of its device
_device_contexts: dict[int, tuple[CUDAContext, Any]] = {}  # device -> (its CUDA context, its FFmpeg context)


def _offset(t: Tensor) -> int:
    """The byte offset of an FFmpeg tensor's first element in its plane (regions made by Frame.crop)."""
    for name in ("offset", "_offset"):
        v = getattr(t, name, None)
        if isinstance(v, int):
            return v
    return 0


class NVDECPlane(SourcedTensor, CUDATensor):
    """A CUDA plane of an NVDEC frame mapped in one step: exactly the av.VideoPlane's own DLPack view (exports
    hand out PyAV's capsule), read-only, its writes queued on the legacy default stream."""

    _stream = LEGACY_STREAM
    _whole = True


@register
class FFmpegToCUDA(FFmpegMapper):
    dst = MemoryType.CUDA
    zero_copy = True  # NVDEC frames only: a software frame is WrongMemoryError, routed through the CPU
    inputs = (FFmpegTensor,)
    first_only = True  # only NVDEC frames are CUDA memory: never a hop after cpu_to_ffmpeg made a software frame

    def map_native(self, vf: Any, mode: AccessMode, allow_copy: bool) -> Frame | None:
        """interop.map(vf, CUDA) in one step for an NVDEC frame in READ mode; None: take the general path
        (software frames are uploads, counted there; other formats get their advice there)."""
        if mode is not AccessMode.READ:
            return None
        found = hardware_planes(vf, "cuda")
        if found is None:
            return None
        planes, lay = found
        if lay.format not in _FORMATS:
            return None
        dev = planes[0].__dlpack_device__()[1]
        ctxs = _device_contexts.get(dev)
        if ctxs is None:
            ctxs = _device_contexts[dev] = (CUDAContext.get(dev), ffmpeg_context(f"cuda:{dev}"))
        ctx = ctxs[0]
        src = DecodedSource(vf, planes, lay, ctxs[1])
        out = []
        i = 0
        for p, info in zip(planes, lay.infos):
            t = NVDECPlane._unchecked(p, info, ctx, src, False)
            t._index, t._ptr, t._device_id = i, p.buffer_ptr, dev
            out.append(t)
            i += 1
        f = sourced_frame(src, out, ctx)
        f._native = vf  # as the general path: the frame's native is the av.VideoFrame
        return f

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        ts = f.tensors
        fmt = f.format
        if mode.writes or fmt not in _FORMATS or \
                not all(getattr(t, "is_hardware", False) and not getattr(t, "offset", 0) for t in ts):
            return super().map_frame(f, mode, allow_copy)
        # A whole NVDEC frame (the per-frame path): the FFmpeg planes' layouts are the CUDA planes' layouts.
        planes = [t.native for t in ts]
        ctx = _contexts.get(f.context)
        if ctx is None:
            ctx = _contexts[f.context] = CUDAContext.get(planes[0].__dlpack_device__()[1])
        dev = ctx.device
        out = [fast_tensor(p, t.info, p.buffer_ptr, dev, LEGACY_STREAM, ctx, f, False, True) for p, t in zip(planes, ts)]
        return trusted_frame(out, fmt, f.width, f.height, context=ctx, native=f.native, colorspace=f.colorspace,
                             color_range=f.color_range, pts=f.pts, time_base=f.time_base,
                             metadata=dict(f.metadata) if f.metadata else None, parent=f)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        if obj is not None:
            for t in obj.tensors if isinstance(obj, Frame) else (obj,):
                _nvdec_plane(t)
        return Cost.ZERO_COPY

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        plane, dev = _nvdec_plane(t)
        return fast_tensor(plane, t.info, plane.buffer_ptr + _offset(t), dev, LEGACY_STREAM, CUDAContext.get(dev), t,
                           False)


def _nvdec_plane(t: Tensor) -> tuple[Any, int]:
    """(the av.VideoPlane, its CUDA device) of a plane of an NVDEC frame; WrongMemoryError for any other plane."""
    plane = t.native
    device = getattr(plane, "__dlpack_device__", None)
    kind, dev = device() if device is not None else (1, 0)
    if int(kind) != 2:
        raise WrongMemoryError("ffmpeg_to_cuda takes NVDEC frames (kept on the GPU) only; a software frame goes "
                               "FFMPEG -> CPU -> CUDA (an upload: interop.map(frame, MemoryType.CUDA, allow_copy=True))")
    return plane, int(dev)


# Old public paths of names that moved to interop.cuda (issue 16; docs and examples imported them from here). A lazy
# alias, so importing this mapper never loads the app-level interop.cuda: tests/test_layering.py allows exactly this
# edge, from this function.
_MOVED = frozenset({"open_nvdec", "nvdec_frames", "from_video_frame"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from .. import cuda

        return getattr(cuda, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
