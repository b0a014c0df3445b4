"""Request inputs for Inference: the ov.Tensors a request reads for a mapped frame's planes (reused per decoder
buffer), and the checks a raw (tensor) input passes before a request is started with it."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from .._cache import IdentityCache
from ..errors import InvalidTensorError, UnsupportedFormatError, UnsupportedTypeError
from ..frame import Frame
from ..info import plane_infos
from ..meter import record_copy
from ..tensor import Tensor
from ..types import FrameFormat, MemoryType
from ._model import ov_message

#: the pixel format a decoded frame the model cannot take is converted to with ``allow_copy=True``
CONVERT_TO = "yuv420p"


def ov_native(t: Tensor) -> Any:
    """The ov.Tensor (or RemoteTensor) behind an OPENVINO/NPU tensor."""
    return t.native


def as_4d(ov: Any, nat: Any) -> Any:
    """A plane as (1, rows, pitch, C): producers may give (rows, pitch) or (rows, pitch, C); same memory."""
    shape = tuple(nat.get_shape())  # ov.RemoteTensor (NPU planes) has get_shape() but no .shape
    if len(shape) == 4:
        return nat
    if len(shape) in (2, 3):
        arr = nat.data  # a writeable host view of the tensor's memory (CPU-reachable tensors only)
        return ov.Tensor(arr.reshape((1,) + shape + ((1,) if len(shape) == 2 else ())), shared_memory=True)
    raise InvalidTensorError(f"a frame plane shaped {shape} cannot be fed to the model: expected (1, rows, pitch, C)")


class Ownerless:
    """Read-only bytes at an address, for numpy (``np.asarray``), owning nothing: see PlaneInputs."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, nbytes: int):
        self.__array_interface__ = {"version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (address, True)}


class PlaneInputs:
    """Request inputs for decoded planes mapped to OpenVINO, one ov.Tensor per (address, plane layout), reused.

    A decoder hands out frames from a small pool of buffers, so the same few addresses come back frame after
    frame; making an ov.Tensor per plane per frame is the largest cost of feeding a frame
    (``interop bench --only ffmpeg_map``). These tensors own nothing, so they are safe only as Inference uses them:
    a request reads one while the job keeps the mapped frame (and so that buffer) alive, and they never leave
    Inference. A tensor is (address, shape, type) and nothing else, so one made for an earlier buffer at the same
    address and layout is exactly the tensor a new one would be (the map checked that the layout fits the buffer)."""

    LIMIT = 1024  # entries (a few pools of tens of buffers); past it the cache starts again

    def __init__(self, ov: Any):
        self._tensor = ov.Tensor
        self._cache: IdentityCache[tuple[int, Any], Any] = IdentityCache(self.LIMIT)
        self._hit = self._cache.get  # bound once: read for every plane of every frame
        self.made = 0

    def get(self, t: Any) -> Any:
        """The request input for PlaneTensor ``t`` (its address and layout, the same memory as ``t.native``; a
        released ``t`` raises InvalidTensorError)."""
        addr, spec = t.shared_memory()
        key = (addr, spec)
        nat = self._hit(key)
        if nat is None:
            nat = self._cache.put(key, self._tensor(np.asarray(Ownerless(addr, spec.full.nbytes)), spec.shape,
                                                    spec.type))
            self.made += 1
        return nat

    def clear(self) -> None:
        self._cache.clear()


_plane_tensor: type | None = None


def plane_tensor_class() -> type:
    """ffmpeg_to_openvino's PlaneTensor, imported on first use (it needs PyAV)."""
    global _plane_tensor
    if _plane_tensor is None:
        from ..mappers.ffmpeg_to_openvino import PlaneTensor

        _plane_tensor = PlaneTensor
    return _plane_tensor


def frame_inputs(ov: Any, plane_inputs: PlaneInputs, m: Frame) -> tuple[list[Any], list[tuple[int, ...]]]:
    """The ov.Tensors a request reads for the planes of mapped frame ``m``, and their shapes."""
    from ..tensors.openvino import OpenVINOTensor

    planes, shapes = [], []
    plane_cls = plane_tensor_class()
    for t in m.tensors:
        if type(t) is plane_cls and t._native is None:  # type: ignore[attr-defined]  # a decoded plane: reused
            planes.append(plane_inputs.get(t))
            shapes.append(t._info.shape)
        elif type(t) is OpenVINOTensor and not t.is_remote and len(t.info.shape) == 4:
            # a host plane already (1, rows, pitch, C) (a DMA or CPU frame's map): its shape is the array's, so
            # OpenVINO is not asked for it (two calls into OpenVINO per plane per frame)
            planes.append(t.native)
            shapes.append(t.info.shape)
        else:
            nat = as_4d(ov, ov_native(t))
            planes.append(nat)
            shapes.append(tuple(int(d) for d in nat.get_shape()))
    return planes, shapes


def raw_inputs(ov: Any, mapped: list[Any], ports: list[Any], model_name: str) -> list[Any]:
    """The ov.Tensors for raw inputs ``mapped`` (one per model input port), their shapes and dtypes checked."""
    if len(mapped) != len(ports):
        raise InvalidTensorError(f"{model_name} has {len(ports)} input(s), {len(mapped)} tensor(s) given")
    nats = []
    for t, port in zip(mapped, ports):
        if isinstance(t, Frame):
            raise UnsupportedTypeError("give a Frame on its own (not in a list): frames go through pre-processing")
        nat = ov_native(t)
        shape = tuple(int(d) for d in nat.get_shape())
        want = port.get_partial_shape()
        et = port.get_element_type()
        ok_shape = want.compatible(ov.PartialShape(list(shape)))  # bounds of dynamic dims included
        dt = np.dtype(et.to_dtype())
        if not ok_shape or np.dtype(t.info.dtype) != dt:
            name = port.get_any_name() if port.get_names() else "0"
            raise InvalidTensorError(
                f"model input {name!r} of {model_name} wants shape {want} {dt}, got {shape} {t.info.dtype}: "
                f"convert/resize the tensor to that shape and dtype, or pass a Frame so the model pre-processes it")
        nats.append(nat)
    return nats


SHAPES_CHECKED_LIMIT = 64  # distinct input shapes remembered per variant; past it the set starts again


def check_shapes(ov: Any, model: Any, shapes_ok: set[tuple[tuple[int, ...], ...]],
                 shapes: tuple[tuple[int, ...], ...], model_name: str) -> None:
    """Refuse input shapes dynamic ``model`` cannot run, before a request is started with them.

    A request that fails inside OpenVINO never calls back (OpenVINO's queue drops the callback and re-raises the
    error in a later start_async), so each new shape is first checked by shape inference on a copy of the model,
    once (remembered in ``shapes_ok``)."""
    if shapes in shapes_ok:
        return
    m = model.clone()
    try:
        m.reshape({port: ov.PartialShape(list(shp)) for port, shp in zip(m.inputs, shapes)})
    except (RuntimeError, ValueError) as e:
        raise InvalidTensorError(f"{model_name} cannot run on input shape(s) {list(shapes)}: {ov_message(e)} "
                                 f"-- give the model an input size it accepts") from e
    if len(shapes_ok) >= SHAPES_CHECKED_LIMIT:
        shapes_ok.clear()
    shapes_ok.add(shapes)


# ---- allow_copy: a counted conversion of frames the model cannot take -------------------------------------------


def _gray16_to_gray8(a: np.ndarray) -> np.ndarray:
    return (a >> 8).astype(np.uint8)  # the high byte: full-scale 16-bit gray to 8-bit levels


#: FrameFormats converted on the host with numpy (allow_copy): format -> (result format, per-plane conversion)
NUMPY_CONVERSIONS = {FrameFormat.GRAY16: (FrameFormat.GRAY8, _gray16_to_gray8)}


def supported_names() -> str:
    """The pixel formats Inference takes without a copy: FFmpeg's names, then the FrameFormats."""
    from ..tensors.ffmpeg import PIXEL_FORMATS
    from ._preprocess import supported_formats

    ok = set(supported_formats())
    return ", ".join([n for n, (f, _) in PIXEL_FORMATS.items() if f in ok] + [f.name for f in ok])


def refusal(what: str) -> UnsupportedFormatError:
    """The one-line error for a frame of pixel format ``what`` that the model cannot take without a copy."""
    return UnsupportedFormatError(
        f"Inference cannot take {what} frames without a copy; it takes {supported_names()}. Pass allow_copy=True to "
        f"Inference to convert each such frame (a counted copy), or convert the frame first")


def _video_frame_of(x: Any) -> Any:
    """The av.VideoFrame behind ``x`` (itself, or a Frame's native), or None."""
    from ..tensors.ffmpeg import is_video_frame

    if is_video_frame(x):
        return x
    if isinstance(x, Frame) and is_video_frame(x.native):
        return x.native
    return None


def frame_format_name(x: Any) -> str | None:
    """The pixel format of frame ``x`` (an av.VideoFrame's own name, a Frame's FrameFormat), or None when ``x`` is
    not a frame (a tensor: the model's raw input, never converted)."""
    vf = _video_frame_of(x)
    if vf is not None:
        return str(vf.format.name)
    if isinstance(x, Frame):
        return x.format.name
    return None


def convert_frame(x: Any) -> tuple[Any, str, str]:
    """(converted copy of ``x``, source format, result format) for a frame the model cannot take, the copy recorded
    in ``copy_meter()``: an av.VideoFrame (or a Frame over one) is reformatted to CONVERT_TO by PyAV (swscale, with
    the frame's own colorspace and range); a Frame in NUMPY_CONVERSIONS (GRAY16 -> GRAY8, the high byte) is read
    through a CPU mapping and converted with numpy. Anything else raises the one-line refusal."""
    vf = _video_frame_of(x)
    if vf is not None:
        name = vf.format.name
        try:
            out = vf.reformat(format=CONVERT_TO)
        except Exception as e:  # noqa: BLE001 - PyAV's own errors (a hardware frame, an odd format): one line
            raise UnsupportedFormatError(f"cannot convert a {name} frame to {CONVERT_TO} for the model: {e}") from e
        for attr in ("pts", "time_base"):
            with contextlib.suppress(AttributeError, TypeError, ValueError):  # older PyAV: read-only there
                setattr(out, attr, getattr(vf, attr))
        # bytes written, padding excluded, as every copy is counted
        record_copy(f"reformat {name}->{CONVERT_TO} (Inference allow_copy)",
                    sum(i.nbytes for i in plane_infos(FrameFormat.I420, out.width, out.height)))
        return out, name, CONVERT_TO
    if isinstance(x, Frame) and x.format in NUMPY_CONVERSIONS:
        from ..api import map as imap

        to, fn = NUMPY_CONVERSIONS[x.format]
        with imap(x, MemoryType.CPU) as c:
            assert isinstance(c, Frame)  # a Frame maps to a Frame
            planes = [fn(np.asarray(t)) for t in c.tensors]
        record_copy(f"numpy {x.format.name}->{to.name} (Inference allow_copy)", sum(p.nbytes for p in planes))
        from ..tensors.cpu import CPUTensor

        out_f = Frame([CPUTensor(p) for p in planes], to, x.width, x.height)
        out_f._copy_attrs(x)
        return out_f, x.format.name, to.name
    raise refusal(frame_format_name(x) or type(x).__name__)

