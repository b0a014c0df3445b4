"""The default model of ``interop run``: PP-OCRv4 text detection (DB), located on disk, plus its post-processing.

The ONNX file ships inside the PyPI package ``rapidocr-onnxruntime`` (installed with ``--no-deps``: only its files
are read). The package is found with ``importlib.util.find_spec`` and never imported (it would import onnxruntime).

The model takes BGR, NCHW float32 normalised as ``(pixel - 127.5) / 127.5`` at any size that is a multiple of 32,
and returns a text-probability map (N, 1, H, W) in [0, 1]. ``boxes_from_map`` turns that map into text boxes
(DB post-processing: threshold, contours, box score, unclip) in frame coordinates.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BackendUnavailableError, InvalidTensorError, UnsupportedTypeError

PACKAGE = "rapidocr_onnxruntime"
PIN = "rapidocr-onnxruntime==1.4.4"
MODEL_FILE = os.path.join("models", "ch_PP-OCRv4_det_infer.onnx")
MODEL_NAME = "PP-OCRv4 text detection (ch_PP-OCRv4_det_infer.onnx)"
#: pre-processing the model was trained with, in 0..255 pixel units (BGR order; the same value for each channel)
MEAN = 127.5
SCALE = 127.5
RGB = False
#: DB post-processing defaults (RapidOCR's config.yaml)
THRESH = 0.3
BOX_THRESH = 0.5
UNCLIP_RATIO = 1.6
MAX_CANDIDATES = 1000
MIN_SIZE = 3


def model_path() -> str:
    """Path of the PP-OCRv4 detection ONNX file, or BackendUnavailableError saying how to install it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = os.path.join(loc, MODEL_FILE)
        if os.path.isfile(path):
            return path
    where = f" (package found at {locations[0]} but {MODEL_FILE} is missing)" if locations else ""
    raise BackendUnavailableError(
        f"the default model of `interop run` (PP-OCRv4 text detection) is not installed{where}: "
        f"run `interop models install` (pip install --no-deps {PIN}), or pass --model PATH to use your own model",
        backend="openvino", extra=None)


def install_command(python: str | None = None) -> list[str]:
    """The pip command that installs the default model's package: ``--no-deps``, because its declared dependencies
    (onnxruntime, a non-headless OpenCV) are never used and clash with ours. pip's own settings (``PIP_INDEX_URL``,
    ``PIP_FIND_LINKS``, ``PIP_NO_INDEX`` …) apply, so it works offline from a wheelhouse too."""
    return [python or sys.executable, "-m", "pip", "install", "--no-deps", PIN]


def model_status() -> tuple[bool, str]:
    """(installed, path or the fix): the doctor's row for the default model."""
    try:
        return True, model_path()
    except BackendUnavailableError:
        # both commands paste into a shell as they are (the second one for an environment without the CLI on PATH)
        return False, f"not installed: run `interop models install` (or `{shlex.join(install_command('python'))}`)"


#: the frame sources an example or tool may decode with: module, what to install
SOURCES = {"av": "PyAV: pip install '.[ffmpeg]'", "gi": "PyGObject: pip install '.[gst]'"}


def missing_for_detection(source: str) -> str | None:
    """What text detection on frames of ``source`` (a SOURCES key) lacks here, as "needs ..." says it, or None."""
    if importlib.util.find_spec(source) is None:
        return SOURCES[source]
    if importlib.util.find_spec("openvino") is None:
        return "OpenVINO: pip install '.[openvino]'"
    ok, where = model_status()
    return None if ok else f"the text-detection model, {where}"


def compile_config(device: str, precision: str | None) -> dict[str, Any] | None:
    """OpenVINO compile properties for the detector on ``device`` (the one picked: "CPU", "CPU:0", "NPU", ...):
    the precision asked for, and on the CPU one stream per physical core (the THROUGHPUT hint picks fewer at f32 on
    many-core machines, which this small network does not need: more streams keep every core busy while other
    work, such as decoding, takes some of them), with the stream threads left unpinned: the run decodes on the same
    cores, and a stream thread pinned to a core that a decoder thread takes waits there rather than moving to
    another (the network alone runs as fast either way)."""
    cfg: dict[str, Any] = {}
    if precision:
        cfg["INFERENCE_PRECISION_HINT"] = precision
    if device.split(":")[0].strip().upper() == "CPU":
        cfg["ENABLE_CPU_PINNING"] = False
        cores = physical_cores()
        if cores:
            cfg["NUM_STREAMS"] = cores
    return cfg or None


def compile_requests(config: dict[str, Any] | None) -> int | None:
    """Infer requests for the detector compiled with ``config`` (compile_config's): two per CPU stream (one runs
    while the run loop hands the stream its next frame), None where it sets no streams (the device's own number)."""
    return 2 * int(config["NUM_STREAMS"]) if config and "NUM_STREAMS" in config else None


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads of one core counted once); 0 when unknown."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return 0
    cores = set()
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(c))
    return len(cores)


#: the longest side of the detector's input when the run picks it (and of its probability map)
MAX_SIDE = 960


def map_pixels(input_size: tuple[int, int] | None) -> int:
    """The largest probability map (H x W) the detector makes in a run: the input size asked for, or (sized per
    frame, as frames may change size) the largest ``input_size_for`` gives."""
    if input_size is not None:
        return input_size[0] * input_size[1]
    return MAX_SIDE * MAX_SIDE


def input_size_for(width: int, height: int, max_side: int = MAX_SIDE, multiple: int = 32) -> tuple[int, int]:
    """Model input (width, height) for a frame: aspect kept, longest side <= ``max_side``, multiples of 32."""
    s = min(1.0, max_side / max(width, height))
    w = max(multiple, int(round(width * s / multiple)) * multiple)
    h = max(multiple, int(round(height * s / multiple)) * multiple)
    return w, h


@dataclass(frozen=True)
class TextBox:
    """One detected text region: a rotated rectangle as 4 corner points (x, y) in frame pixels, and its score."""

    points: np.ndarray  # (4, 2) float32, clockwise from top-left
    score: float

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        """Axis-aligned (x0, y0, x1, y1)."""
        x0, y0 = np.floor(self.points.min(axis=0)).astype(int)
        x1, y1 = np.ceil(self.points.max(axis=0)).astype(int)
        return int(x0), int(y0), int(x1), int(y1)


_DILATE = np.ones((2, 2), np.uint8)


def boxes_from_map(prob: Any, frame_width: int, frame_height: int, *, thresh: float = THRESH,
                   box_thresh: float = BOX_THRESH, unclip_ratio: float = UNCLIP_RATIO,
                   max_candidates: int = MAX_CANDIDATES) -> list[TextBox]:
    """DB post-processing of a probability map (H, W), (1, H, W) or (1, 1, H, W) into boxes in frame coordinates.

    Simplified unclip: the minimum-area rectangle of each region grows by ``area * unclip_ratio / perimeter`` on
    every side (exact for rectangles, which is what the polygon offset of the reference gives for them too).
    The map is read as float32 and ``thresh`` compared with it as a float32.
    """
    import cv2

    for name, v in (("thresh", thresh), ("box_thresh", box_thresh), ("unclip_ratio", unclip_ratio)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise UnsupportedTypeError(f"boxes_from_map(): {name} must be a number, not {type(v).__name__}")
        try:
            finite = math.isfinite(v)
        except OverflowError:  # an int beyond any float
            finite = False
        if not finite:
            raise InvalidTensorError(f"boxes_from_map(): {name} must be a finite number, not {v!r}")
    if unclip_ratio < 0:
        raise InvalidTensorError(f"boxes_from_map(): unclip_ratio must be >= 0 (how much each box grows), "
                                 f"not {unclip_ratio!r}")
    for name, v in (("frame_width", frame_width), ("frame_height", frame_height)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UnsupportedTypeError(f"boxes_from_map(): {name} must be an int (pixels), not {type(v).__name__}")
        if v < 1:
            raise InvalidTensorError(f"boxes_from_map(): {name} must be at least 1 pixel, not {v}")
    frame_width, frame_height = int(frame_width), int(frame_height)  # numpy integers scale as Python ints do
    p = np.asarray(prob, dtype=np.float32)
    p = p.reshape(p.shape[-2], p.shape[-1])
    h, w = p.shape
    if h * w <= 1:  # no region of MIN_SIZE fits (and OpenCV takes a 1x1 array for a scalar)
        return []
    # This runs once per frame on the result thread, and every step outside OpenCV's calls holds the GIL the run's
    # loop and OpenVINO's callbacks wait for: the mask by OpenCV (0/255 bytes, which findContours reads as 0/1), the
    # per-region arithmetic on Python floats rather than many numpy calls on 4-point arrays (same results: the
    # float32 values read exactly as floats, floor/ceil/round-half-even as numpy's).
    mask = cv2.dilate(cv2.compare(p, float(thresh), cv2.CMP_GT), _DILATE)  # type: ignore[call-overload]  # a scalar
    contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    scale = np.array([frame_width / w, frame_height / h], np.float32)  # as numpy scales float32 points by a float
    top = np.array([frame_width - 1, frame_height - 1], np.float32)
    floor, ceil = math.floor, math.ceil
    keyed: list[tuple[tuple[int, int], TextBox]] = []
    for c in contours[:max_candidates]:
        (cx, cy), (rw, rh), ang = cv2.minAreaRect(c)
        if min(rw, rh) < MIN_SIZE:
            continue
        pts = cv2.boxPoints(((cx, cy), (rw, rh), ang)).tolist()
        # mean probability inside the box ("fast" score), over its bounding rectangle clipped to the map
        xs, ys = [q[0] for q in pts], [q[1] for q in pts]
        x0, y0 = min(max(floor(min(xs)), 0), w - 1), min(max(floor(min(ys)), 0), h - 1)
        x1, y1 = min(max(ceil(max(xs)), 0), w - 1), min(max(ceil(max(ys)), 0), h - 1)
        roi = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
        cv2.fillPoly(roi, [np.array([[round(x - x0), round(y - y0)] for x, y in pts], np.int32)], 1)
        score = float(cv2.mean(p[y0:y1 + 1, x0:x1 + 1], roi)[0])
        if score < box_thresh:
            continue
        d = rw * rh * unclip_ratio / (2.0 * (rw + rh))
        rw2, rh2 = rw + 2 * d, rh + 2 * d
        if min(rw2, rh2) < MIN_SIZE + 2:
            continue
        big = np.minimum(np.maximum(np.rint(cv2.boxPoints(((cx, cy), (rw2, rh2), ang)) * scale), 0), top).tolist()
        xs = sorted(big, key=lambda q: q[0])  # corners clockwise from top-left (sorted() is stable)
        tl, bl = sorted(xs[:2], key=lambda q: q[1])
        tr, br = sorted(xs[2:], key=lambda q: q[1])
        if math.hypot(tl[0] - tr[0], tl[1] - tr[1]) <= 3 or math.hypot(tl[0] - bl[0], tl[1] - bl[1]) <= 3:
            continue
        box = TextBox(np.array([tl, tr, br, bl], np.float32), score)
        # the sort key: the box's top-left (its bbox's y0, x0), made once per box; integral values, so floor is exact
        keyed.append(((floor(min(tl[1], tr[1], br[1], bl[1])), floor(min(tl[0], tr[0], br[0], bl[0]))), box))
    keyed.sort(key=lambda kb: kb[0])
    return [b for _, b in keyed]


def iou(a: TextBox, b: TextBox) -> float:
    """Intersection over union of the axis-aligned boxes of two detections."""
    ax0, ay0, ax1, ay1 = a.bbox
    bx0, by0, bx1, by1 = b.bbox
    iw = max(0, min(ax1, bx1) - max(ax0, bx0))
    ih = max(0, min(ay1, by1) - max(ay0, by0))
    inter = iw * ih
    union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
    return inter / union if union > 0 else 0.0


def draw(image: np.ndarray, boxes: list[TextBox], color: tuple[int, int, int] = (0, 255, 0)) -> np.ndarray:
    """Draw boxes on a BGR image (in place) and return it."""
    import cv2

    for b in boxes:
        cv2.polylines(image, [np.round(b.points).astype(np.int32)], True, color, 2)
    return image
