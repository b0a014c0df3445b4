"""Acceptance: the zero-copy path (decoder planes -> pre-processing inside the model) gives the same text detections
as the naive path (to_ndarray('rgb24') -> cv2.resize -> normalise -> model without pre-processing).

Both paths run the same PP-OCRv4 detector at INFERENCE_PRECISION_HINT=f32, on the bundled clip and on an odd-size
clip whose planes have padded pitches (854x480: line sizes 896/448).
"""

from __future__ import annotations

import numpy as np
import pytest

import interop  # noqa: I001 - before openvino: interop sets up the runtime first
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from interop import textdet  # noqa: E402
from interop.clip import default_clip, make_clip  # noqa: E402

MAD_MAX = 0.02
IOU_MIN = 0.8


def _model_or_skip() -> str:
    try:
        return textdet.model_path()
    except interop.BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


@pytest.fixture(scope="module")
def padded_clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_clip(str(tmp_path_factory.mktemp("clips") / "odd854.mp4"), 854, 480, frames=6, preset="ultrafast")


def naive_input(vf, size: tuple[int, int]) -> np.ndarray:
    """The usual CPU path: convert to RGB, resize, normalise, BGR NCHW float32 (all copies)."""
    import cv2

    rgb = vf.to_ndarray(format="rgb24")
    img = cv2.resize(rgb, size, interpolation=cv2.INTER_LINEAR)[:, :, ::-1]  # the model takes BGR
    x = (img.astype(np.float32) - textdet.MEAN) / textdet.SCALE
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def _compare(path: str, picks: tuple[int, ...]) -> list[tuple[float, int]]:
    import av

    with av.open(path) as c:
        frames = [f for _, f in zip(range(max(picks) + 1), c.decode(video=0))]
    w, h = frames[0].width, frames[0].height
    size = textdet.input_size_for(w, h)
    inf = interop.Inference(_model_or_skip(), "CPU", input_size=size, mean=textdet.MEAN, scale=textdet.SCALE,
                            rgb=False, config={"INFERENCE_PRECISION_HINT": "f32"})
    out = []
    for i in picks:
        vf = frames[i]
        with interop.copy_meter() as m:
            zc = next(iter(inf.infer(interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO)).values()))
        assert m.copies == 0 and m.bytes == 0, m.records
        ref = next(iter(inf.infer(naive_input(vf, size)).values()))
        assert zc.shape == ref.shape == (1, 1, size[1], size[0])
        mad = float(np.abs(zc - ref).mean())
        assert mad <= MAD_MAX, f"frame {i}: mean abs difference {mad}"
        b_zc = textdet.boxes_from_map(zc, w, h)
        b_ref = textdet.boxes_from_map(ref, w, h)
        assert len(b_zc) == len(b_ref) > 0, (i, [b.bbox for b in b_zc], [b.bbox for b in b_ref])
        for b in b_ref:
            best = max(textdet.iou(b, z) for z in b_zc)
            assert best >= IOU_MIN, f"frame {i}: box {b.bbox} matched with IoU {best:.2f} only"
        out.append((mad, len(b_zc)))
    return out


def test_bundled_clip_zero_copy_matches_naive() -> None:
    res = _compare(default_clip(), (0, 7))
    assert all(n >= 3 for _, n in res)  # the clip has six text lines: detections are meaningful


def test_padded_pitch_clip_zero_copy_matches_naive(padded_clip: str) -> None:
    import av

    with av.open(padded_clip) as c:
        vf = next(c.decode(video=0))
    assert [p.line_size for p in vf.planes][0] > vf.width  # really padded
    res = _compare(padded_clip, (0, 5))
    assert all(n >= 3 for _, n in res)
