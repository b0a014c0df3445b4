"""The pre-processing Inference compiles in front of a model for frames: pure functions
``(model, fmt, shapes, width, height, opts) -> ov.Model``, testable without running a request.

Planes arrive as (1, rows, pitch, C) u8 (or u16) tensors over the producer's memory. Packed RGB/BGR frames at the
model's size go to OpenVINO's ``PrePostProcessor`` as they are (colour order, crop of the padding, mean/scale,
layout, dtype). Every other frame gets a graph of plane operations in front (``plane_prefix``: each plane cropped
and resized on its own, then colour converted at the output size: OpenVINO's own I420/NV12 op for BT.601 limited
range, else the frame's own matrix and range as one elementwise term per plane channel) and ``PrePostProcessor``
does the rest. ``interop bench --only preprocess`` measures the choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidTensorError, UnsupportedFormatError
from ..info import plane_layout
from ..types import ColorRange, ColorSpace, FrameFormat
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


def _build_ppp(ov: Any, m: Any, spec: _PlaneSpec | None, shapes: list[tuple[int, ...]], width: int, height: int,
               target: tuple[int, int], lay: str, elem: Any, planes_first: bool, opts: Options) -> Any:
    """``PrePostProcessor`` over static model ``m``: from the planes (or, planes first, from the f32 NHWC image the
    plane prefix makes) to the model's input."""
    from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

    rows, pitch = shapes[0][1], shapes[0][2]
    p = PrePostProcessor(m)
    inp = p.input()
    if planes_first:  # the plane prefix hands PPP an f32 NCHW image in the model's colour order
        inp.tensor().set_element_type(ov.Type.f32).set_layout(ov.Layout("NCHW"))
        pre = inp.preprocess()
    else:
        assert spec is not None
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
              opts: Options, colorspace: ColorSpace | None = None, color_range: ColorRange | None = None) -> Any:
    """``model`` with pre-processing for ``fmt`` frames whose planes are shaped ``shapes`` ((1, rows, pitch, C)),
    converted with the frame's own ``colorspace`` and ``color_range`` (None: BT.601, limited range).

    Packed RGB/BGR frames at the model's size go through OpenVINO's ``PrePostProcessor`` alone; every other frame
    through the plane prefix (``plane_prefix``): planes resized one by one, then converted at the output size."""
    if len(model.inputs) != 1:
        raise UnsupportedFormatError(f"{opts.model_name} has {len(model.inputs)} inputs: frames feed "
                                     f"single-input image models; feed a list of Tensors instead")
    if any(len(s) != 4 or s[0] != 1 for s in shapes):
        raise InvalidTensorError(f"frame planes must be shaped (1, rows, pitch, C), got {shapes}")
    if fmt not in _FORMATS:
        raise UnsupportedFormatError(f"Inference cannot convert {fmt.name} frames; it takes "
                                     f"{', '.join(f.name for f in _FORMATS)}: convert the frame first")
    param = model.get_parameters()[0]
    lay = layout(param)
    target = _target_size(param, lay, opts.input_size, width, height)
    planes_first = True
    spec = None
    if fmt in _PACKED and (height, width) == target:
        spec = _plane_spec(fmt, shapes[0][1], shapes[0][2])
        _check_planes(fmt, spec, shapes, width, height)
        planes_first = False
    m = static_model(ov, model, target, opts.model_name)
    try:
        built = _build_ppp(ov, m, spec, shapes, width, height, target, lay, param.get_element_type(), planes_first,
                           opts)
        if planes_first:
            dtypes = [ov.Type(ps.dtype) for ps in plane_layout(fmt)]
            built = _prepend_planes(ov, built, fmt, shapes, dtypes, width, height, target, opts.rgb, colorspace,
                                    color_range)
        return built
    except RuntimeError as e:
        raise UnsupportedFormatError(f"cannot build pre-processing for {fmt.name} planes {shapes} into "
                                     f"{opts.model_name}: {ov_message(e)}") from e


# ---- the plane prefix: every pixel format, the frame's own colorspace and range ------------------------------------

# Kr, Kb of each matrix (ITU-R BT.601, BT.709, BT.2020); frames that do not say are BT.601, as swscale assumes.
_KRKB = {ColorSpace.BT601: (0.299, 0.114), ColorSpace.BT709: (0.2126, 0.0722), ColorSpace.BT2020: (0.2627, 0.0593)}

#: interpolation of large planes: nearest reads each output pixel once from the decoder's planes; OpenVINO's linear
#: Interpolate on a 1080p plane costs more CPU per frame than the network's budget allows for pre-processing, and
#: nearest stays within the accuracy limits there (``interop bench --only preprocess`` measures both). Nearest is two
#: Gathers (the rows, then the columns of those rows) of precomputed source indices: Interpolate's nearest mode on
#: cv2.resize's half-pixel grid (``nearest_index``, in exact arithmetic; OpenVINO's CPU kernel computes in floats and
#: may take the next pixel at an exact tie) at a fraction of its CPU (OpenVINO's CPU plugin has no fast 8-bit nearest
#: kernel for one-channel planes). Upscaling (chroma to the luma's size) is nearest too: that is the
#: replication of the standard I420/NV12 conversions (OpenVINO's, OpenCV's). Planes smaller than NEAREST_FROM pixels
#: are shrunk linearly (as cv2.resize INTER_LINEAR): their cost is small, and at strong downscales of small frames
#: nearest's half-pixel offset is visible.
RESIZE = "nearest"
NEAREST_FROM = 512 * 512


@dataclass(frozen=True)
class _Channels:
    """How a format's planes give its colour channels: ``kind`` ("yuv", "rgb", "gray"), one (plane, channel) per
    Y/U/V or R/G/B (or Y), each plane's subsampling (x, y), and the factor that brings values to 8-bit levels."""

    kind: str
    channels: tuple[tuple[int, int], ...]
    sub: tuple[tuple[int, int], ...]
    to8: float = 1.0


_FORMATS: dict[FrameFormat, _Channels] = {
    FrameFormat.I420: _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (2, 2), (2, 2))),
    FrameFormat.YV12: _Channels("yuv", ((0, 0), (2, 0), (1, 0)), ((1, 1), (2, 2), (2, 2))),
    FrameFormat.NV12: _Channels("yuv", ((0, 0), (1, 0), (1, 1)), ((1, 1), (2, 2))),
    FrameFormat.NV21: _Channels("yuv", ((0, 0), (1, 1), (1, 0)), ((1, 1), (2, 2))),
    FrameFormat.P010: _Channels("yuv", ((0, 0), (1, 0), (1, 1)), ((1, 1), (2, 2)), 1 / 256),  # 10 bits in the high bits
    FrameFormat.GRAY8: _Channels("gray", ((0, 0),), ((1, 1),)),
    FrameFormat.RGB: _Channels("rgb", ((0, 0), (0, 1), (0, 2)), ((1, 1),)),
    FrameFormat.BGR: _Channels("rgb", ((0, 2), (0, 1), (0, 0)), ((1, 1),)),
    FrameFormat.RGBX: _Channels("rgb", ((0, 0), (0, 1), (0, 2)), ((1, 1),)),
    FrameFormat.RGBA: _Channels("rgb", ((0, 0), (0, 1), (0, 2)), ((1, 1),)),
    FrameFormat.BGRX: _Channels("rgb", ((0, 2), (0, 1), (0, 0)), ((1, 1),)),
    FrameFormat.BGRA: _Channels("rgb", ((0, 2), (0, 1), (0, 0)), ((1, 1),)),
}
# formats whose FrameFormat exists in interop.types: 4:2:2, 4:4:4 and 10/12-bit planar formats join with theirs
_FORMATS.update({f: c for f, c in (
    (getattr(FrameFormat, "I422", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (2, 1), (2, 1)))),
    (getattr(FrameFormat, "I444", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (1, 1), (1, 1)))),
    (getattr(FrameFormat, "I420_10", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (2, 2), (2, 2)), 1 / 4)),
    (getattr(FrameFormat, "I422_10", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (2, 1), (2, 1)), 1 / 4)),
    (getattr(FrameFormat, "I444_10", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (1, 1), (1, 1)), 1 / 4)),
    (getattr(FrameFormat, "I420_12", None), _Channels("yuv", ((0, 0), (1, 0), (2, 0)), ((1, 1), (2, 2), (2, 2)), 1 / 16)),
    (getattr(FrameFormat, "GRAY10", None), _Channels("gray", ((0, 0),), ((1, 1),), 1 / 4)),
) if f is not None})


def supported_formats() -> list[FrameFormat]:
    """The frame formats Inference converts inside the model."""
    return list(_FORMATS)


def color_matrix(kind: str, colorspace: ColorSpace | None, color_range: ColorRange | None, rgb: bool,
                 to8: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(weights (3, K), bias (3,)) from a format's channels (Y, U, V; R, G, B; or Y) as stored to the model's
    R, G, B (or B, G, R) in 0..255: the frame's own matrix (BT.601 when it does not say) and range (limited when it
    does not say, as decoders mean). ``to8`` brings stored values to 8-bit levels (1/4 for 10 bits in the low bits)."""
    if kind == "rgb":
        w, bias = np.eye(3), np.zeros(3)
    elif kind == "gray":
        w, bias = np.ones((3, 1)), np.zeros(3)
    else:
        kr, kb = _KRKB.get(colorspace or ColorSpace.BT601, _KRKB[ColorSpace.BT601])
        kg = 1 - kr - kb
        full = color_range is ColorRange.FULL
        ys, cs, y0 = (1.0, 1.0, 0.0) if full else (255 / 219, 255 / 224, 16.0)
        r = [ys, 0.0, 2 * (1 - kr) * cs]
        g = [ys, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs]
        b = [ys, 2 * (1 - kb) * cs, 0.0]
        w = np.array([r, g, b])
        bias = -w @ np.array([y0, 128.0, 128.0])
    if not rgb:
        w, bias = w[::-1], bias[::-1]
    return (w * to8).astype(np.float32), bias.astype(np.float32)


def nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """Source index of each of ``n_out`` samples resized nearest from ``n_in`` on the half-pixel grid, ties to the
    lower index (Interpolate's ``half_pixel`` + ``round_prefer_floor`` as specified), in exact integer arithmetic:
    ceil((o + 0.5) * n_in / n_out - 1). OpenVINO's CPU Interpolate computes the position in floats and, at an exact
    tie, may take the higher index: one pixel apart, at a few sizes."""
    num = (2 * np.arange(n_out, dtype=np.int64) + 1) * n_in - 2 * n_out
    return np.clip(-(-num // (2 * n_out)), 0, n_in - 1)


def _take_nearest(ops: Any, x: Any, axis: int, n_in: int, n_out: int) -> Any:
    if n_in == n_out:
        return x
    idx = nearest_index(n_in, n_out).astype(np.int32)
    return ops.gather(x, ops.constant(idx), ops.constant(np.int64(axis)))


def _resizes_nearest(oh: int, ow: int, ph: int, pw: int) -> bool:
    """Whether ``_resize`` takes (ph, pw) to (oh, ow) by nearest Gathers (any element type) rather than a linear
    Interpolate (8-bit or float only)."""
    return RESIZE == "nearest" and (not (oh < ph or ow < pw) or ph * pw >= NEAREST_FROM)


def _resize(ops: Any, x: Any, oh: int, ow: int, ph: int, pw: int) -> Any:
    """Resize NHWC ``x`` (axes 1, 2) from (ph, pw) to (oh, ow) on cv2.resize's half-pixel grid."""
    i64 = np.int64
    if _resizes_nearest(oh, ow, ph, pw):
        return _take_nearest(ops, _take_nearest(ops, x, 1, ph, oh), 2, pw, ow)
    return ops.interpolate(x, np.array([oh, ow], i64), "linear_onnx", "sizes", axes=np.array([1, 2], i64),
                           coordinate_transformation_mode="half_pixel")


def plane_prefix(ov: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], dtypes: list[Any], width: int, height: int,
                 target: tuple[int, int], rgb: bool, colorspace: ColorSpace | None = None,
                 color_range: ColorRange | None = None, name: str = "image") -> tuple[list[Any], Any]:
    """(plane parameters, image): planes (1, rows, pitch, C) as the producer holds them -> each cropped to its
    visible size and resized to ``target`` (h, w) on its own, in the planes' own type -> colour converted (the
    frame's matrix and range) at the output size -> f32 NCHW, R, G, B (or B, G, R) in 0..255.
    Everything runs inside the model: the planes are read in place, nothing runs on the host."""
    import openvino.opset11 as ops

    ch = _FORMATS.get(fmt)
    if ch is None:
        raise UnsupportedFormatError(f"Inference cannot convert {fmt.name} frames; it takes "
                                     f"{', '.join(f.name for f in _FORMATS)}: convert the frame first")
    if len(shapes) != len(ch.sub) or any(len(s) != 4 or s[0] != 1 for s in shapes):
        raise InvalidTensorError(f"a {fmt.name} frame has {len(ch.sub)} planes shaped (1, rows, pitch, C), got {shapes}")
    want = [max(ps.channels, 1) for ps in plane_layout(fmt)]
    if [s[3] for s in shapes] != want:  # a missing channel would be read as zeros, not refused
        raise InvalidTensorError(f"the planes of a {fmt.name} frame have {want} channels, got {shapes}")
    th, tw = target
    i64 = np.int64
    if _native_yuv(ov, fmt, dtypes, target, colorspace, color_range):
        return _prefix_native(ov, fmt, shapes, width, height, target, rgb, name)
    params, planes = [], []
    for i, (shp, dt, (sx, sy)) in enumerate(zip(shapes, dtypes, ch.sub)):
        ph, pw, c = -(-height // sy), -(-width // sx), shp[3]
        if shp[1] < ph or shp[2] < pw:
            raise InvalidTensorError(f"plane {i} {shp} of a {fmt.name} frame is smaller than its {pw}x{ph} pixels")
        p = ops.parameter(list(shp), dt, name=f"{name}/{i}")
        params.append(p)
        x = p
        if (shp[1], shp[2]) != (ph, pw):  # padded pitch / rows: a crop inside the model, never a host copy
            x = ops.slice(x, np.array([0, 0, 0, 0], i64), np.array([1, ph, pw, c], i64), np.array([1, 1, 1, 1], i64))
        resize = (ph, pw) != (th, tw)
        if dt != ov.Type.u8 and resize and not _resizes_nearest(th, tw, ph, pw):
            x = ops.convert(x, ov.Type.f32)  # 16-bit planes resized linearly: Interpolate's integer kernels are 8-bit
        if resize:
            x = _resize(ops, x, th, tw, ph, pw)
        planes.append(x)
    # The colour matrix as one term per plane, summed, in NHWC: a plane's channels times their rows of the matrix
    # (a broadcast multiply per channel), then one transpose to NCHW, as OpenVINO's own I420/NV12 op hands its image
    # on: the terms, the bias, the transpose and the model's mean/scale fuse into one pass that writes the network's
    # input layout. Concatenating the planes on the channel axis first ran OpenVINO's reference Concat, and terms
    # made in NCHW left a planar image to reorder: each cost more than the rest of the pre-processing.
    w, bias = color_matrix(ch.kind, colorspace, color_range, rgb, ch.to8)
    acc: Any = None
    for pl, cc in sorted(set(ch.channels)):
        col = sum(w[:, j] for j, key in enumerate(ch.channels) if key == (pl, cc))  # a channel used twice: both
        x = planes[pl]
        if shapes[pl][3] > 1:  # one channel of a plane of several (NV12's UV, packed RGB)
            x = ops.gather(x, ops.constant(np.array([cc], np.int32)), ops.constant(np.int64(3)))
        if x.get_output_element_type(0) != ov.Type.f32:
            x = ops.convert(x, ov.Type.f32)
        term = ops.multiply(x, ops.constant(np.asarray(col, np.float32).reshape(1, 1, 1, 3)))
        acc = term if acc is None else ops.add(acc, term)
    acc = ops.add(acc, ops.constant(bias.reshape(1, 1, 1, 3)))
    return params, ops.transpose(acc, np.array([0, 3, 1, 2], i64))


def _native_yuv(ov: Any, fmt: FrameFormat, dtypes: list[Any], target: tuple[int, int], colorspace: ColorSpace | None,
                color_range: ColorRange | None) -> bool:
    """Whether OpenVINO's own I420/NV12 conversion (BT.601, limited range, even output size) fits this frame: it is the
    cheapest conversion measured (``interop bench --only preprocess``), so the common case takes it."""
    return (fmt in (FrameFormat.I420, FrameFormat.NV12) and all(d == ov.Type.u8 for d in dtypes)
            and colorspace in (None, ColorSpace.BT601) and color_range is not ColorRange.FULL
            and target[0] % 2 == 0 and target[1] % 2 == 0)


def _prefix_native(ov: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
                   target: tuple[int, int], rgb: bool, name: str) -> tuple[list[Any], Any]:
    """plane_prefix for BT.601 limited-range I420/NV12: each 8-bit plane cropped and resized to the output's luma or
    chroma size, then OpenVINO's I420/NV12 -> RGB/BGR at the output size, f32 NCHW."""
    import openvino.opset8 as op8
    import openvino.opset11 as ops

    th, tw = target
    i64 = np.int64
    params, outs = [], []
    for i, shp in enumerate(shapes):
        ph, pw = (height, width) if i == 0 else (-(-height // 2), -(-width // 2))
        oh, ow = (th, tw) if i == 0 else (th // 2, tw // 2)
        c = shp[3]
        if shp[1] < ph or shp[2] < pw:
            raise InvalidTensorError(f"plane {i} {shp} of a {fmt.name} frame is smaller than its {pw}x{ph} pixels")
        p = ops.parameter(list(shp), ov.Type.u8, name=f"{name}/{i}")
        params.append(p)
        x = p
        if (shp[1], shp[2]) != (ph, pw):  # padded pitch / rows: a crop inside the model, never a host copy
            x = ops.slice(x, np.array([0, 0, 0, 0], i64), np.array([1, ph, pw, c], i64), np.array([1, 1, 1, 1], i64))
        if (ph, pw) != (oh, ow):
            x = _resize(ops, x, oh, ow, ph, pw)
        outs.append(x)
    if fmt is FrameFormat.I420:
        img = (op8.i420_to_rgb if rgb else op8.i420_to_bgr)(*outs)
    else:
        img = (op8.nv12_to_rgb if rgb else op8.nv12_to_bgr)(*outs)
    img = ops.convert(img, ov.Type.f32)
    return params, ops.transpose(img, np.array([0, 3, 1, 2], i64))


def _prepend_planes(ov: Any, model: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], dtypes: list[Any],
                    width: int, height: int, target: tuple[int, int], rgb: bool, colorspace: ColorSpace | None,
                    color_range: ColorRange | None) -> Any:
    """``plane_prefix`` fed into ``model``'s image parameter (f32 NCHW at ``target``)."""
    param = model.get_parameters()[0]
    base = param.output(0).get_any_name() if param.output(0).get_names() else "image"
    params, img = plane_prefix(ov, fmt, shapes, dtypes, width, height, target, rgb, colorspace, color_range, base)
    for ti in list(param.output(0).get_target_inputs()):
        ti.replace_source_output(img.output(0))
    return ov.Model(model.get_results(), params, model.get_friendly_name())
