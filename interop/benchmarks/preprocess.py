"""Benchmark: pre-processing of decoded 1080p frames for PP-OCRv4 detection (960x544 BGR NCHW f32), method by method.

Issue 20: pre-processing must cost at most 10 % of the network's CPU per frame, with no copy of the decoder's planes.
Measured here on the same decoded frames (1080p I420 from H.264, and the same frames as NV12), one method at a time:

- ``plain network``: the network alone, fed pre-processed tensors from memory (same precision and request pool):
  the real ceiling;
- ``interop Inference``: interop's own model (pre-processing in the graph) on mapped frames (the bound that
  benchmark (b) used), on the same I420 frames labelled BT.709 (most HD video: the frame's own matrix, not
  OpenVINO's BT.601 op), and interop's Inference on the pre-processed tensors;
- pre-processing graphs, each compiled alone (its CPU time per frame) and the main ones fused in front of the network
  (their throughput against the plain network): interop's graph before issue 20 (f32 Interpolate of each plane, then
  OpenVINO's I420/NV12-to-BGR at the output size), ``interpolate-*`` (the same on 8-bit planes, linear / nearest /
  cubic), ``gather-linear`` (a separable bilinear resize made of Gather and arithmetic, then a 1x1 convolution that
  converts colour), ``plane prefix`` (interop's graph now, ``interop.inference._preprocess.plane_prefix``: each plane
  resized on its own in 8 bits, then one 1x1 convolution with the frame's own colour matrix; nearest and linear);
- ``separate model``: interop's graph as its own compiled model, writing the network's input tensor;
- ``OpenCV thread pool``: cv2.resize of each plane + cvtColor at the output size + normalise, on a thread pool (the
  baseline to beat; it copies, the others do not).

Accuracy of each method against the naive path (``to_ndarray('rgb24')`` -> ``cv2.resize`` INTER_LINEAR -> normalise):
the network's probability map (mean absolute difference, limit 0.02) and the text boxes (every box matched with
IoU >= 0.8). All timings are process CPU time per frame (every thread) and frames per second, cases interleaved over
``reps`` repetitions, medians reported.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import Result, machine, median

log = logging.getLogger(__name__)

NAME = "preprocess"
SUMMARY = "pre-processing of 1080p I420/NV12 frames for text detection (960x544): each method's CPU per frame and accuracy"
REQUIRES: tuple[tuple[str, str], ...] = (("av", "PyAV"), ("openvino", "OpenVINO"), ("cv2", "OpenCV"))
WIDTH, HEIGHT = 1920, 1080
INPUT_SIZE = (960, 544)  # (width, height) of the model input
HELD = 4  # decoded frames held in memory and cycled
MAD_MAX = 0.02
IOU_MIN = 0.8
BEFORE = "interpolate-linear (f32) + OpenVINO colour op (interop before issue 20)"


def _frames() -> list[Any]:
    """HELD decoded 1080p I420 frames of a pinned text clip (made once, cached)."""
    import av

    from ..clip import make_clip

    d = os.environ.get("INTEROP_BENCH_DIR") or os.path.join(tempfile.gettempdir(), "interop-bench")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"text_{WIDTH}x{HEIGHT}_{HELD}f_pre_r2.mp4")  # _r2: same bytes every time (clip.encode)
    if not os.path.isfile(path):
        tmp = path + ".part.mp4"
        make_clip(tmp, WIDTH, HEIGHT, HELD, crf=23, preset="veryfast")
        os.replace(tmp, path)
    with av.open(path) as c:
        return [f for _, f in zip(range(HELD), c.decode(video=0))]


# ---- pre-processing graphs --------------------------------------------------------------------------------


def _bgr_matrix(mean: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(3x3 weights, bias) from 8-bit limited-range BT.601 Y, U, V to normalised B, G, R (the clip's colours)."""
    kr, kb = 0.299, 0.114
    kg = 1 - kr - kb
    y, c = 255 / 219, 255 / 224
    r = [y, 0.0, 2 * (1 - kr) * c]
    g = [y, -2 * kb * (1 - kb) / kg * c, -2 * kr * (1 - kr) / kg * c]
    b = [y, 2 * (1 - kb) * c, 0.0]
    w = np.array([b, g, r], np.float64)
    off = np.array([16, 128, 128], np.float64)
    bias = -w @ off
    return (w / scale).astype(np.float32), ((bias - mean) / scale).astype(np.float32)


def _taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps (i0, i1, weight of i1) of a half-pixel resize n_in -> n_out, as cv2.resize INTER_LINEAR."""
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    src = np.clip(src, 0, n_in - 1)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (src - i0).astype(np.float32)


def _resize_axis(x: Any, axis: int, n_in: int, n_out: int, rank: int) -> Any:
    """Bilinear resize of ``x`` along ``axis`` with two Gathers and a blend (f32 out); n_in == n_out: a crop."""
    import openvino as ov
    import openvino.opset11 as ops

    if n_in == n_out:
        idx = ops.constant(np.arange(n_in, dtype=np.int64))
        g = ops.gather(x, idx, ops.constant(np.int64(axis)))
        return g if g.get_output_element_type(0) == ov.Type.f32 else ops.convert(g, ov.Type.f32)
    i0, i1, w = _taps(n_in, n_out)
    ax = ops.constant(np.int64(axis))
    g0 = ops.convert(ops.gather(x, ops.constant(i0), ax), ov.Type.f32)
    g1 = ops.convert(ops.gather(x, ops.constant(i1), ax), ov.Type.f32)
    shape = [1] * rank
    shape[axis] = n_out
    return ops.add(g0, ops.multiply(ops.subtract(g1, g0), ops.constant(w.reshape(shape))))


def gather_linear(planes: Sequence[tuple[Any, int, int]], target: tuple[int, int], mean: float,
                  scale: float) -> Any:
    """Planes (parameter (1, rows, pitch, C) u8, visible rows, visible cols) of Y, U, V (or Y, UV) -> normalised BGR
    NCHW f32 at ``target`` (h, w): every plane resized to the output size, then one 1x1 convolution."""
    import openvino.opset11 as ops

    th, tw = target
    chans = []
    for p, h, w in planes:
        x = _resize_axis(p, 1, h, th, 4)
        x = _resize_axis(x, 2, w, tw, 4)
        chans.append(x)
    x = ops.concat(chans, 3) if len(chans) > 1 else chans[0]
    x = ops.transpose(x, ops.constant(np.array([0, 3, 1, 2], np.int64)))
    wt, bias = _bgr_matrix(mean, scale)
    x = ops.convolution(x, ops.constant(wt.reshape(3, 3, 1, 1)), [1, 1], [0, 0], [0, 0], [1, 1])
    return ops.add(x, ops.constant(bias.reshape(1, 3, 1, 1)))


def interpolate_then_convert(planes: Sequence[tuple[Any, int, int]], nv12: bool, target: tuple[int, int], mode: str,
                             mean: float, scale: float, f32: bool = False) -> Any:
    """Planes -> crop -> OpenVINO Interpolate on 8-bit (``mode``; ``f32``: on f32, as interop did before issue 20)
    -> OpenVINO's I420/NV12-to-BGR at the output size -> f32 -> normalise -> NCHW."""
    import openvino as ov
    import openvino.opset8 as op8
    import openvino.opset11 as ops

    th, tw = target
    i64 = np.int64
    outs = []
    for k, (p, h, w) in enumerate(planes):
        c = p.get_output_partial_shape(0)[3].get_length()
        x = ops.slice(p, np.array([0, 0, 0, 0], i64), np.array([1, h, w, c], i64), np.array([1, 1, 1, 1], i64))
        if f32:
            x = ops.convert(x, ov.Type.f32)
        oh, ow = (th, tw) if k == 0 else (th // 2, tw // 2)
        kw: dict[str, Any] = {"coordinate_transformation_mode": "half_pixel"}
        if mode == "nearest":
            kw["nearest_mode"] = "round_prefer_floor"
        outs.append(ops.interpolate(x, np.array([oh, ow], i64), mode, "sizes", axes=np.array([1, 2], i64), **kw))
    x = op8.nv12_to_bgr(*outs) if nv12 else op8.i420_to_bgr(*outs)
    if not f32:
        x = ops.convert(x, ov.Type.f32)
    x = ops.multiply(ops.subtract(x, ops.constant(np.float32(mean))), ops.constant(np.float32(1 / scale)))
    return ops.transpose(x, ops.constant(np.array([0, 3, 1, 2], i64)))


# ---- methods -------------------------------------------------------------------------------------------------


class _Case:
    """One method: ``prepare(frame index)`` -> inputs, ``run(request, inputs)`` per frame on a worker thread."""

    def __init__(self, name: str, compiled: Any, inputs: list[list[Any]], host: Callable[[int, Any], None] | None = None,
                 pre: Any = None):
        self.name, self.compiled, self.inputs, self.host, self.pre = name, compiled, inputs, host, pre


def _throughput(case: _Case, frames: int, nreq: int) -> tuple[float, float]:
    """(fps, process CPU ms per frame) of ``case`` over ``frames`` frames on ``nreq`` worker threads, each with its
    own request (and, for a separate pre-processing model, its own pre-processing request feeding it)."""
    import openvino as ov

    reqs = [case.compiled.create_infer_request() for _ in range(nreq)]
    pres = []
    if case.pre is not None:
        for r in reqs:
            pr = case.pre.create_infer_request()
            out = ov.Tensor(ov.Type.f32, case.pre.outputs[0].get_shape())
            pr.set_output_tensor(out)
            r.set_input_tensor(out)  # the pre-processing request writes the network's input: nothing in between
            pres.append(pr)
    counter = iter(range(frames))
    lock = threading.Lock()

    def worker(k: int) -> None:
        r = reqs[k]
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            ins = case.inputs[i % len(case.inputs)]
            if case.host is not None:
                case.host(i, r)
            elif pres:
                pres[k].infer(ins)
                r.infer()
            else:
                r.infer(ins)

    for k in range(nreq):  # warm-up
        worker_once = case.inputs[0]
        if case.host is not None:
            case.host(0, reqs[k])
        elif pres:
            pres[k].infer(worker_once)
            reqs[k].infer()
        else:
            reqs[k].infer(worker_once)
    t0, c0 = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(nreq)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return frames / dt, 1000 * dc / frames


def _cpu_alone(compiled: Any, inputs: list[list[Any]], frames: int) -> float:
    """Process CPU ms per frame of a compiled pre-processing model run alone, one request at a time."""
    r = compiled.create_infer_request()
    r.infer(inputs[0])
    c0 = time.process_time()
    for i in range(frames):
        r.infer(inputs[i % len(inputs)])
    return 1000 * (time.process_time() - c0) / frames


def run(quick: bool = False, precision: str | None = None, reps: int | None = None) -> list[Result]:
    """Every method on the same held frames; ``reps`` interleaved repetitions (default 3; 1 when ``quick``)."""
    import cv2
    import openvino as ov
    import openvino.opset11 as ops

    import interop

    from .. import textdet

    reps = reps or (1 if quick else 3)
    frames = 16 if quick else 48
    tw, th = INPUT_SIZE
    mean, scale = textdet.MEAN, textdet.SCALE
    # as `interop run` compiles the detector
    cfg: dict[str, Any] = {"PERFORMANCE_HINT": "THROUGHPUT", **(textdet.compile_config("CPU", precision) or {})}
    core = ov.Core()
    held = _frames()
    nv12 = [vf.reformat(format="nv12") for vf in held]

    # -- the naive reference inputs, and the plain network --------------------------------------------------
    def naive(vf: Any) -> np.ndarray:
        img = cv2.resize(vf.to_ndarray(format="rgb24"), (tw, th), interpolation=cv2.INTER_LINEAR)[:, :, ::-1]
        return np.ascontiguousarray(((img.astype(np.float32) - mean) / scale).transpose(2, 0, 1)[None])

    ref_in = [naive(vf) for vf in held]
    net_model = core.read_model(textdet.model_path())
    net_model.reshape({net_model.inputs[0]: ov.PartialShape([1, 3, th, tw])})
    plain = core.compile_model(net_model, "CPU", cfg)
    nreq = max(1, int(plain.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
    used = str(plain.get_property("INFERENCE_PRECISION_HINT"))
    acc_net = core.compile_model(net_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    ref_maps = [acc_net.create_infer_request().infer([x])[0].copy() for x in ref_in]
    ref_boxes = [textdet.boxes_from_map(m, WIDTH, HEIGHT) for m in ref_maps]

    def accuracy(tensors: list[np.ndarray]) -> dict[str, Any]:
        mads, ious, nbox = [], [], []
        for x, rm, rb in zip(tensors, ref_maps, ref_boxes):
            m = acc_net.create_infer_request().infer([x])[0]
            mads.append(float(np.abs(m - rm).mean()))
            bz = textdet.boxes_from_map(m, WIDTH, HEIGHT)
            nbox.append((len(bz), len(rb)))
            ious.append(min((max((textdet.iou(b, z) for z in bz), default=0.0) for b in rb), default=1.0))
        pix = float(np.mean([np.abs(a - b).mean() for a, b in zip(tensors, ref_in)]) * scale)
        ok = max(mads) <= MAD_MAX and min(ious) >= IOU_MIN and all(a == b for a, b in nbox)
        return {"map_mad_max": round(max(mads), 5), "iou_min": round(min(ious), 3), "boxes": nbox,
                "input_mad_levels": round(pix, 3), "accurate": ok}

    # -- planes of the held frames mapped zero-copy to OpenVINO ---------------------------------------------
    mapped: dict[str, list[Any]] = {"I420": [interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO) for vf in held],
              "NV12": [interop.map(interop.wrap(vf), interop.MemoryType.OPENVINO) for vf in nv12]}
    plane_inputs = {k: [[t.native for t in f.tensors] for f in v] for k, v in mapped.items()}

    def params(fmt: str) -> list[tuple[Any, int, int]]:
        first = mapped[fmt][0]
        vis = [(HEIGHT, WIDTH)] + [(-(-HEIGHT // 2), -(-WIDTH // 2))] * (len(first.tensors) - 1)
        return [(ops.parameter(list(t.native.get_shape()), ov.Type.u8, name=f"p{i}"), h, w)
                for i, (t, (h, w)) in enumerate(zip(first.tensors, vis))]

    def fuse(out: Any, ps: list[Any]) -> Any:
        m = net_model.clone()
        param = m.get_parameters()[0]
        for ti in list(param.output(0).get_target_inputs()):
            ti.replace_source_output(out.output(0))
        return ov.Model(m.get_results(), ps, "fused")

    from ..inference import _preprocess

    def f32_linear_then_op(fmt: str) -> tuple[Any, list[Any]]:
        pp = params(fmt)
        return interpolate_then_convert(pp, fmt == "NV12", (th, tw), "linear_onnx", mean, scale, f32=True), \
            [p for p, _, _ in pp]

    graphs: dict[str, Callable[[str], tuple[Any, list[Any]]]] = {BEFORE: f32_linear_then_op}
    for imode in ("linear_onnx", "nearest", "cubic"):
        def build(fmt: str, mode: str = imode) -> tuple[Any, list[Any]]:
            pp = params(fmt)
            return interpolate_then_convert(pp, fmt == "NV12", (th, tw), mode, mean, scale), [p for p, _, _ in pp]
        graphs[f"interpolate-{imode.replace('_onnx', '')} (8-bit) + OpenVINO colour op"] = build

    def build_gather(fmt: str) -> tuple[Any, list[Any]]:
        pp = params(fmt)
        return gather_linear(pp, (th, tw), mean, scale), [p for p, _, _ in pp]
    graphs["gather-linear + 1x1 conv"] = build_gather

    for mode in ("nearest", "linear"):
        def build_prefix(fmt: str, mode: str = mode) -> tuple[Any, list[Any]]:
            shapes = [tuple(t.native.get_shape()) for t in mapped[fmt][0].tensors]
            old, _preprocess.RESIZE = _preprocess.RESIZE, mode
            try:
                ps, img = _preprocess.plane_prefix(ov, interop.FrameFormat[fmt], shapes, [ov.Type.u8] * len(shapes),
                                                   WIDTH, HEIGHT, (th, tw), textdet.RGB)
            finally:
                _preprocess.RESIZE = old
            return ops.multiply(ops.subtract(img, ops.constant(np.float32(mean))),
                                ops.constant(np.float32(1 / scale))), ps
        graphs[f"plane prefix ({'interop, ' if mode == _preprocess.RESIZE else ''}{mode}) + 1x1 conv"] = build_prefix
    fused_too = (BEFORE, "interpolate-nearest (8-bit) + OpenVINO colour op", "plane prefix (interop, nearest) + 1x1 conv",
                 "plane prefix (linear) + 1x1 conv")
    separate = "plane prefix (interop, nearest) + 1x1 conv"

    common = {"frames": f"{WIDTH}x{HEIGHT} decoded, {HELD} held, {frames} per case", "input": f"{tw}x{th}",
              "precision": f"{precision or 'plugin default'} ({used})", "requests": nreq, "reps": reps,
              "cpus": os.cpu_count(), "machine": machine()}
    results: list[Result] = []
    cases: list[tuple[str, _Case]] = [("plain network", _Case("plain", plain, [[x] for x in ref_in]))]
    pre_alone: dict[str, list[float]] = {}
    acc: dict[str, dict[str, Any]] = {}
    for fmt in ("I420", "NV12"):
        for gname, make in graphs.items():
            out, ps = make(fmt)
            pre = core.compile_model(ov.Model([out], ps, "pre"), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
            key = f"{gname}, {fmt}"
            tensors = [pre.create_infer_request().infer(ins)[0].copy() for ins in plane_inputs[fmt]]
            acc[key] = accuracy(tensors)
            pre_alone[key] = []
            if gname in fused_too:
                fused = core.compile_model(fuse(out, ps), "CPU", cfg)
                cases.append((f"fused: {key}", _Case(key, fused, plane_inputs[fmt])))
            if gname == separate:
                sep = core.compile_model(ov.Model([out], ps, "pre"), "CPU", cfg)
                cases.append((f"separate model: {key}", _Case(key, plain, plane_inputs[fmt], pre=sep)))
            pre_alone[key].append(_cpu_alone(pre, plane_inputs[fmt], frames))

    # -- OpenCV on a thread pool (each worker converts its own frame, then runs its request) -------------------
    cv2.setNumThreads(1)
    bufs: dict[int, np.ndarray] = {}

    def cv_pre(vf: Any, dst: np.ndarray) -> None:
        y, u, v = (np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in vf.planes)
        yuv = np.empty((th * 3 // 2, tw), np.uint8)
        cv2.resize(y, (tw, th), yuv[:th], interpolation=cv2.INTER_LINEAR)
        q = th // 4
        cv2.resize(u, (tw // 2, th // 2), yuv[th:th + q].reshape(th // 2, tw // 2), interpolation=cv2.INTER_LINEAR)
        cv2.resize(v, (tw // 2, th // 2), yuv[th + q:].reshape(th // 2, tw // 2), interpolation=cv2.INTER_LINEAR)
        bgr = cv2.cvtColor(yuv, cv2.COLOR_YUV2BGR_I420)
        dst[0] = ((bgr.astype(np.float32) - mean) * (1 / scale)).transpose(2, 0, 1)

    def cv_host(i: int, r: Any) -> None:
        dst = bufs.get(id(r))
        if dst is None:
            dst = bufs[id(r)] = np.empty((1, 3, th, tw), np.float32)
            r.set_input_tensor(ov.Tensor(dst, shared_memory=True))
        cv_pre(held[i % HELD], dst)
        r.infer()

    cv_tensors = []
    for vf in held:
        d = np.empty((1, 3, th, tw), np.float32)
        cv_pre(vf, d)
        cv_tensors.append(d)
    acc["OpenCV (resize planes + cvtColor), I420"] = accuracy(cv_tensors)
    c0 = time.process_time()
    d = np.empty((1, 3, th, tw), np.float32)
    for i in range(frames):
        cv_pre(held[i % HELD], d)
    pre_alone["OpenCV (resize planes + cvtColor), I420"] = [1000 * (time.process_time() - c0) / frames]
    cases.append(("OpenCV thread pool, I420", _Case("cv", plain, [[]], host=cv_host)))

    # -- interop's own Inference: today's model on frames, and on the pre-processed tensors ---------------------
    inf = interop.Inference(textdet.model_path(), "CPU", input_size=INPUT_SIZE, mean=mean, scale=scale, rgb=textdet.RGB,
                    config={k: v for k, v in cfg.items() if k != "PERFORMANCE_HINT"} or None)

    def inf_loop(items: list[Any]) -> tuple[float, float]:
        inf.compile_for(items[0])
        inf.infer(items[0])
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(frames):
            inf.infer_async(items[i % len(items)])
        inf.wait_all()
        return frames / (time.perf_counter() - t0), 1000 * (time.process_time() - c0) / frames

    today_tensors = []
    for mf in mapped["I420"]:
        # today's pre-processing output: the fused model's input cannot be read back, so compare the maps only
        today_tensors.append(next(iter(inf.infer(mf).values())))
    mads = [float(np.abs(m - r).mean()) for m, r in zip(today_tensors, ref_maps)]
    acc["interop Inference, I420"] = {"map_mad_max": round(max(mads), 5), "precision": used}

    # the same I420 frames as BT.709 (most HD video): the frame's own matrix by the plane terms, not OpenVINO's op
    bt709 = [interop.Frame(list(m.tensors), m.format, m.width, m.height, colorspace=interop.ColorSpace.BT709)
             for m in mapped["I420"]]
    fps: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for _ in range(reps):  # interleaved: drifts in machine load hit every case alike
        for name, case in cases:
            rate, c = _throughput(case, frames, nreq)
            fps.setdefault(name, []).append(rate)
            cpu.setdefault(name, []).append(c)
        for name, items in (("interop Inference, I420 frames", mapped["I420"]),
                            ("interop Inference, NV12 frames", mapped["NV12"]),
                            ("interop Inference, I420 frames as BT.709", bt709),
                            ("interop Inference, pre-processed tensors", ref_in)):
            rate, c = inf_loop(items)
            fps.setdefault(name, []).append(rate)
            cpu.setdefault(name, []).append(c)
    inf.close()

    net_cpu = median(cpu["plain network"])
    net_fps = median(fps["plain network"])
    own_fps = median(fps["interop Inference, I420 frames"])
    for name in fps:
        c, rate = median(cpu[name]), median(fps[name])
        details = {**common, "fps_all": fps[name], "cpu_all": cpu[name], "cpu_ms_per_frame": round(c, 2),
                   "pre_cpu_share": round((c - net_cpu) / net_cpu, 3)}
        results.append(Result(NAME, f"{name}: fps / plain network", rate / net_fps, "x", details))
        if name != "plain network":
            results.append(Result(NAME, f"{name}: fps / interop Inference on I420 frames", rate / own_fps, "x", details))
        results.append(Result(NAME, f"{name}: CPU ms per frame", c, "ms", details))
    for key, vals in pre_alone.items():
        results.append(Result(NAME, f"pre-processing alone: {key}: CPU ms per frame", median(vals), "ms",
                              {**common, **acc.get(key, {}), "share_of_network_cpu": round(median(vals) / net_cpu, 3)}))
    for key, a in acc.items():
        results.append(Result(NAME, f"accuracy: {key}: map MAD (limit {MAD_MAX})", a["map_mad_max"], "", {**common, **a}))
    return results


def markdown(results: list[Result]) -> str:
    lines = ["| case | value | unit | details |", "|---|---:|---|---|"]
    for r in results:
        keep = {k: v for k, v in r.details.items() if k in ("pre_cpu_share", "share_of_network_cpu", "iou_min",
                                                              "input_mad_levels", "accurate", "boxes")}
        lines.append(f"| {r.case} | {r.value:.4g} | {r.unit} | {keep} |")
    return "\n".join(lines) + "\n"


def environment() -> str:
    import openvino as ov

    return f"OpenVINO {ov.get_version()} on {machine()}"
