"""gst_map: per-frame cost of reading a GStreamer sample as numpy planes, and GStreamer decode -> OpenVINO.

Part 1, side by side in one run at 480p, 1080p and 4K, NV12 and I420: ``interop.map(sample, CPU)`` + a numpy view
of every plane + release, against PyPI PyGObject's ``Gst.Buffer.map()`` (``bytes``: a copy), ``extract_dup`` (a
copy) and gst-python's ``map()`` (a memoryview, no planes) on Debian's system Python (python3-gi +
python3-gst-1.0, run as a subprocess of /usr/bin/python3). Targets: flat in size (4K / 480p <= 1.5), <= 1.5x
gst-python's map, >= 10x cheaper than the copying ways at 1080p.

Part 2, end to end: GStreamer decode (avdec_h264 -> appsink) alone, OpenVINO inference alone, then both through
interop (zero-copy) and through PyGObject's copying map, against the bound 1/(1/decode + 1/infer) measured in the
same run (decode and inference share the cores). The four ways run in short repetitions interleaved round by round,
and the ratios are the medians of each round's own; the per-frame cost of the one step where the two loops differ
(interop's map against PyGObject's copying map and the wrap) is reported beside them. Twice: the bundled 640x480
clip with the detector at the frame's size (there the copy is a fraction of a percent of the frame's time), and the
pinned 1080p clip (``benchmarks.pipeline.clip_path``) with the detector at 512x288, where a frame's copy is a part of
its time that a run can see ("e2e 1080p ..." rows).

Part 3, decoders: ``frames()`` + ``interop.map(f, CPU)`` with avdec_h264 against interop's own ``interopdec``
(FFmpeg's frames handed over without a copy), interleaved, at 854x480 and 1080p ("decoders ..." rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import Result, median, skipped

NAME = "gst_map"
SUMMARY = "GStreamer sample -> numpy planes (interop vs PyGObject map/extract_dup vs gst-python), decode -> OpenVINO"
REQUIRES: tuple[tuple[str, str], ...] = (("gi", "PyGObject (the gst extra)"),)
SIZES = {"480p": (854, 480), "1080p": (1920, 1080), "4K": (3840, 2160)}
FORMATS = ("NV12", "I420")
SYSTEM_PYTHON = "/usr/bin/python3"


def _per_call(fn: Callable[[], Any], n: int, reps: int) -> float:
    """Best of ``reps`` batches of ``n`` calls, in microseconds per call: on a shared machine the other batches
    measure the neighbours (the same rule for every way compared, here and in the system-Python script)."""
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return min(out) * 1e6


def _pipeline(fmt: str, w: int, h: int) -> str:
    return (f"videotestsrc num-buffers=1 pattern=ball ! video/x-raw,format={fmt},width={w},height={h} ! "
            f"appsink name=s sync=false")


def _sample(Gst: Any, fmt: str, w: int, h: int) -> tuple[Any, Any]:
    p = Gst.parse_launch(_pipeline(fmt, w, h))
    p.set_state(Gst.State.PLAYING)
    s = p.get_by_name("s").emit("try-pull-sample", 10 * Gst.SECOND)
    return p, s


_SYSTEM_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst
    Gst.init(None)
    n, reps, cases = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    out = {}
    for key, desc in cases.items():
        p = Gst.parse_launch(desc); p.set_state(Gst.State.PLAYING)
        buf = p.get_by_name("s").emit("try-pull-sample", 10 * Gst.SECOND).get_buffer()
        def go():
            with buf.map(Gst.MapFlags.READ) as info:
                a = np.frombuffer(info.data, np.uint8)
                del a
        go(); ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(n): go()
            ts.append((time.perf_counter() - t0) / n)
        out[key] = min(ts) * 1e6
        p.set_state(Gst.State.NULL)
    print(json.dumps(out))
""")


def _gst_python(cases: dict[str, str], n: int, reps: int) -> dict[str, float] | str:
    if not os.path.exists(SYSTEM_PYTHON):
        return f"{SYSTEM_PYTHON} is missing"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    proc = subprocess.run([SYSTEM_PYTHON, "-c", _SYSTEM_SCRIPT, str(n), str(reps), json.dumps(cases)],
                          capture_output=True, text=True, timeout=600, env=env, cwd="/")
    if proc.returncode != 0:
        return ("the system Python cannot run gst-python (install python3-gi python3-gst-1.0 python3-numpy: "
                f"tests/prepare.d/gstreamer.sh): {proc.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _map_part(quick: bool) -> list[Result]:
    import interop
    from interop import MemoryType
    from interop.tensors.gst import gst

    Gst = gst()
    n, reps = (50, 5) if quick else (200, 40)
    res: list[Result] = []
    ours: dict[str, float] = {}
    copies: dict[str, dict[str, float]] = {"PyGObject map (bytes)": {}, "extract_dup": {}}
    for fmt in FORMATS:
        for label, (w, h) in SIZES.items():
            key = f"{label} {fmt}"
            p, s = _sample(Gst, fmt, w, h)
            buf = s.get_buffer()
            size = buf.get_size()

            def zc(s: Any = s) -> None:
                f: Any = interop.map(s, MemoryType.CPU)
                for t in f.tensors:
                    np.asarray(t)
                f.release()

            def pygobject_map(buf: Any = buf) -> None:
                ok, info = buf.map(Gst.MapFlags.READ)
                np.frombuffer(info.data, np.uint8)  # info.data is bytes: the copy has been made
                buf.unmap(info)

            def dup(buf: Any = buf, size: int = size) -> None:
                np.frombuffer(buf.extract_dup(0, size), np.uint8)

            with interop.copy_meter() as meter:
                ours[key] = _per_call(zc, n, reps)
            assert meter.copies == 0
            copies["PyGObject map (bytes)"][key] = _per_call(pygobject_map, max(n // 4, 3), reps)
            copies["extract_dup"][key] = _per_call(dup, max(n // 4, 3), reps)
            res.append(Result(NAME, f"interop map + views + release {key}", round(ours[key], 2), "us/frame"))
            for way, d in copies.items():
                res.append(Result(NAME, f"{way} {key}", round(d[key], 2), "us/frame"))
            p.set_state(Gst.State.NULL)
    sysres = _gst_python({f"{label} {fmt}": _pipeline(fmt, *SIZES[label]) for fmt in FORMATS for label in SIZES},
                         n, reps)
    if isinstance(sysres, str):
        res.append(skipped(NAME, "gst-python map (system Python)", sysres))
    else:
        for key, us in sysres.items():
            res.append(Result(NAME, f"gst-python map (memoryview) {key}", round(us, 2), "us/frame"))
    for fmt in FORMATS:
        g = ours[f"4K {fmt}"] / ours[f"480p {fmt}"]
        res.append(Result(NAME, f"interop 4K / 480p {fmt}", round(g, 2), "x", {"target": "<= 1.5", "met": g <= 1.5}))
        if not isinstance(sysres, str):
            for label in SIZES:
                r = ours[f"{label} {fmt}"] / sysres[f"{label} {fmt}"]
                res.append(Result(NAME, f"interop / gst-python map {label} {fmt}", round(r, 2), "x",
                                  {"target": "<= 1.5", "met": r <= 1.5}))
        for way, d in copies.items():
            r = d[f"1080p {fmt}"] / ours[f"1080p {fmt}"]
            res.append(Result(NAME, f"{way} / interop 1080p {fmt}", round(r, 1), "x",
                              {"target": ">= 10", "met": r >= 10}))
    return res


def _e2e_part(quick: bool) -> list[Result]:
    import interop
    from interop import textdet
    from interop.clip import default_clip

    from .pipeline import clip_path

    try:
        model = textdet.model_path()
    except interop.BackendUnavailableError as e:
        return [skipped(NAME, "end to end", f"needs the PP-OCRv4 model: {e}")]
    out = _e2e(model, default_clip(), textdet.input_size_for(640, 480), "e2e", quick)
    if quick:
        return out
    return out + _e2e(model, clip_path(), (512, 288), "e2e 1080p", quick)


def _e2e(model: str, clip: str, input_size: tuple[int, int], label: str, quick: bool) -> list[Result]:
    import interop
    from interop import FrameFormat, MemoryType, textdet
    from interop.elements import frames
    from interop.elements.infer import model_input
    from interop.tensors.gst import gst

    Gst = gst()
    desc = f"filesrc location={clip} ! qtdemux ! h264parse ! avdec_h264 ! appsink"
    # Short repetitions of the four ways, interleaved round by round (the order rotating), so that a change in the
    # machine's load between them hits every way alike; each round's ratios are taken within the round
    limit, rounds = (15, 2) if quick else (40, 7)
    inf = interop.Inference(model, "CPU", input_size=input_size, mean=textdet.MEAN, scale=textdet.SCALE,
                            rgb=textdet.RGB)
    input_us: dict[str, list[float]] = {"interop": [], "copying": []}

    def decode_only() -> float:
        t0, n = time.perf_counter(), 0
        for _, f in zip(range(limit), frames(desc)):
            n += 1
            del f
        return n / (time.perf_counter() - t0)

    def infer_only() -> float:
        t0 = time.perf_counter()
        for _ in range(limit):
            inf.infer(x)
        return limit / (time.perf_counter() - t0)

    def zero_copy() -> float:
        t0, n = time.perf_counter(), 0
        for _, f in zip(range(limit), frames(desc)):
            t1 = time.perf_counter()
            views = model_input(f)  # CPU views of the buffer, as interop run gst: feeds them
            input_us["interop"].append((time.perf_counter() - t1) * 1e6)
            inf.infer(views)
            n += 1
        return n / (time.perf_counter() - t0)

    def copying() -> float:
        t0, n = time.perf_counter(), 0
        for _, f in zip(range(limit), frames(desc)):
            t1 = time.perf_counter()
            ok, info = f.buffer.map(Gst.MapFlags.READ)
            raw = np.frombuffer(info.data, np.uint8)  # PyGObject's bytes: a copy of the frame
            f.buffer.unmap(info)
            planes = [raw[t.offset:t.offset + t.info.extent] for t in f.tensors]
            views = [np.lib.stride_tricks.as_strided(p, t.info.shape, t.info.strides) for p, t in zip(planes, f.tensors)]
            wrapped: list[Any] = [interop.wrap(v) for v in views]
            # the frame's own colorimetry (from the caps), as interop's map carries it: the same conversion, so the
            # same model variant, on both sides
            frame = interop.Frame(wrapped, FrameFormat.I420, f.width, f.height, colorspace=f.colorspace,
                                  color_range=f.color_range)
            input_us["copying"].append((time.perf_counter() - t1) * 1e6)
            inf.infer(frame)
            n += 1
        return n / (time.perf_counter() - t0)

    first = next(frames(desc))
    x = interop.map(model_input(first), MemoryType.OPENVINO)
    ways: dict[str, Callable[[], float]] = {"decode": decode_only, "infer": infer_only, "interop": zero_copy,
                                            "copying": copying}
    for warm in ways.values():  # warm-up: models compiled for both input layouts, decoder libraries loaded
        warm()
    input_us["interop"].clear()
    input_us["copying"].clear()
    fps: dict[str, list[float]] = {k: [] for k in ways}
    to_bound, to_copying = [], []
    order = list(ways)
    for r in range(rounds):
        got: dict[str, float] = {}
        for way in order[r % 4:] + order[:r % 4]:
            got[way] = ways[way]()
            fps[way].append(got[way])
        bound = 1 / (1 / got["decode"] + 1 / got["infer"])
        to_bound.append(got["interop"] / bound)
        to_copying.append(got["interop"] / got["copying"])
    med = {k: median(v) for k, v in fps.items()}
    bound = median([1 / (1 / d + 1 / i) for d, i in zip(fps["decode"], fps["infer"])])
    r_bound, r_copying = median(to_bound), median(to_copying)
    inf.close()
    how = {"rounds": rounds, "frames per repetition": limit, "interleaved": True,
           "frame": f"{first.width}x{first.height}", "input": f"{input_size[0]}x{input_size[1]}"}
    return [Result(NAME, f"{label} decode only", round(med["decode"], 1), "fps", how),
            Result(NAME, f"{label} infer only", round(med["infer"], 1), "fps", how),
            Result(NAME, f"{label} bound 1/(1/decode + 1/infer)", round(bound, 1), "fps", how),
            Result(NAME, f"{label} GStreamer -> interop -> OpenVINO", round(med["interop"], 1), "fps", how),
            Result(NAME, f"{label} GStreamer -> PyGObject map (copy) -> OpenVINO", round(med["copying"], 1), "fps",
                   how),
            Result(NAME, f"{label} input per frame: interop map (CPU views)", round(median(input_us["interop"]), 1),
                   "us/frame"),
            Result(NAME, f"{label} input per frame: PyGObject map (copy) + wrap",
                   round(median(input_us["copying"]), 1), "us/frame"),
            Result(NAME, f"{label} interop / bound", round(r_bound, 3), "x",
                   {"target": ">= 0.9", "met": r_bound >= 0.9, "per round": [round(v, 3) for v in to_bound]}),
            Result(NAME, f"{label} interop / copying map", round(r_copying, 3), "x",
                   {"target": "> 1", "met": r_copying > 1, "per round": [round(v, 3) for v in to_copying]})]


def _decoders_part(quick: bool) -> list[Result]:
    """GStreamer decode into interop's CPU views (``frames()`` + ``interop.map(f, CPU)``), avdec_h264 against
    interopdec (FFmpeg's own frames, no upstream copy), interleaved round by round, at 854x480 (where avdec_h264
    copies every picture: its width is not a multiple of 16) and on the pinned 1080p clip."""
    import tempfile

    import interop
    from interop import MemoryType
    from interop.clip import make_clip
    from interop.elements import frames

    from .pipeline import clip_path

    rounds = 2 if quick else 5
    out: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        n480 = 60 if quick else 300
        clips = {"854x480": (make_clip(os.path.join(tmp, "c854.mp4"), 854, 480, frames=n480, preset="veryfast"), n480)}
        if not quick:
            clips["1080p"] = (clip_path(), 120)
        for label, (clip, limit) in clips.items():
            descs = {d: f"filesrc location={clip} ! qtdemux ! h264parse ! {d} ! appsink"
                     for d in ("avdec_h264", "interopdec")}

            def way(desc: str, limit: int = limit) -> float:
                t0, n = time.perf_counter(), 0
                for _, f in zip(range(limit), frames(desc)):
                    with interop.map(f, MemoryType.CPU) as c:
                        assert isinstance(c, interop.Frame)
                        np.asarray(c.tensors[0])  # a numpy view of the luma plane, as a reader takes it
                    n += 1
                return n / (time.perf_counter() - t0)

            for d in descs.values():  # warm-up: libraries loaded, the element registered
                way(d, 5)
            fps: dict[str, list[float]] = {d: [] for d in descs}
            ratios = []
            order = list(descs)
            for r in range(rounds):
                got = {d: way(descs[d]) for d in (order if r % 2 == 0 else order[::-1])}
                for d, v in got.items():
                    fps[d].append(v)
                ratios.append(got["interopdec"] / got["avdec_h264"])
            how = {"rounds": rounds, "frames per repetition": limit, "interleaved": True}
            out += [Result(NAME, f"decoders {label} avdec_h264 -> interop CPU views", round(median(fps["avdec_h264"]), 1),
                           "fps", how),
                    Result(NAME, f"decoders {label} interopdec -> interop CPU views", round(median(fps["interopdec"]), 1),
                           "fps", how),
                    Result(NAME, f"decoders {label} interopdec / avdec_h264", round(median(ratios), 3), "x",
                           {"per round": [round(v, 3) for v in ratios]})]
    return out


def run(quick: bool = False) -> list[Result]:
    out = _map_part(quick) + _decoders_part(quick)
    try:
        import openvino  # noqa: F401
    except ImportError:
        return out + [skipped(NAME, "end to end", "needs OpenVINO (the openvino extra)")]
    return out + _e2e_part(quick)
