"""textdet.boxes_from_map (the DB post-processing `interop run` does per frame) against a plain numpy statement of the
same algorithm: the same boxes, point for point and score for score, on maps of rotated regions at many sizes and
scales; and a drawn rectangle found where it was drawn."""

from __future__ import annotations

import math

import numpy as np
import pytest

from interop import textdet
from interop.errors import InvalidTensorError, UnsupportedTypeError

cv2 = pytest.importorskip("cv2")


def _reference(p: np.ndarray, fw: int, fh: int) -> list[tuple[np.ndarray, float]]:
    """The algorithm as numpy states it (array ops on each region's four points), ordered as boxes_from_map orders."""
    h, w = p.shape
    mask = cv2.dilate((p > textdet.THRESH).astype(np.uint8), np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    out = []
    for c in contours[:textdet.MAX_CANDIDATES]:
        (cx, cy), (rw, rh), ang = cv2.minAreaRect(c)
        if min(rw, rh) < textdet.MIN_SIZE:
            continue
        pts = cv2.boxPoints(((cx, cy), (rw, rh), ang))
        x0, y0 = np.clip(np.floor(pts.min(axis=0)).astype(int), 0, [w - 1, h - 1]).tolist()
        x1, y1 = np.clip(np.ceil(pts.max(axis=0)).astype(int), 0, [w - 1, h - 1]).tolist()
        roi = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
        cv2.fillPoly(roi, [np.round(pts - [x0, y0]).astype(np.int32)], 1)
        score = float(cv2.mean(p[y0:y1 + 1, x0:x1 + 1], roi)[0])
        if score < textdet.BOX_THRESH:
            continue
        d = rw * rh * textdet.UNCLIP_RATIO / (2.0 * (rw + rh))
        rw2, rh2 = rw + 2 * d, rh + 2 * d
        if min(rw2, rh2) < textdet.MIN_SIZE + 2:
            continue
        q = cv2.boxPoints(((cx, cy), (rw2, rh2), ang)).astype(np.float32)
        q[:, 0] = np.clip(np.round(q[:, 0] * (fw / w)), 0, fw - 1)
        q[:, 1] = np.clip(np.round(q[:, 1] * (fh / h)), 0, fh - 1)
        by_x = q[np.argsort(q[:, 0], kind="stable")]
        left, right = by_x[:2][np.argsort(by_x[:2, 1], kind="stable")], by_x[2:][np.argsort(by_x[2:, 1], kind="stable")]
        tl, bl, tr, br = left[0], left[1], right[0], right[1]
        if math.hypot(*(tl - tr)) <= 3 or math.hypot(*(tl - bl)) <= 3:
            continue
        out.append((np.array([tl, tr, br, bl], np.float32), score))
    out.sort(key=lambda b: (int(np.floor(b[0][:, 1].min())), int(np.floor(b[0][:, 0].min()))))
    return out


def _random_map(rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    h, w = (int(v) for v in rng.integers(20, 300, 2))
    m = np.zeros((h, w), np.float32)
    for _ in range(int(rng.integers(1, 12))):  # rotated regions, some crossing the map's edges
        centre = (float(rng.uniform(-10, w + 10)), float(rng.uniform(-10, h + 10)))
        size = (float(rng.uniform(2, w / 2)), float(rng.uniform(2, h / 3)))
        pts = cv2.boxPoints((centre, size, float(rng.uniform(-90, 90)))).astype(np.int32)
        cv2.fillPoly(m, [pts], float(rng.uniform(0.2, 1.0)))
    if rng.random() < 0.5:
        m += rng.uniform(0, 0.35, (h, w)).astype(np.float32)
    return m, int(rng.integers(w // 2 + 1, 3 * w)), int(rng.integers(h // 2 + 1, 3 * h))


@pytest.mark.parametrize("seed", range(4))
def test_boxes_equal_the_numpy_statement_of_the_algorithm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(60):
        m, fw, fh = _random_map(rng)
        got = textdet.boxes_from_map(m, fw, fh)
        want = _reference(m, fw, fh)
        assert len(got) == len(want)
        for b, (pts, score) in zip(got, want):
            assert b.points.dtype == np.float32 and np.array_equal(b.points, pts) and b.score == score
        found += len(got)
    assert found > 20  # the maps gave boxes to compare


def test_a_drawn_rectangle_is_found_where_it_was_drawn() -> None:
    m = np.zeros((100, 200), np.float32)
    m[40:60, 30:150] = 0.9  # 120 x 20 map pixels
    (b,) = textdet.boxes_from_map(m, 400, 300)  # the frame is 2x wide, 3x tall
    x0, y0, x1, y1 = b.bbox
    assert 0.8 < b.score < 0.9  # the mean inside the region's box: 0.9, less the ring the mask's dilation adds
    # the region grown by area * ratio / perimeter on each side, then scaled to the frame
    d = 120 * 20 * textdet.UNCLIP_RATIO / (2 * (120 + 20))
    assert (x0, x1) == pytest.approx((2 * (30 - d), 2 * (150 + d)), abs=3)
    assert (y0, y1) == pytest.approx((3 * (40 - d), 3 * (60 + d)), abs=4)
    assert b.points[0].tolist() == [x0, y0]  # clockwise from the top-left corner


def test_tiny_maps_and_numpy_scalar_thresholds() -> None:
    """A 1x1 map has no region (OpenCV would take it for a scalar); a numpy scalar threshold is the float it holds."""
    assert textdet.boxes_from_map(np.ones((1, 1), np.float32), 10, 10) == []
    m, fw, fh = _random_map(np.random.default_rng(7))
    want = [(b.points.tolist(), b.score) for b in textdet.boxes_from_map(m, fw, fh)]
    for t in (np.float32(textdet.THRESH), np.float64(textdet.THRESH)):
        assert [(b.points.tolist(), b.score) for b in textdet.boxes_from_map(m, fw, fh, thresh=t)] == want


@pytest.mark.parametrize(("kw", "error"), [
    ({"unclip_ratio": float("nan")}, InvalidTensorError), ({"unclip_ratio": float("inf")}, InvalidTensorError),
    ({"unclip_ratio": -1.0}, InvalidTensorError), ({"thresh": float("nan")}, InvalidTensorError),
    ({"thresh": 10 ** 400}, InvalidTensorError), ({"frame_width": 0}, InvalidTensorError),
    ({"box_thresh": "0.5"}, UnsupportedTypeError), ({"thresh": True}, UnsupportedTypeError),
    ({"frame_height": "8"}, UnsupportedTypeError), ({"frame_width": 8.0}, UnsupportedTypeError)])
def test_bad_parameters_are_a_typed_error(kw: dict, error: type) -> None:
    args = {"frame_width": 8, "frame_height": 8, **kw}
    with pytest.raises(error, match="boxes_from_map"):
        textdet.boxes_from_map(np.zeros((8, 8), np.float32), **args)
