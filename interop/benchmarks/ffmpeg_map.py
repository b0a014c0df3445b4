"""Per-frame cost of mapping decoded frames: FFMPEG -> CPU and FFMPEG -> OPENVINO beside raw PyAV.

For 480p (854x480, padded rows), 1080p and 4K, a synthetic H.264 clip is decoded into memory, then every
frame is handled once by each method, the methods taking turns frame by frame (so machine noise hits them
alike); the figure is the median per-frame time in microseconds:

  raw views      PyAV plane views the way a user writes them: np.frombuffer(plane).reshape(rows, pitch)[:, :w]
  raw dlpack     np.from_dlpack(plane) for each plane (read-only, keeps the AVFrame referenced)
  raw openvino   ov.Tensor(np.frombuffer(plane).reshape(1, rows, pitch, 1), shared_memory=True) for each plane
  map cpu        interop.map(frame, MemoryType.CPU).release()         (read-only zero-copy plane views)
  map cpu + numpy  the same, taking a numpy array of every plane (t.numpy()) before the release
  map openvino   interop.map(frame, MemoryType.OPENVINO).release()    (planes at full pitch for OpenVINO; each
                 plane's ov.Tensor is made when .native is first read)
  map openvino + native  the same, reading every plane's ov.Tensor (t.native) before the release
  to_ndarray     frame.to_ndarray()            (a copy of the yuv420p planes)
  to_ndarray rgb frame.to_ndarray(format='rgb24')   (conversion + copy)

and, on frames as a decode loop has them (decoded one by one, each dropped before the next, so the decoder
reuses its buffers), what it costs per frame to have request inputs over the planes (no inference run):

  feed raw openvino  the raw openvino tensors, made by hand
  feed interop       interop.map(frame, OPENVINO) + the inputs interop.Inference feeds for it (one ov.Tensor
                     per decoder buffer, made once: see interop/inference/_inputs.py)

Every method's time includes freeing what it made. Targets (issue 3): map cost flat in frame size
(4K / 480p <= 1.5), <= 1.5x raw views, >= 20x cheaper than to_ndarray() at 4K.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import Result, median

NAME = "ffmpeg_map"
SUMMARY = "per-frame cost of mapping decoded frames FFMPEG -> CPU / OPENVINO, beside raw PyAV views"
REQUIRES: tuple[tuple[str, str], ...] = (("av", "PyAV"), ("openvino", "OpenVINO"))

SIZES = {"480p": (854, 480), "1080p": (1920, 1080), "4K": (3840, 2160)}
FRAMES = {"480p": (240, 40), "1080p": (180, 40), "4K": (60, 16)}  # full, quick


def clip_dir() -> Path:
    return Path(os.environ.get("INTEROP_BENCH_CLIPS", "/tmp/interop-bench-clips"))


def picture(i: int, width: int, height: int) -> Any:
    """Frame ``i`` of the benchmark's clips: an RGB gradient that moves every frame."""
    import numpy as np

    x = np.arange(width, dtype=np.uint16)[None, :]
    y = np.arange(height, dtype=np.uint16)[:, None]
    img = np.empty((height, width, 3), np.uint8)
    img[..., 0] = (x + 4 * i) & 255
    img[..., 1] = (y + 2 * i) & 255
    img[..., 2] = ((x + y) >> 2) & 255
    return img


def make_clip(path: Path, width: int, height: int, frames: int) -> Path:
    """A synthetic H.264 clip of ``picture``, made once and cached at ``path``."""
    from ..clip import encode

    return encode(path, frames, width, height, pattern=picture, reuse=True)


def decode_all(path: Path, limit: int) -> list[Any]:
    import av

    with av.open(str(path)) as c:
        out = []
        for f in c.decode(video=0):
            out.append(f)
            if len(out) == limit:
                break
    return out


def raw_openvino() -> Callable[[Any], Any]:
    """Planes handed to OpenVINO by hand, zero-copy, at full pitch: one ov.Tensor per plane."""
    import numpy as np

    from interop.tensors.openvino import ov_module

    ov = ov_module()

    def fn(vf: Any) -> Any:
        return [ov.Tensor(np.frombuffer(p, np.uint8).reshape(1, p.height, p.line_size, 1), shared_memory=True)
                for p in vf.planes]
    return fn


def methods() -> dict[str, Callable[[Any], Any]]:
    import numpy as np

    import interop
    from interop import MemoryType

    def raw_views(vf: Any) -> Any:
        return [np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, : p.width] for p in vf.planes]

    def raw_dlpack(vf: Any) -> Any:
        return [np.from_dlpack(p) for p in vf.planes]

    def map_cpu(vf: Any) -> None:
        interop.map(vf, MemoryType.CPU).release()

    def map_cpu_numpy(vf: Any) -> Any:
        with interop.map(vf, MemoryType.CPU) as f:
            return [t.numpy() for t in f.tensors]  # type: ignore[union-attr]

    def map_openvino(vf: Any) -> None:
        interop.map(vf, MemoryType.OPENVINO).release()

    def map_openvino_native(vf: Any) -> Any:
        with interop.map(vf, MemoryType.OPENVINO) as f:
            return [t.native for t in f.tensors]  # type: ignore[union-attr]

    return {"raw views": raw_views, "raw dlpack": raw_dlpack, "raw openvino": raw_openvino(), "map cpu": map_cpu,
            "map cpu + numpy": map_cpu_numpy, "map openvino": map_openvino, "map openvino + native": map_openvino_native}


def feed_methods() -> dict[str, Callable[[Any], Any]]:
    """What a decode loop pays per frame to have request inputs over the decoded planes (inference not run):
    ov.Tensors made by hand, or interop.map + what interop.Inference does for a mapped frame."""
    import numpy as np
    import openvino.opset13 as ops

    import interop
    from interop import MemoryType
    from interop.tensors.openvino import ov_module

    ov = ov_module()
    x = ops.parameter([1, 3, -1, -1], np.float32, name="image")
    inf = interop.Inference(ov.Model([ops.relu(x)], [x], "relu"), "CPU")  # never compiled: inputs only

    def feed_interop(vf: Any) -> Any:
        with interop.map(vf, MemoryType.OPENVINO) as f:
            return inf._frame_inputs(f)  # type: ignore[arg-type]

    return {"feed raw openvino": raw_openvino(), "feed interop": feed_interop}


def measure_stream(path: Path, limit: int, fns: dict[str, Callable[[Any], Any]]) -> dict[str, float]:
    """measure(), but on frames as a decode loop has them: each dropped before the next is decoded, so the
    decoder's buffer pool hands the same buffers out again (decoding is not timed)."""
    import av

    times: dict[str, list[float]] = {n: [] for n in fns}
    with av.open(str(path)) as c:
        for i, vf in enumerate(c.decode(video=0)):
            if i == limit:
                break
            took = turn(i, vf, fns)
            if i >= 8:  # the first frames fill the pool (and interop's per-buffer tensors): not the loop's cost
                for n, us in took.items():
                    times[n].append(us)
            del vf
    return {n: median(v) for n, v in times.items()}


def copies() -> dict[str, Callable[[Any], Any]]:
    return {"to_ndarray": lambda vf: vf.to_ndarray(), "to_ndarray rgb": lambda vf: vf.to_ndarray(format="rgb24")}


def turn(i: int, vf: Any, fns: dict[str, Callable[[Any], Any]]) -> dict[str, float]:
    """Microseconds each method takes on frame ``vf``, the ``i``-th: the methods take turns going first."""
    names = list(fns)
    k = i % len(names)
    clock = time.perf_counter_ns
    out: dict[str, float] = {}
    for n in names[k:] + names[:k]:
        fn = fns[n]
        t0 = clock()
        made = fn(vf)
        del made  # freeing what a method made is part of its cost (the map's release frees its views)
        t1 = clock()
        out[n] = (t1 - t0) / 1000
    return out


def measure(frames: list[Any], fns: dict[str, Callable[[Any], Any]]) -> dict[str, float]:
    """Median microseconds per frame of each method; each frame goes through each method once, in turns."""
    times: dict[str, list[float]] = {n: [] for n in fns}
    for i, vf in enumerate(frames):
        for n, us in turn(i, vf, fns).items():
            times[n].append(us)
    return {n: median(v) for n, v in times.items()}


def run(quick: bool = False) -> list[Result]:
    import av

    import interop
    from interop import MemoryType

    # first use imports the frameworks; not part of the per-frame figures
    for to in (MemoryType.CPU, MemoryType.OPENVINO):
        interop.map(av.VideoFrame(64, 64, "yuv420p"), to).release()
    results: list[Result] = []
    table: dict[str, dict[str, float]] = {}
    for label, (w, h) in SIZES.items():
        n = FRAMES[label][1 if quick else 0]
        path = make_clip(clip_dir() / f"map_{w}x{h}_{n}.mp4", w, h, n)
        frames = decode_all(path, n)
        for vf in frames[:3]:  # warm the per-format layout cache for this size
            for fn in methods().values():
                fn(vf)
        gc.collect()
        gc.disable()  # a collection inside one timed call would be noise, not cost
        try:
            row = measure(frames, methods())
            row.update(measure(frames, copies()))
        finally:
            gc.enable()
        pitch = frames[0].planes[0].line_size
        del frames
        gc.collect()
        gc.disable()
        try:
            row.update(measure_stream(path, n, feed_methods()))
        finally:
            gc.enable()
        table[label] = row
        for case, us in row.items():
            results.append(Result(NAME, f"{label} {case}", round(us, 2), "us/frame",
                                  {"frames": n, "width": w, "height": h, "y_pitch": pitch}))
    results.extend(ratios(table))
    return results


def ratios(table: dict[str, dict[str, float]]) -> list[Result]:
    out = []
    for m in ("map cpu", "map openvino"):
        growth = table["4K"][m] / table["480p"][m]
        out.append(Result(NAME, f"{m}: 4K / 480p", round(growth, 2), "x", {"target": "<= 1.5", "met": growth <= 1.5}))
        for label in SIZES:
            r = table[label][m] / table[label]["raw views"]
            out.append(Result(NAME, f"{m}: {label} / raw views", round(r, 2), "x", {"target": "<= 1.5", "met": r <= 1.5}))
            d = table[label][m] / table[label]["raw dlpack"]
            out.append(Result(NAME, f"{m}: {label} / raw dlpack", round(d, 2), "x", {"target": "(info)"}))
            if m == "map cpu":  # what a caller who reads every plane as numpy pays, beside views made by hand
                a = table[label]["map cpu + numpy"] / table[label]["raw views"]
                out.append(Result(NAME, f"map cpu + numpy: {label} / raw views", round(a, 2), "x",
                                  {"target": "(info)"}))
            else:  # beside the same ov.Tensors made by hand, and what feeding a request costs each way
                a = table[label]["map openvino + native"] / table[label]["raw openvino"]
                out.append(Result(NAME, f"map openvino + native: {label} / raw openvino", round(a, 2), "x",
                                  {"target": "(info)"}))
                a = table[label]["feed interop"] / table[label]["feed raw openvino"]
                out.append(Result(NAME, f"feed interop: {label} / feed raw openvino", round(a, 2), "x",
                                  {"target": "(info)"}))
        speed = table["4K"]["to_ndarray"] / table["4K"][m]
        out.append(Result(NAME, f"{m}: to_ndarray() at 4K / map", round(speed, 1), "x",
                          {"target": ">= 20", "met": speed >= 20}))
    return out


def markdown(results: list[Result]) -> str:
    """The per-size table of microseconds per frame, then the ratios against their targets."""
    per = {r.case: r for r in results if r.unit == "us/frame"}
    cases = ["raw views", "raw dlpack", "raw openvino", "map cpu", "map cpu + numpy", "map openvino",
             "map openvino + native", "to_ndarray", "to_ndarray rgb", "feed raw openvino", "feed interop"]
    lines = ["Median microseconds per frame (each decoded frame handled once by each method, methods in turns; "
             "the feed columns on frames decoded one by one, as a decode loop has them):", "",
             "| size | frames | Y pitch | " + " | ".join(cases) + " |", "|---|---|---|" + "---|" * len(cases)]
    for label in SIZES:
        if f"{label} raw views" not in per:
            continue
        first = per[f"{label} raw views"].details
        lines.append(f"| {label} | {first['frames']} | {first['y_pitch']} | "
                     + " | ".join(f"{per[f'{label} {c}'].value:.1f}" for c in cases) + " |")
    lines += ["", "| ratio | value | target | met |", "|---|---|---|---|"]
    for r in results:
        if r.unit == "x":
            met = r.details.get("met")
            lines.append(f"| {r.case} | {r.value:g} | {r.details.get('target', '')} | "
                         f"{'' if met is None else ('yes' if met else 'NO')} |")
    return "\n".join(lines) + "\n"
