"""Every pixel format of issue 17, decoded, mapped to OpenVINO with no copy and converted inside the model.

For each format a small clip is made with PyAV in tmp_path (rawvideo in NUT: every pixel format, exact), decoded and
mapped to OpenVINO under ``copy_meter`` (0 copies). The model's colour conversion (``plane_prefix``, the graph
``Inference`` puts in front of the network) is compared with PyAV's ``reformat(format='rgb24')`` using the frame's own
colorspace and range: mean absolute difference <= 2 levels on the 8-bit scale. On text frames, the detector's boxes
through ``Inference`` match the naive path's (IoU >= 0.8).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from interop import textdet  # noqa: E402
from interop.clip import render  # noqa: E402
from interop.inference import _preprocess  # noqa: E402
from interop.tensors.ffmpeg import PIXEL_FORMATS  # noqa: E402

W, H = 160, 96  # multiples of 32: the detector runs at the frame's own size, so no resize enters the comparison
MAD_LEVELS = 2.0
IOU_MIN = 0.8

ISSUE_17 = ["yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "nv21", "gray",
            "yuv420p10le", "yuv422p10le", "yuv444p10le", "yuv420p12le", "p010le", "gray10le", "rgb24", "bgr24",
            "rgba", "bgra", "rgb0", "bgr0"]


FORMATS = ISSUE_17


def test_every_issue_17_format_is_supported() -> None:
    """Each name maps to a FrameFormat with a plane layout, so none is refused or converted by a copy."""
    from interop.info import plane_layout

    missing = [n for n in ISSUE_17 if n not in PIXEL_FORMATS]
    assert not missing, f"no FrameFormat for {missing}"
    for n in ISSUE_17:
        assert plane_layout(PIXEL_FORMATS[n][0]), n


def _clip(tmp_path: Path, fmt: str, width: int, height: int, frames: int = 2, colorspace: str | None = None,
          full_range: bool = False) -> Path:
    """A clip of the synthetic text frames in pixel format ``fmt`` (converted by swscale)."""
    import av

    # yuvj* (full-range JPEG formats) survive only through a JPEG codec; rawvideo keeps every other format exact
    jpeg = fmt.startswith("yuvj")
    path = tmp_path / f"{fmt}.{'mkv' if jpeg else 'nut'}"
    with av.open(str(path), "w") as out:
        s = out.add_stream("mjpeg" if jpeg else "rawvideo", rate=25)
        s.width, s.height, s.pix_fmt = width, height, fmt
        for i in range(frames):
            src = av.VideoFrame.from_ndarray(render(i, width, height), format="bgr24")
            vf = src.reformat(format=fmt, dst_colorspace=colorspace,
                              dst_color_range=2 if full_range else None)
            for pkt in s.encode(vf):
                out.mux(pkt)
        for pkt in s.encode():
            out.mux(pkt)
    return path


# p010le has no tag in these containers for rawvideo (NUT and AVI read it back as rgb555le): its frames come from
# swscale in memory, which hands out AVFrame buffers just as a decoder does
IN_MEMORY = {"p010le"}


def _frames(tmp_path: Path, fmt: str, width: int, height: int, frames: int = 2) -> list:
    if fmt in IN_MEMORY:
        import av

        return [av.VideoFrame.from_ndarray(render(i, width, height), format="bgr24").reformat(format=fmt)
                for i in range(frames)]
    return _decode(_clip(tmp_path, fmt, width, height, frames))


def _decode(path: Path) -> list:
    import av

    with av.open(str(path)) as c:
        return list(c.decode(video=0))


def _prefix_rgb(frame: interop.Frame, planes: list, fmt: interop.FrameFormat, honour: bool = True) -> np.ndarray:
    """The model's converted image (H, W, 3) RGB f32 0..255, from the mapped planes (run by OpenVINO alone);
    ``honour=False`` ignores the frame's colorspace and range (BT.601 limited), to show the check can fail."""
    import openvino as ov

    shapes = [tuple(int(d) for d in p.get_shape()) for p in planes]
    dtypes = [p.get_element_type() for p in planes]
    params, img = _preprocess.plane_prefix(ov, fmt, shapes, dtypes, frame.width, frame.height,
                                           (frame.height, frame.width), True, frame.colorspace if honour else None,
                                           frame.color_range if honour else None)
    compiled = ov.Core().compile_model(ov.Model([img], params), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = compiled.create_infer_request().infer(planes)[0]
    return np.asarray(out)[0].transpose(1, 2, 0)


def _reference_rgb(vf) -> np.ndarray:
    """PyAV's conversion with the frame's own colorspace and range."""
    cs = vf.colorspace if vf.colorspace in (1, 5, 6, 9, 10) else None
    rng = vf.color_range or None
    return vf.reformat(format="rgb24", src_colorspace=cs, src_color_range=rng).to_ndarray().astype(np.float32)


def _check_colours(vf, honour: bool = True) -> float:
    with interop.copy_meter() as m:
        f = interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO)
    assert m.copies == 0 and m.bytes == 0, m.records
    planes = [t.native for t in f.tensors]
    got = _prefix_rgb(f, planes, f.format, honour)
    ref = _reference_rgb(vf)
    assert got.shape == ref.shape
    return float(np.abs(np.clip(np.round(got), 0, 255) - ref).mean())


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_converted_in_model_matches_pyav(tmp_path: Path, fmt: str) -> None:
    frames = _frames(tmp_path, fmt, W, H)
    assert frames and frames[0].format.name == fmt
    mad = _check_colours(frames[0])
    assert mad <= MAD_LEVELS, f"{fmt}: mean absolute difference {mad:.2f} levels against PyAV's rgb24"


@pytest.mark.parametrize(("fmt", "colorspace", "full"), [("yuv420p", "ITU709", False), ("yuv420p", "ITU601", True),
                                                        ("nv12", "ITU709", True)])
def test_frame_colorspace_and_range_honoured(tmp_path: Path, fmt: str, colorspace: str, full: bool) -> None:
    import av

    from tests.support.ffmpeg_clips import pattern

    src = av.VideoFrame.from_ndarray(pattern(W, H, 3), format="rgb24")  # saturated colours: matrices differ there
    vf = src.reformat(format=fmt, dst_colorspace=colorspace, dst_color_range=2 if full else 1)
    vf.colorspace = {"ITU709": 1, "ITU601": 5}[colorspace]
    vf.color_range = 2 if full else 1
    f = interop.wrap(vf)
    assert f.color_range is (interop.types.ColorRange.FULL if full else interop.types.ColorRange.LIMITED)
    mad = _check_colours(vf)
    assert mad <= MAD_LEVELS, f"{fmt} {colorspace} full={full}: {mad:.2f} levels"
    wrong = _check_colours(vf, honour=False)  # BT.601 limited regardless: the check tells them apart
    assert wrong > MAD_LEVELS, f"{fmt} {colorspace} full={full}: the default matrix gives {wrong:.2f} levels"


def _model_or_skip() -> str:
    try:
        return textdet.model_path()
    except interop.BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


@pytest.fixture(scope="module")
def detector() -> interop.Inference:
    return interop.Inference(_model_or_skip(), "CPU", input_size=(320, 192), mean=textdet.MEAN, scale=textdet.SCALE,
                             rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})


@pytest.mark.parametrize("fmt", ["yuv420p", "nv12", "nv21", "gray", "p010le", "rgb24", "bgra", "rgb0", "yuv422p",
                                 "yuvj444p", "yuv420p10le", "yuv422p10le", "yuv444p10le", "yuv420p12le", "gray10le"])
def test_same_detections_as_naive(tmp_path: Path, fmt: str, detector: interop.Inference) -> None:
    import cv2

    vf = _frames(tmp_path, fmt, 640, 384, frames=1)[0]
    with interop.copy_meter() as m:
        zc = next(iter(detector.infer(interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO)).values()))
    assert m.copies == 0, m.records
    rgb = _reference_rgb(vf)
    img = cv2.resize(rgb, (320, 192), interpolation=cv2.INTER_LINEAR)[:, :, ::-1]
    x = np.ascontiguousarray(((img - textdet.MEAN) / textdet.SCALE).transpose(2, 0, 1)[None].astype(np.float32))
    ref = next(iter(detector.infer(x).values()))
    b_zc, b_ref = textdet.boxes_from_map(zc, 640, 384), textdet.boxes_from_map(ref, 640, 384)
    assert len(b_ref) >= 3 and len(b_zc) == len(b_ref), (fmt, len(b_zc), len(b_ref))
    for b in b_ref:
        best = max(textdet.iou(b, z) for z in b_zc)
        assert best >= IOU_MIN, f"{fmt}: box {b.bbox} matched with IoU {best:.2f} only"


def test_unsupported_format_names_the_supported_ones(tmp_path: Path) -> None:
    vf = _decode(_clip(tmp_path, "yuv410p", W, H, frames=1))[0]
    with pytest.raises(interop.InteropError) as e:
        interop.Inference(_model_or_skip(), "CPU").infer(interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO))
    msg = str(e.value)
    assert "\n" not in msg and "yuv410p" in msg and "yuv420p" in msg and "nv12" in msg


# DRM's own codes for the decoder formats (drm_fourcc.h): 3-plane Y, Cb, Cr; the 10/12-bit ones LSB-aligned in 16 bits
DRM_CODES = {"I422": "YU16", "I444": "YU24", "I420_10": "S010", "I422_10": "S210", "I444_10": "S410",
             "I420_12": "S012", "GRAY10": "R10 "}


@pytest.mark.parametrize("name", sorted(DRM_CODES))
def test_decoder_formats_in_dma_frames_cross_the_transport_and_reach_ffmpeg(name: str) -> None:
    from interop.tensors.dma import FramePool, format_of_fourcc, fourcc, fourcc_str
    from interop.transport import FrameReceiver, FrameSender, seqpacket_pair

    fmt = interop.FrameFormat[name]
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    pool = FramePool(fmt, 70, 48, 1)
    f = pool.acquire()
    assert fourcc_str(f[0].drm_fourcc) == DRM_CODES[name] and format_of_fourcc(fourcc(DRM_CODES[name])) is fmt
    with interop.map(f, interop.MemoryType.CPU, mode=interop.AccessMode.WRITE) as c:
        for i, t in enumerate(c.tensors):
            np.asarray(t)[:] = 300 + i if np.asarray(t).dtype == np.uint16 else 30 + i
    tx.send(f)
    g = rx.recv(timeout=5)
    assert g.format is fmt and [t.info for t in g] == [t.info for t in f]
    with interop.map(g, interop.MemoryType.FFMPEG) as v:
        vf = v.native
        assert vf.format.name == next(n for n, (ff, rng) in PIXEL_FORMATS.items() if ff is fmt and rng is None)
        base = 300 if "10" in name or "12" in name else 30
        for i, p in enumerate(vf.planes):
            assert np.all(np.asarray(interop.map(interop.wrap(vf), interop.MemoryType.CPU)[i]) == base + i), p
    g.release()
    f.release()
    tx.close()
    rx.close()


# ---- allow_copy: frames the model cannot take are converted, counted; without it, one line naming the supported


def _tiny_inference(allow_copy: bool = False) -> interop.Inference:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, H, W], np.float32, name="image")
    y = ops.reduce_mean(x, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)  # per-channel mean
    return interop.Inference(ov.Model([y], [x], "means"), "CPU", allow_copy=allow_copy,
                             config={"INFERENCE_PRECISION_HINT": "f32"})


def _yuv410p(tmp_path: Path, width: int = W, height: int = H) -> object:
    return _decode(_clip(tmp_path, "yuv410p", width, height, frames=1))[0]


def test_inference_refuses_an_unsupported_pixel_format_in_one_line_naming_allow_copy(tmp_path: Path) -> None:
    inf = _tiny_inference()
    with interop.copy_meter() as m, pytest.raises(interop.UnsupportedFormatError) as e:
        inf.infer(_yuv410p(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "yuv410p" in msg and "yuv420p" in msg and "nv12" in msg and "allow_copy=True" in msg
    assert m.copies == 0 and inf.converted == {}


def test_inference_allow_copy_converts_with_pyav_and_counts_the_copy(tmp_path: Path) -> None:
    vf = _yuv410p(tmp_path)
    inf = _tiny_inference(allow_copy=True)
    with interop.copy_meter() as m:
        got = next(iter(inf.infer(vf).values()))
        inf.infer(vf)  # again: one more counted copy
    assert m.copies == 2 and m.bytes == 2 * (W * H + 2 * (W // 2) * (H // 2)), m.records
    assert "yuv410p->yuv420p" in m.records[0].mapper
    assert inf.converted == {"yuv410p": "yuv420p"}
    with interop.copy_meter() as m2:
        ref = next(iter(_tiny_inference().infer(vf.reformat(format="yuv420p")).values()))
    assert m2.copies == 0
    np.testing.assert_allclose(got, ref, atol=1e-3)


def test_inference_allow_copy_converts_gray16_with_numpy() -> None:
    a = (np.arange(H * W, dtype=np.uint32).reshape(H, W) * 4099 % 65536).astype(np.uint16)
    gray16 = interop.wrap(a.astype(np.uint16), format=interop.FrameFormat.GRAY16)
    with pytest.raises(interop.UnsupportedFormatError, match="allow_copy=True"):
        _tiny_inference().infer(gray16)
    inf = _tiny_inference(allow_copy=True)
    with interop.copy_meter() as m:
        got = next(iter(inf.infer(gray16).values()))
    assert m.copies == 1 and m.bytes == H * W and inf.converted == {"GRAY16": "GRAY8"}
    gray8 = interop.wrap((a >> 8).astype(np.uint8), format=interop.FrameFormat.GRAY8)
    ref = next(iter(_tiny_inference().infer(gray8).values()))
    np.testing.assert_allclose(got, ref, atol=1e-3)


def test_inference_allow_copy_must_be_a_bool() -> None:
    with pytest.raises(interop.InteropError, match="allow_copy must be True or False") as e:
        _tiny_inference(allow_copy="yes")  # type: ignore[arg-type]
    assert isinstance(e.value, TypeError)


def test_inference_allow_copy_counts_the_bytes_written_not_the_padding(tmp_path: Path) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, -1, -1], np.float32, name="image")
    y = ops.reduce_mean(x, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    inf = interop.Inference(ov.Model([y], [x], "means"), "CPU", allow_copy=True)
    vf = _yuv410p(tmp_path, 100, 50)  # yuv420p at 100 wide: rows padded to an aligned pitch
    assert vf.reformat(format="yuv420p").planes[0].line_size > 100
    with interop.copy_meter() as m:
        inf.infer(vf)
    assert m.copies == 1 and m.bytes == 100 * 50 + 2 * 50 * 25, m.records


@pytest.mark.parametrize(("n_in", "n_out"), [(1080, 544), (1920, 960), (540, 272), (960, 480), (721, 544), (5, 17),
                                             (270, 544), (1081, 1080), (3, 2), (544, 1080)])
def test_nearest_resize_by_gather_picks_the_pixels_interpolate_picks(n_in: int, n_out: int) -> None:
    """The plane prefix resizes nearest with two Gathers of precomputed indices: at the sizes frames and models have
    here (none with an exact tie), the same pixels as OpenVINO's Interpolate (nearest, half_pixel,
    round_prefer_floor) on either axis, shrinking and enlarging."""
    import openvino as ov
    import openvino.opset11 as ops

    rng = np.random.default_rng(n_in * 7 + n_out)
    plane = rng.integers(0, 256, (1, n_in, 3, 2), np.uint8)
    p = ops.parameter(list(plane.shape), ov.Type.u8)
    ref = ops.interpolate(p, np.array([n_out], np.int64), "nearest", "sizes", axes=np.array([1], np.int64),
                          coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor")
    ours = _preprocess._take_nearest(ops, p, 1, n_in, n_out)
    compiled = ov.Core().compile_model(ov.Model([ref, ours], [p]), "CPU")
    a, b = compiled(plane).values()
    assert a.shape == b.shape == (1, n_out, 3, 2)
    assert np.array_equal(a, b)
    assert np.array_equal(b[0, :, 0, 0], plane[0, _preprocess.nearest_index(n_in, n_out), 0, 0])


def test_nearest_index_takes_the_lower_pixel_at_an_exact_tie() -> None:
    """14 -> 19: output 9 sits at source 6.5 exactly; round_prefer_floor takes 6 (the specification; OpenVINO's
    float kernel takes 7 there). Checked against exact rational arithmetic over many sizes."""
    from fractions import Fraction

    assert _preprocess.nearest_index(14, 19)[9] == 6
    for n_in in range(1, 60):
        for n_out in range(1, 60):
            want = []
            for o in range(n_out):
                x = (Fraction(2 * o + 1, 2) * n_in) / n_out - Fraction(1, 2)
                r = int(x) if x - int(x) <= Fraction(1, 2) else int(x) + 1  # round half down (x >= 0 here)
                want.append(min(max(r, 0), n_in - 1))
            assert _preprocess.nearest_index(n_in, n_out).tolist() == want, (n_in, n_out)


@pytest.mark.parametrize("fmt", [interop.FrameFormat.I420, interop.FrameFormat.NV12, interop.FrameFormat.RGB])
def test_plane_prefix_sums_a_term_per_plane_without_concatenating_channels(fmt: interop.FrameFormat) -> None:
    """Frames that do not take OpenVINO's own I420/NV12 op (BT.709 here): the colour matrix is one term per plane,
    summed; no Concat over the channel axis (OpenVINO runs that as a reference kernel, slower than the rest)."""
    import openvino as ov

    w, h = 64, 48
    shapes = {interop.FrameFormat.I420: [(1, h, w, 1), (1, h // 2, w // 2, 1), (1, h // 2, w // 2, 1)],
              interop.FrameFormat.NV12: [(1, h, w, 1), (1, h // 2, w // 2, 2)],
              interop.FrameFormat.RGB: [(1, h, w, 3)]}[fmt]
    params, img = _preprocess.plane_prefix(ov, fmt, shapes, [ov.Type.u8] * len(shapes), w, h, (32, 64), True,
                                           interop.ColorSpace.BT709)
    model = ov.Model([img], params)
    kinds = {op.get_type_name() for op in model.get_ordered_ops()}
    assert "Concat" not in kinds
    assert list(img.get_output_shape(0)) == [1, 3, 32, 64]


@pytest.mark.parametrize(("fmt", "shapes"), [
    (interop.FrameFormat.NV12, [(1, 48, 64, 1), (1, 24, 32, 1)]),  # UV given as one channel
    (interop.FrameFormat.RGB, [(1, 48, 64, 2)]),
    (interop.FrameFormat.I420, [(1, 48, 64, 1), (1, 24, 32, 2), (1, 24, 32, 1)])])
def test_plane_prefix_refuses_planes_with_the_wrong_channel_count(fmt: interop.FrameFormat, shapes: list) -> None:
    import openvino as ov

    with pytest.raises(interop.InvalidTensorError, match="channels"):
        _preprocess.plane_prefix(ov, fmt, shapes, [ov.Type.u8] * len(shapes), 64, 48, (32, 64), True,
                                 interop.ColorSpace.BT709)
