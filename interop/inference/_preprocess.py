"""The pre-processing Inference compiles in front of a model for frames: pure functions
``(model, fmt, shapes, width, height, opts) -> ov.Model``, testable without running a request.

Planes arrive as (1, rows, pitch, C) u8 tensors over the producer's memory. Either OpenVINO's ``PrePostProcessor``
takes them as they are (colour conversion, crop of the padding, resize, mean/scale, layout, dtype), or, where a
resize is needed or OpenVINO's own YUV input does not fit the layout, a graph of plane operations is put in front
(each plane cropped and resized on its own, then converted to RGB/BGR) and ``PrePostProcessor`` does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidTensorError, UnsupportedFormatError
from ..types import FrameFormat
from ._model import layout, ov_message, static_model

_PACKED = {FrameFormat.RGB: "RGB", FrameFormat.BGR: "BGR", FrameFormat.RGBX: "RGBX", FrameFormat.BGRX: "BGRX"}


@dataclass(frozen=True)
class Options:
    """What the pre-processing does besides the planes' own layout. ``input_size`` is (width, height), used when
    the model's spatial size is dynamic; ``mean``/``scale`` in 0..255 pixel units; ``rgb``: the model takes RGB."""

    model_name: str = "model"
    input_size: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    scale: tuple[float, ...] | None = None
    rgb: bool = True


@dataclass(frozen=True)
class _PlaneSpec:
    """OpenVINO's colour format for a frame format, its sub-names, and the plane shapes it wants."""

    color_format: Any
    sub_names: list[str] | None
    want: list[tuple[int, int, int, int]]
    yuv: bool


def _plane_spec(fmt: FrameFormat, rows: int, pitch: int) -> _PlaneSpec:
    from openvino.preprocess import ColorFormat

    if fmt is FrameFormat.I420:
        return _PlaneSpec(ColorFormat.I420_THREE_PLANES, ["y", "u", "v"],
                          [(1, rows, pitch, 1), (1, rows // 2, pitch // 2, 1), (1, rows // 2, pitch // 2, 1)], True)
    if fmt is FrameFormat.NV12:
        return _PlaneSpec(ColorFormat.NV12_TWO_PLANES, ["y", "uv"],
                          [(1, rows, pitch, 1), (1, rows // 2, pitch // 2, 2)], True)
    if fmt in _PACKED:
        return _PlaneSpec(getattr(ColorFormat, _PACKED[fmt]), None, [(1, rows, pitch, len(_PACKED[fmt]))], False)
    raise UnsupportedFormatError(f"Inference takes I420, NV12, RGB, BGR, RGBX and BGRX frames, not {fmt.name}: "
                                 f"convert the frame first (e.g. decode to yuv420p)")


def _check_planes(fmt: FrameFormat, spec: _PlaneSpec, shapes: list[tuple[int, ...]], width: int, height: int) -> None:
    rows, pitch = shapes[0][1], shapes[0][2]
    if len(shapes) != len(spec.want) or [s[3] for s in shapes] != [w[3] for w in spec.want]:
        raise InvalidTensorError(f"a {fmt.name} frame has planes shaped like {spec.want}, got {shapes}")
    ch, cw = -(-height // 2), -(-width // 2)
    if rows < height or pitch < width or (spec.yuv and any(s[1] < ch or s[2] < cw for s in shapes[1:])):
        raise InvalidTensorError(f"planes {shapes} are smaller than the {width}x{height} frame")


def _target_size(param: Any, lay: str, input_size: tuple[int, int] | None, width: int, height: int) -> tuple[int, int]:
    """(height, width) the model runs at: its own static size, else ``input_size``, else the frame's."""
    ps = param.get_partial_shape()
    h_i, w_i = (2, 3) if lay == "NCHW" else (1, 2)
    if ps[h_i].is_static and ps[w_i].is_static:
        return ps[h_i].get_length(), ps[w_i].get_length()
    if input_size is not None:
        return input_size[1], input_size[0]
    return height, width


def _needs_planes_first(fmt: FrameFormat, spec: _PlaneSpec, shapes: list[tuple[int, ...]], width: int, height: int,
                        target: tuple[int, int]) -> bool:
    """Whether YUV planes are cropped and resized one by one before colour conversion (the plane-prefix graph).

    OpenVINO's own I420/NV12 input needs even sizes and chroma pitch = luma pitch / 2. Where a resize is needed, or
    those do not hold, the planes are resized one by one *before* colour conversion: 4x fewer pixels to convert at
    half resolution, cheaper than converting then resizing (``interop bench --only pipeline``)."""
    rows, pitch = shapes[0][1], shapes[0][2]
    ppp_ok = shapes == spec.want and not (pitch % 2 or rows % 2 or height % 2 or width % 2)
    planes_first = spec.yuv and ((height, width) != target or not ppp_ok)
    if planes_first and (target[0] % 2 or target[1] % 2):
        if not ppp_ok:
            raise UnsupportedFormatError(
                f"{fmt.name} frame {width}x{height} (planes {shapes}) needs an even model input size to be converted "
                f"in the model: give input_size=(even width, even height) or crop the frame to an even size")
        planes_first = False
    return planes_first


def _build_ppp(ov: Any, m: Any, spec: _PlaneSpec, shapes: list[tuple[int, ...]], width: int, height: int,
               target: tuple[int, int], lay: str, elem: Any, planes_first: bool, opts: Options) -> Any:
    """``PrePostProcessor`` over static model ``m``: from the planes (or, planes first, from the f32 NHWC image the
    plane prefix makes) to the model's input."""
    from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

    rows, pitch = shapes[0][1], shapes[0][2]
    p = PrePostProcessor(m)
    inp = p.input()
    if planes_first:  # the plane prefix hands PPP an f32 NHWC image in the model's colour order
        inp.tensor().set_element_type(ov.Type.f32).set_layout(ov.Layout("NHWC"))
        pre = inp.preprocess()
    else:
        tt = inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_spatial_static_shape(rows, pitch)
        if spec.sub_names is None:
            tt.set_color_format(spec.color_format)
        else:
            tt.set_color_format(spec.color_format, spec.sub_names)
        pre = inp.preprocess()
        pre.convert_color(ColorFormat.RGB if opts.rgb else ColorFormat.BGR)
        if (rows, pitch) != (height, width):
            pre.crop([0, 0, 0, 0], [1, height, width, 3])  # padded pitch: cropped inside the model, never copied
        if (height, width) != target:  # resize the u8 image: cheaper than resizing it as f32
            pre.resize(ResizeAlgorithm.RESIZE_LINEAR)
        pre.convert_element_type(ov.Type.f32)
    if opts.mean is not None:
        pre.mean(list(opts.mean) if len(opts.mean) > 1 else opts.mean[0])
    if opts.scale is not None:
        pre.scale(list(opts.scale) if len(opts.scale) > 1 else opts.scale[0])
    if elem != ov.Type.f32:
        pre.convert_element_type(elem)
    pre.convert_layout(ov.Layout(lay))
    inp.model().set_layout(ov.Layout(lay))
    return p.build()


def ppp_model(ov: Any, model: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
              opts: Options) -> Any:
    """``model`` with pre-processing for ``fmt`` frames whose planes are shaped ``shapes`` ((1, rows, pitch, C))."""
    if len(model.inputs) != 1:
        raise UnsupportedFormatError(f"{opts.model_name} has {len(model.inputs)} inputs: frames feed "
                                     f"single-input image models; feed a list of Tensors instead")
    if any(len(s) != 4 or s[0] != 1 for s in shapes):
        raise InvalidTensorError(f"frame planes must be shaped (1, rows, pitch, C), got {shapes}")
    spec = _plane_spec(fmt, shapes[0][1], shapes[0][2])
    _check_planes(fmt, spec, shapes, width, height)
    param = model.get_parameters()[0]
    lay = layout(param)
    target = _target_size(param, lay, opts.input_size, width, height)
    planes_first = _needs_planes_first(fmt, spec, shapes, width, height, target)
    m = static_model(ov, model, target, opts.model_name)
    try:
        built = _build_ppp(ov, m, spec, shapes, width, height, target, lay, param.get_element_type(), planes_first,
                           opts)
        if planes_first:
            built = _prepend_planes(ov, built, fmt, shapes, width, height, target, opts.rgb)
        return built
    except RuntimeError as e:
        raise UnsupportedFormatError(f"cannot build pre-processing for {fmt.name} planes {shapes} into "
                                     f"{opts.model_name}: {ov_message(e)}") from e


def _prepend_planes(ov: Any, model: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
                    target: tuple[int, int], rgb: bool) -> Any:
    """Plane inputs (1, rows, pitch, C) u8 -> crop -> f32 -> resize each plane -> YUV to RGB/BGR, fed into
    ``model``'s image parameter (f32 NHWC at ``target``). All inside the model: nothing runs on the host."""
    import openvino.opset8 as op8
    import openvino.opset11 as ops

    param = model.get_parameters()[0]
    base = param.output(0).get_any_name() if param.output(0).get_names() else "image"
    th, tw = target
    i64 = np.int64

    def plane(i: int, sub: str, ph: int, pw: int, oh: int, ow: int) -> tuple[Any, Any]:
        shp = shapes[i]
        c = shp[3]
        p = ops.parameter(list(shp), ov.Type.u8, name=f"{base}/{sub}")
        x = p
        if (shp[1], shp[2]) != (ph, pw):  # padded pitch / rows: a crop inside the model, never a host copy
            x = ops.slice(x, np.array([0, 0, 0, 0], i64), np.array([1, ph, pw, c], i64), np.array([1, 1, 1, 1], i64))
        x = ops.convert(x, ov.Type.f32)
        x = ops.reshape(x, np.array([1, 1, ph, pw], i64), False) if c == 1 else ops.transpose(x, np.array([0, 3, 1, 2], i64))
        if (ph, pw) != (oh, ow):
            x = ops.interpolate(x, np.array([oh, ow], i64), "linear_onnx", "sizes", axes=np.array([2, 3], i64),
                                coordinate_transformation_mode="half_pixel")
        x = ops.reshape(x, np.array([1, oh, ow, 1], i64), False) if c == 1 else ops.transpose(x, np.array([0, 2, 3, 1], i64))
        return p, x

    ch, cw = -(-height // 2), -(-width // 2)
    py, y = plane(0, "y", height, width, th, tw)
    if fmt is FrameFormat.I420:
        pu, u = plane(1, "u", ch, cw, th // 2, tw // 2)
        pv, v = plane(2, "v", ch, cw, th // 2, tw // 2)
        conv = (op8.i420_to_rgb if rgb else op8.i420_to_bgr)(y, u, v)
        params = [py, pu, pv]
    else:
        puv, uv = plane(1, "uv", ch, cw, th // 2, tw // 2)
        conv = (op8.nv12_to_rgb if rgb else op8.nv12_to_bgr)(y, uv)
        params = [py, puv]
    for ti in list(param.output(0).get_target_inputs()):
        ti.replace_source_output(conv.output(0))
    return ov.Model(model.get_results(), params, model.get_friendly_name())
