"""Model loading and shape fixing for Inference: read a model file, find an image input's layout, make a copy of
the model with batch 1 and a static spatial size. Pure functions of the model; nothing is compiled here."""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import (
    CompileError,
    InvalidTensorError,
    ModelFileError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)


def ov_message(e: BaseException) -> str:
    """OpenVINO's message without its source-location lines ("Exception from src/...cpp:117:"), on one line."""
    lines = []
    for ln in str(e).splitlines():
        ln = ln.strip()
        if re.fullmatch(r"Exception from \S+:\d+:", ln):
            continue
        ln = re.sub(r"^Check '.*' failed at \S+:\d+:\s*", "", ln)
        if ln:
            lines.append(ln)
    return " ".join(lines) or str(e).strip() or type(e).__name__


def get_core() -> Any:
    """The shared ov.Core (interop.tensors.openvino's, so remote contexts and caches are shared)."""
    from ..tensors.openvino import get_core as core

    return core()


def load(ov: Any, core: Any, model: Any) -> tuple[Any, str]:
    """(ov.Model, name) for ``model``: an ov.Model, or the path of an IR/ONNX/TFLite file read with ``core``."""
    if isinstance(model, ov.Model):
        return model, model.get_friendly_name() or "model"
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not os.path.isfile(path):
            what = "is a directory, not a model file" if os.path.isdir(path) else "not found"
            raise ModelFileError(f"model file {path!r} {what}: give the path of an OpenVINO IR (.xml), "
                                     f"ONNX (.onnx) or TFLite (.tflite) model")
        try:
            read = core.read_model(path)
        except Exception as e:  # noqa: BLE001 - OpenVINO's frontends raise RuntimeError and others
            raise ModelFileError(f"OpenVINO cannot read the model {path!r}: {ov_message(e)}; "
                                     f"give an IR (.xml with its .bin), ONNX or TFLite file") from e
        return read, os.path.basename(path)
    raise UnsupportedTypeError(f"model must be a path or an openvino.Model, not {type(model).__name__}")


def layout(param: Any) -> str:
    """"NCHW" or "NHWC" for an image parameter: its declared layout, else guessed from where the channels are."""
    lay = param.get_layout()
    if not (param.get_partial_shape().rank.is_static and param.get_partial_shape().rank.get_length() == 4):
        lay = None  # a declared layout over a dynamic rank: no image input either (refused below)
    if lay is not None and not lay.empty:
        s = lay.to_string().strip("[]").replace(",", "")
        if s in ("NCHW", "NHWC"):
            return s
    ps = param.get_partial_shape()
    if ps.rank.is_static and ps.rank.get_length() == 4:
        if ps[1].is_static and ps[1].get_length() in (1, 3, 4):
            return "NCHW"
        if ps[3].is_static and ps[3].get_length() in (1, 3, 4):
            return "NHWC"
        return "NCHW"
    raise UnsupportedFormatError(
        f"the model input {param.output(0).get_any_name() if param.output(0).get_names() else 0} has shape {ps}: "
        f"frames need an "
        f"image input of rank 4 (NCHW or NHWC); feed a Tensor of the model's input shape instead")


def static_model(ov: Any, model: Any, size_hw: tuple[int, int] | None, model_name: str) -> Any:
    """A copy of ``model`` with batch 1 and, for a dynamic image input, spatial size ``size_hw``."""
    m = model.clone()
    if len(m.inputs) != 1:
        return m
    param = m.inputs[0]
    ps = param.get_partial_shape()
    if not (ps.rank.is_static and ps.rank.get_length() == 4):
        return m
    if ps.is_static:
        return m
    lay = layout(m.get_parameters()[0])
    dims = [ps[i].get_length() if ps[i].is_static else None for i in range(4)]
    dims[0] = 1
    c_i, h_i, w_i = (1, 2, 3) if lay == "NCHW" else (3, 1, 2)
    if dims[c_i] is None:
        dims[c_i] = 3
    if size_hw is not None:
        if dims[h_i] is None:
            dims[h_i] = size_hw[0]
        if dims[w_i] is None:
            dims[w_i] = size_hw[1]
    if any(d is None for d in dims):
        raise InvalidTensorError(f"the model input has a dynamic spatial size {ps}: give input_size=(width, height)")
    try:
        m.reshape({param: ov.PartialShape(dims)})
    except (RuntimeError, ValueError) as e:
        size = f"{dims[w_i]}x{dims[h_i]}"
        raise CompileError(f"{model_name} cannot run at input {size} (input shape {dims}, model input {ps}): "
                           f"{ov_message(e)} -- give an input_size=(width, height) the model accepts") from e
    return m
