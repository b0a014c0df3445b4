"""Benchmark (b): ``interop run`` against its bounds and against the naive CPU loop, side by side in one run.

On a pinned clip (1080p H.264, 300 frames or ``--frames``, the same bytes every time from ``interop.clip.make_clip``)
and a pinned model input (PP-OCRv4 text detection at 960x544):

- decode-only fps: PyAV decoding the clip, no consumer (same threading as ``interop run``);
- infer-only fps: the zero-copy model (pre-processing inside) on frames already decoded and mapped, async pool;
- bound = 1 / (1/decode + 1/infer): what a serial decode-then-infer could reach;
- plain network infer-only fps: the network alone (no pre-processing in it) fed tensors pre-processed on the host
  and held in memory, with the same precision, config and request pool as interop's model: the real ceiling (issue
  20), which the bound above hides when the pre-processing inside the model is expensive;
- the plain network with the clip decoded in its loop (one frame before each start, with the decoder threads
  ``interop run`` uses, the frame dropped), steady state: on a CPU the network saturates, decoding takes its share of
  the same cores whatever runs it; the run is set against this too, so that what its own pre-processing, boxes and
  loop cost shows apart from what decoding costs;
- ``interop run`` fps: decode -> map -> infer_async, as the CLI runs it (text boxes made from every output on the
  run's result thread), and the same without that post-processing (the same work as the naive loop);
- ``interop run --nvdec`` fps where CUDA, NVDEC and CuPy are there: decoding on NVDEC and the pre-processing on
  the GPU, written straight into the host memory the network reads (no copy), the text boxes in post-processing
  processes on a machine of 8 CPUs or more, against the same plain network: the host's CPU then runs the network
  and little else;
- naive fps: decode -> ``to_ndarray('rgb24')`` -> ``cv2.resize`` -> normalise -> the same network with the same
  precision and async pool, differing only in pre-processing;
- CPU per frame over the timed windows of the plain network and of ``interop run``, the run's by thread group (the
  network's threads, FFmpeg's decoder threads, the result thread, the loop: ``_threadcpu``; post-processing
  processes' own CPU where the boxes are made there), and the ceiling that sets: the plain network's CPU per frame
  over the run's, the most run / plain network can reach on cores the network alone keeps busy; the same ceiling
  over the steady windows below, which bounds the steady-state ratio (the whole-call one counts the run's start);
- steady-state fps of ``interop run`` (and ``--nvdec``) and of the plain network: results per second between the
  request pool's count of results after the start and as many before the end (``steady_window``). A whole call
  counts the pool filling and draining, and the run's start besides (its compile is left out, but each repetition
  compiles a model of its own, and the first inference on each of OpenVINO's streams builds that stream's state,
  where the plain network is compiled once and warmed before it is timed; the decoder starts too). Over a few
  hundred frames that start weighs on the run's whole-call fps as it does not over a video of minutes: throughput is
  the steady state. The run's is the lower of two counts: its requests' completions (``RunResult.completed_at``:
  a result thread that lags while the loop runs and catches up at the end does not read as speed) and its results
  made (``on_progress``, after the boxes: boxes slower than the network do not hide behind the results' queue).

Targets: run >= 0.9 x bound, >= 0.9 x the plain network's throughput (steady state; the whole-call ratio beside it),
and >= 1.1 x naive. Repetitions are interleaved; medians are reported.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

import numpy as np

from . import Result, machine, median, skipped
from . import _threadcpu as threadcpu

log = logging.getLogger(__name__)

NAME = "pipeline"
SUMMARY = "`interop run` against its decode/infer bound and the naive CPU loop (text detection on a 1080p clip)"
REQUIRES: tuple[tuple[str, str], ...] = (("av", "PyAV"), ("openvino", "OpenVINO"), ("cv2", "OpenCV"))
CLIP: dict[str, Any] = {"width": 1920, "height": 1080, "frames": 300, "fps": 30, "crf": 23, "preset": "veryfast", "seed": 0}
INPUT_SIZE = (960, 544)


def clip_path(frames: int | None = None) -> str:
    """The pinned clip, made once and cached (fixed pictures and encoder settings); ``frames`` beyond its
    CLIP["frames"]: a clip of the same recipe that long (the same pictures, encoded as one longer stream), made once
    too."""
    d = os.environ.get("INTEROP_BENCH_DIR") or os.path.join(tempfile.gettempdir(), "interop-bench")
    os.makedirs(d, exist_ok=True)
    c = CLIP
    n = max(int(frames or 0), int(c["frames"]))
    # "_r2": encoded with x264's macroblock tree off (same bytes every time); a clip cached before is not taken
    path = os.path.join(d, f"text_{c['width']}x{c['height']}_{n}f_crf{c['crf']}_{c['preset']}_r2.mp4")
    if not os.path.isfile(path):
        from ..clip import make_clip

        tmp = path + ".part.mp4"
        log.info("making the benchmark clip %s ...", path)
        make_clip(tmp, c["width"], c["height"], n, c["fps"], crf=c["crf"], preset=c["preset"], seed=c["seed"])
        os.replace(tmp, path)
    return path


def _inference(precision: str | None) -> Any:
    from .. import textdet
    from ..inference import Inference

    cfg = textdet.compile_config("CPU", precision)  # as `interop run` compiles the detector
    return Inference(textdet.model_path(), "CPU", input_size=INPUT_SIZE, mean=textdet.MEAN, scale=textdet.SCALE,
                     rgb=textdet.RGB, config=cfg, requests=textdet.compile_requests(cfg))


def decode_only(path: str, frames: int, threads: int | None = None) -> float:
    from ..pipeline import open_video, run_decoder_threads

    container, stream = open_video(path)
    run_decoder_threads(stream, threads)
    n = 0
    t0 = time.perf_counter()
    for _vf in container.decode(stream):
        n += 1
        if n == frames:
            break
    dt = time.perf_counter() - t0
    container.close()
    return n / dt


def infer_only(inf: Any, path: str, frames: int, held: int = 8) -> float:
    """The zero-copy model on ``held`` decoded+mapped frames cycled ``frames`` times (no decode in the loop)."""
    import interop

    from ..pipeline import open_video

    container, stream = open_video(path)
    mapped = []
    for vf in container.decode(stream):
        mapped.append(interop.map(interop.wrap(vf), inf.memory_type))
        if len(mapped) == held:
            break
    container.close()
    inf.compile_for(mapped[0])
    inf.infer_async(mapped[0])
    inf.wait_all()
    t0 = time.perf_counter()
    for i in range(frames):
        inf.infer_async(mapped[i % held])
    inf.wait_all()
    return frames / (time.perf_counter() - t0)


def host_preprocess(vf: Any) -> np.ndarray:
    """A decoded frame as the network takes it, made on the host (the naive loop's conversion): BGR NCHW f32."""
    import cv2

    from .. import textdet

    w, h = INPUT_SIZE
    rgb = vf.to_ndarray(format="rgb24")
    img = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR)[:, :, ::-1]  # the model takes BGR
    mean, scale = np.float32(textdet.MEAN), np.float32(1.0 / textdet.SCALE)
    return np.ascontiguousarray(((img.astype(np.float32) - mean) * scale).transpose(2, 0, 1)[None])


class PlainNetwork:
    """The network alone, compiled as interop's Inference compiles it (same config and precision, batch 1 at
    INPUT_SIZE, no pre-processing in the graph) with a request pool of ``nreq``, fed pre-processed tensors."""

    def __init__(self, precision: str | None, nreq: int, path: str, held: int = 8):
        import openvino as ov

        from .. import textdet
        from ..pipeline import open_video

        w, h = INPUT_SIZE
        core = ov.Core()
        model = core.read_model(textdet.model_path())
        model.reshape({model.inputs[0]: ov.PartialShape([1, 3, h, w])})
        # as interop's Inference compiles the detector: its default hint plus the run's config
        cfg: dict[str, Any] = {"PERFORMANCE_HINT": "THROUGHPUT", **(textdet.compile_config("CPU", precision) or {})}
        self.compiled = core.compile_model(model, "CPU", cfg)
        self.used = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        self.nreq = nreq
        self.queue = ov.AsyncInferQueue(self.compiled, nreq)
        container, stream = open_video(path)
        self.arrays: list[np.ndarray] = []
        for vf in container.decode(stream):
            self.arrays.append(host_preprocess(vf))
            if len(self.arrays) == held:
                break
        container.close()
        # ov.Tensors over the arrays: start_async sets them on the request as they are (nothing copied per frame)
        self.inputs = [ov.Tensor(a, shared_memory=True) for a in self.arrays]
        self.window = (0.0, 0.0)  # time.monotonic() at the start and end of the last infer_only's timed part
        # the last infer_only's steady window (start, end, results) in time.monotonic(): its fps is _rate(...)
        self.steady_window: tuple[float, float, int] | None = None

    def infer_only(self, frames: int, decode: str | None = None) -> float:
        """fps over the whole call; ``steady_window`` gets its steady window (None for too few frames). ``decode``: a
        video decoded in the loop as ``interop run`` decodes it, one frame before each start (the frame dropped): the
        network with software decoding on the same cores, and nothing else of the run's."""
        for k in range(self.nreq):  # warm every request
            self.queue.start_async(self.inputs[k % len(self.inputs)])
        self.queue.wait_all()
        video = _Frames(decode) if decode is not None else None
        now = time.monotonic
        started = [0.0] * frames
        try:
            t0 = now()
            for i in range(frames):
                if video is not None:
                    video.next()
                self.queue.start_async(self.inputs[i % len(self.inputs)])
                started[i] = now()
            self.queue.wait_all()
            t1 = now()
        finally:
            if video is not None:
                video.close()
        self.window = (t0, t1)  # the timed part, for thread CPU accounting
        # Start nreq + j (from 0) waits for a free request, so it returns just after result j + 1 (counted from 1)
        # comes back: those returns time the results without a callback of this process's on OpenVINO's threads
        self.steady_window = steady_window(started[self.nreq:], frames, self.nreq)
        return frames / (t1 - t0)


class _Frames:
    """The frames of a video decoded as ``interop run`` decodes them, from the start again at its end."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._open()

    def _open(self) -> None:
        from ..pipeline import open_video, run_decoder_threads

        self.container, self.stream = open_video(self.path)
        run_decoder_threads(self.stream)  # the threads the run decodes with
        self.frames = iter(self.container.decode(self.stream))

    def next(self) -> Any:
        try:
            return next(self.frames)
        except StopIteration:
            self.close()
            self._open()
            return next(self.frames)

    def close(self) -> None:
        self.container.close()


def _timed_run(run_pipeline: Any, nreq: int, *args: Any,
               **kwargs: Any) -> tuple[Any, tuple[float, float, int] | None]:
    """``interop run`` and its steady window (steady_window): of two counts, its requests' completions
    (``completed_at``) and its results made (``on_progress``, after the boxes), the one with the lower rate."""
    made_at: list[float] = []
    now = time.monotonic
    r = run_pipeline(*args, on_progress=lambda done, total: made_at.append(now()) if done else None, **kwargs)
    windows = [steady_window(sorted(r.completed_at), r.frames, nreq), steady_window(made_at, r.frames, nreq)]
    if windows[0] is None or windows[1] is None:
        return r, None
    return r, min(windows[0], windows[1], key=lambda w: w[2] / (w[1] - w[0]))


def steady_window(done_at: list[float], results: int, skip: int) -> tuple[float, float, int] | None:
    """The steady state of a call that made ``results`` results: (when result ``skip`` came, when result ``results -
    skip`` came, the results between), counted from 1 (``done_at[j]``: when result j + 1 came, in order, possibly
    without the last ones): the request pool filling and draining left out (``skip``: the pool's size). None when
    the call made too few results for that window, or the times do not cover it."""
    lo, hi = skip - 1, results - skip - 1  # indices into done_at
    if lo < 0 or hi <= lo or hi >= len(done_at) or done_at[hi] <= done_at[lo]:
        return None
    return done_at[lo], done_at[hi], hi - lo


def _rate(window: tuple[float, float, int] | None) -> float | None:
    """Results per second over a steady window (steady_window), None without one."""
    return None if window is None else window[2] / (window[1] - window[0])


def naive(inf: Any, path: str, frames: int) -> dict[str, float]:
    """decode -> to_ndarray('rgb24') -> cv2.resize -> normalise -> raw model (same network, config and pool)."""
    import cv2

    from .. import textdet
    from ..pipeline import open_video, run_decoder_threads

    container, stream = open_video(path)
    run_decoder_threads(stream)  # decoded as `interop run` decodes: the loops differ only in pre-processing
    w, h = INPUT_SIZE
    mean, scale = np.float32(textdet.MEAN), np.float32(1.0 / textdet.SCALE)
    warm = np.zeros((1, 3, h, w), np.float32)
    inf.compile_for(warm)
    inf.infer(warm)
    st = {"decode": 0.0, "convert": 0.0, "infer": 0.0}
    perf = time.perf_counter
    n = 0
    it = container.decode(stream)
    t_start = perf()
    # deliberately the naive baseline, written out in full rather than sharing interop.pipeline._frame_loop
    while n < frames:
        t0 = perf()
        try:
            vf = next(it)
        except StopIteration:
            break
        t1 = perf()
        rgb = vf.to_ndarray(format="rgb24")
        img = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR)[:, :, ::-1]  # the model takes BGR
        x = np.ascontiguousarray(((img.astype(np.float32) - mean) * scale).transpose(2, 0, 1)[None])
        t2 = perf()
        inf.infer_async(x)
        t3 = perf()
        st["decode"] += t1 - t0
        st["convert"] += t2 - t1
        st["infer"] += t3 - t2
        n += 1
    t0 = perf()
    inf.wait_all()
    t_end = perf()
    st["infer"] += t_end - t0
    container.close()
    st["fps"] = n / (t_end - t_start)
    return st


def frame_pool_size(inf: Any, path: str) -> int:
    """The request pool ``inf`` runs the decoded frames of ``path`` with (its variant for their layout)."""
    import interop

    from ..pipeline import open_video

    container, stream = open_video(path)
    first = interop.map(interop.wrap(next(iter(container.decode(stream)))), inf.memory_type)
    container.close()
    return int(inf.pool_size(first))


def nvdec_missing() -> str | None:
    """Why ``interop run --nvdec`` cannot run here (None: it can)."""
    from ..backends import module_available

    if not module_available("cupy"):
        return "needs CuPy (GPU pre-processing) and an NVIDIA GPU with NVDEC"
    try:
        from ..native.cuda_driver import driver

        if not driver().devices():
            return "needs an NVIDIA GPU (the CUDA driver sees none)"
        from av.codec.hwaccel import hwdevices_available

        if "cuda" not in hwdevices_available():
            return "needs a PyAV built with CUDA (NVDEC)"
    except Exception as e:  # noqa: BLE001 - any failure to find the GPU is the reason it is skipped
        return f"needs an NVIDIA GPU with NVDEC ({type(e).__name__}: {e})"
    return None


def run(quick: bool = False, precision: str | None = None, reps: int | None = None,
        frames: int | None = None) -> list[Result]:
    """All cases, ``reps`` interleaved repetitions (default 3; 1 when ``quick``): more on a noisy machine. ``frames``
    per case (default the pinned clip's, 120 when ``quick``): more run a longer clip of the same recipe, for steady
    windows long enough to read through a noisy machine."""
    from ..pipeline import run as run_pipeline

    frames = int(frames) if frames else 120 if quick else int(CLIP["frames"])
    path = clip_path(frames)
    reps = reps or (1 if quick else 3)
    inf = _inference(precision)
    try:
        used = str(inf.compiled_property("INFERENCE_PRECISION_HINT"))
    except Exception:  # noqa: BLE001 - informative only
        used = "?"
    nreq = frame_pool_size(inf, path)  # the plain network gets the request pool interop's model runs frames with
    plain = PlainNetwork(precision, nreq, path)
    dec: list[float] = []
    inf_only: list[float] = []
    plain_only: list[float] = []
    plain_steady: list[float | None] = []  # steady-state fps of each repetition
    decoding_steady: list[float | None] = []  # the plain network with the clip decoded in its loop
    run_steady: list[float | None] = []
    nvdec_steady: list[float | None] = []
    runs: list[Any] = []
    bare: list[Any] = []
    naives: list[dict[str, float]] = []
    cpu: dict[str, list[float]] = {k: [] for k in ("decode", "infer", "plain", "decoding", "run", "bare", "naive",
                                                    "nvdec")}
    no_nvdec = nvdec_missing()
    nvdecs: list[Any] = []

    def timed(case: str, fn: Any) -> Any:
        # process CPU time per frame (all threads): the work a case costs, less sensitive to other processes' load
        c0 = time.process_time()
        out = fn()
        cpu[case].append(1000 * (time.process_time() - c0) / frames)
        return out

    threads = threadcpu.ThreadCPU()
    by_thread: dict[str, list[dict[str, float]]] = {"plain": [], "run": [], "nvdec": [], "plain steady": [],
                                                     "run steady": []}

    def per_frame(window: dict[str, float], n: int) -> dict[str, float]:
        return {g: 1000 * v / max(1, n) for g, v in window.items()}

    with threads:
        for _ in range(reps):  # interleaved, so drifts in machine load hit every case alike
            dec.append(timed("decode", lambda: decode_only(path, frames)))
            inf_only.append(timed("infer", lambda: infer_only(inf, path, frames)))
            plain_only.append(timed("plain", lambda: plain.infer_only(frames)))
            by_thread["plain"].append(per_frame(threads.window(*plain.window), frames))
            plain_steady.append(_rate(plain.steady_window))
            if plain.steady_window:
                by_thread["plain steady"].append(per_frame(threads.window(*plain.steady_window[:2]),
                                                           plain.steady_window[2]))
            timed("decoding", lambda: plain.infer_only(frames, decode=path))
            decoding_steady.append(_rate(plain.steady_window))
            r, window = timed("run", lambda: _timed_run(run_pipeline, nreq, path, None, "CPU", frames, precision,
                                                        input_size=INPUT_SIZE))
            runs.append(r)
            run_steady.append(_rate(window))
            cpu["run"][-1] += 1000 * r.post_cpu / frames
            by_thread["run"].append(per_frame(_run_window(threads, r), r.frames))
            if window:  # the steady window's CPU, where the run's throughput is counted (the CPU path: its boxes are
                # on a thread, in this process's clocks)
                by_thread["run steady"].append(per_frame(threads.window(*window[:2]), window[2]))
            bare.append(timed("bare", lambda: run_pipeline(path, None, "CPU", frames, precision,
                                                           input_size=INPUT_SIZE, postprocess=False)))
            naives.append(timed("naive", lambda: naive(inf, path, frames)))
            if no_nvdec is None:
                try:
                    r, window = timed("nvdec", lambda: _timed_run(run_pipeline, nreq, path, None, "CPU", frames,
                                                                  precision, input_size=INPUT_SIZE, nvdec=True))
                except Exception as e:  # noqa: BLE001 - a GPU set-up that cannot run it: the case is skipped, said why
                    log.warning("interop run --nvdec failed: %s: %s", type(e).__name__, e)
                    no_nvdec = f"interop run --nvdec failed here ({type(e).__name__}: {e})"
                else:
                    nvdecs.append(r)
                    nvdec_steady.append(_rate(window))
                    cpu["nvdec"][-1] += 1000 * r.post_cpu / frames  # the boxes' processes: not this process's CPU
                    by_thread["nvdec"].append(per_frame(_run_window(threads, r), r.frames))
    inf.close()
    d, i, p = median(dec), median(inf_only), median(plain_only)
    bound = 1.0 / (1.0 / d + 1.0 / i)
    rf = median([r.fps for r in runs])
    r_med = sorted(runs, key=lambda r: r.fps)[len(runs) // 2]
    bf = median([r.fps for r in bare])
    nf = median([x["fps"] for x in naives])
    n_med = sorted(naives, key=lambda x: x["fps"])[len(naives) // 2]
    nproc = os.cpu_count()
    common = {"clip": f"{CLIP['width']}x{CLIP['height']} H.264 {frames} frames", "input": f"{INPUT_SIZE[0]}x{INPUT_SIZE[1]}",
              "device": r_med.device, "precision": f"{precision or 'plugin default'} ({used})", "reps": reps, "cpus": nproc,
              "requests": nreq, "machine": machine()}
    per = lambda s: round(1000 * s / max(1, r_med.frames), 3)  # noqa: E731  ms per frame
    return [
        Result(NAME, "decode-only fps", d, "fps", {**common, "all": dec}),
        Result(NAME, "infer-only fps (zero-copy model, frames in memory)", i, "fps", {**common, "all": inf_only}),
        Result(NAME, "infer-only fps (plain network, pre-processed tensors in memory)", p, "fps",
               {**common, "all": plain_only, "plain_precision": plain.used}),
        Result(NAME, "bound 1/(1/decode+1/infer)", bound, "fps", common),
        Result(NAME, "interop run fps", rf, "fps", {**common, "all": [r.fps for r in runs], "copies": r_med.copies,
                                                     "ms_per_frame": {"decode": per(r_med.decode), "map": per(r_med.map),
                                                                      "infer_wait": per(r_med.infer)}}),
        Result(NAME, "interop run fps, no post-processing", bf, "fps", {**common, "all": [r.fps for r in bare]}),
        Result(NAME, "naive loop fps (rgb24+resize+normalise)", nf, "fps",
               {**common, "all": [x["fps"] for x in naives],
                "ms_per_frame": {k: round(1000 * v / frames, 3) for k, v in n_med.items() if k != "fps"}}),
        Result(NAME, "CPU ms per frame: decode-only", median(cpu["decode"]), "ms", common),
        Result(NAME, "CPU ms per frame: infer-only", median(cpu["infer"]), "ms", {**common, "note": "includes compile"}),
        Result(NAME, "CPU ms per frame: infer-only, plain network", median(cpu["plain"]), "ms", common),
        Result(NAME, "CPU ms per frame: interop run", median(cpu["run"]), "ms", {**common, "note": "includes compile"}),
        Result(NAME, "CPU ms per frame: interop run, no post-processing", median(cpu["bare"]), "ms",
               {**common, "note": "includes compile"}),
        Result(NAME, "CPU ms per frame: naive loop", median(cpu["naive"]), "ms", common),
        Result(NAME, "run / bound (target >= 0.9)", rf / bound, "x", common),
        Result(NAME, "run / plain network infer-only, whole calls (start and drain included)", rf / p, "x", common),
        *_steady_results("interop run", run_steady, plain_steady, common, frames, nreq, plain_row=True),
        *_decoding_results(decoding_steady, plain_steady, run_steady, median(cpu["decoding"]), common, frames, nreq),
        Result(NAME, "run without post-processing / plain network infer-only", bf / p, "x", common),
        Result(NAME, "interop model infer-only / plain network infer-only", i / p, "x", common),
        Result(NAME, "run / naive (target >= 1.1)", rf / nf, "x", common),
        Result(NAME, "run without post-processing / bound", bf / bound, "x", common),
        Result(NAME, "run without post-processing / naive (same work)", bf / nf, "x", common),
        *_thread_results(by_thread, common, threads.available),
        *_nvdec_results(nvdecs, by_thread["nvdec"], cpu["nvdec"], p, common, no_nvdec),
        *(_steady_results("interop run --nvdec", nvdec_steady, plain_steady, common, frames, nreq, target=False)
          if no_nvdec is None and nvdecs else []),
    ]


def _steady_results(what: str, run: list[float | None], plain: list[float | None], common: dict[str, Any],
                    frames: int, nreq: int, plain_row: bool = False, target: bool = True) -> list[Result]:
    """Steady-state fps of ``what`` (and, ``plain_row``, of the plain network), medians over the repetitions, and
    their ratio (issue 20's ``target``, or for information)."""
    cases = (f"steady-state fps: {what}", *(["steady-state fps: plain network"] if plain_row else []),
             f"steady state: {what} / plain network" + (" (target >= 0.9)" if target else ""))
    runs, plains = [x for x in run if x], [x for x in plain if x]
    if not runs or not plains:
        return [skipped(NAME, c, _no_window(frames, nreq)) for c in cases]
    window = _window_details(common, frames, nreq)
    r, p = median(runs), median(plains)
    return [Result(NAME, cases[0], r, "fps", {**window, "all": [round(x, 2) for x in runs]}),
            *([Result(NAME, cases[1], p, "fps", {**window, "all": [round(x, 2) for x in plains]})] if plain_row else []),
            Result(NAME, cases[-1], r / p, "x", window)]


def _no_window(frames: int, nreq: int) -> str:
    """Why steady-state rows are skipped: too few frames for the request pool, or no repetition had a window."""
    return (f"{frames} frames leave no steady window with {nreq} requests (needs more than {2 * nreq})"
            if frames <= 2 * nreq else "no repetition had a steady window")


def _window_details(common: dict[str, Any], frames: int, nreq: int) -> dict[str, Any]:
    """A steady-state row's details: ``common`` and the window it counts."""
    return {**common, "window": f"results {nreq} to {frames - nreq} of each call (the request pool's size from "
                                f"either end)"}


_DECODING = ("steady-state fps: plain network, the clip decoded in its loop",
             "steady state: plain network decoding / plain network (what software decoding on the same cores costs "
             "the network)",
             "steady state: interop run / plain network decoding (the CPU path against the network and its decoder "
             "alone)")


def _decoding_results(decoding: list[float | None], plain: list[float | None], run: list[float | None], cpu_ms: float,
                      common: dict[str, Any], frames: int, nreq: int) -> list[Result]:
    """The plain network with the clip decoded in its loop, one frame before each start, as ``interop run`` decodes
    it on the CPU path (``PlainNetwork.infer_only(decode=)``), for information: where the network's CPU is saturated,
    decoding on the same cores takes its share of them whatever runs it, so this is what the CPU path's loop, boxes
    and pre-processing are measured against."""
    pairs = [(d, p, r) for d, p, r in zip(decoding, plain, run) if d and p and r]
    if not pairs:
        return [skipped(NAME, c, _no_window(frames, nreq)) for c in _DECODING]
    window = _window_details(common, frames, nreq)
    d, p, r = (median([x[k] for x in pairs]) for k in range(3))
    return [Result(NAME, _DECODING[0], d, "fps", {**window, "all": [round(x[0], 2) for x in pairs],
                                                   "cpu_ms_per_frame_process": round(cpu_ms, 3)}),
            Result(NAME, _DECODING[1], d / p, "x", window),
            Result(NAME, _DECODING[2], r / d, "x", window)]


def _nvdec_results(runs: list[Any], by_thread: list[dict[str, float]], cpu: list[float], plain: float,
                   common: dict[str, Any], missing: str | None) -> list[Result]:
    """``interop run --nvdec`` (NVDEC decoding, GPU pre-processing into host memory) against the plain network."""
    cases = ("interop run --nvdec fps (NVDEC, pre-processing on the GPU)",
             "run --nvdec / plain network infer-only, whole calls",
             "CPU ms per frame over the timed window: interop run --nvdec")
    if missing is not None or not runs:
        return [skipped(NAME, c, missing or "not run") for c in cases]
    med = sorted(runs, key=lambda r: r.fps)[len(runs) // 2]
    fps = median([r.fps for r in runs])
    per = lambda s: round(1000 * s / max(1, med.frames), 3)  # noqa: E731  ms per frame
    out = [Result(NAME, cases[0], fps, "fps", {**common, "all": [r.fps for r in runs], "copies": med.copies,
                                                "post_processes": med.post_processes,
                                                "cpu_ms_per_frame_process": round(median(cpu), 3),
                                                # the loop's wall per frame: waiting for the thread ahead, and for
                                                # a free request (where the network is the bottleneck)
                                                "ms_per_frame": {"waiting for frames": per(med.decode),
                                                                 "map": per(med.map), "infer_wait": per(med.infer)}}),
           Result(NAME, cases[1], fps / plain, "x", {**common, "copies": med.copies})]
    if all(by_thread):
        seen = sorted({g for w in by_thread for g in w})
        out.append(Result(NAME, cases[2], median([sum(w.values()) for w in by_thread]), "ms",
                          {**common, "groups": {g: round(median([w.get(g, 0.0) for w in by_thread]), 3) for g in seen}}))
    else:
        out.append(skipped(NAME, cases[2], "needs per-thread CPU clocks and /proc/self/task (Linux)"))
    return out


def _run_window(threads: threadcpu.ThreadCPU, r: Any) -> dict[str, float]:
    """CPU seconds per thread group over a run's timed span: its loop, less each compile (which fps leaves out); and
    its post-processing processes' CPU (the boxes, made in processes of their own: ``RunResult.post_cpu``)."""
    out: dict[str, float] = {threadcpu.POST: r.post_cpu} if r.post_cpu else {}
    t = r.started
    for c0, c1 in [*r.compile_spans, (r.ended, r.ended)]:
        for g, v in threads.window(t, c0).items():
            out[g] = out.get(g, 0.0) + v
        t = c1
    return out


def _thread_results(by_thread: dict[str, list[dict[str, float]]], common: dict[str, Any],
                    available: bool) -> list[Result]:
    """CPU per frame of the plain network and of ``interop run`` over their timed windows, the run's by thread
    group (medians over the repetitions), and the ceiling the run's extra CPU sets where the cores are saturated."""
    cases = ("CPU ms per frame over the timed window: plain network", "CPU ms per frame over the timed window: "
             "interop run", "CPU ceiling of run / plain network: the plain network's CPU per frame / "
             "the run's (what the run could reach on cores the network alone keeps busy)")
    if not available or not all(by_thread["plain"]) or not all(by_thread["run"]):
        return [skipped(NAME, c, "needs per-thread CPU clocks and /proc/self/task (Linux)")
                for c in (*cases, _STEADY_CEILING)]
    plain = median([sum(w.values()) for w in by_thread["plain"]])
    run = median([sum(w.values()) for w in by_thread["run"]])
    seen = {g for w in by_thread["run"] for g in w}
    groups = [g for g in threadcpu.GROUPS if g in seen] + sorted(seen - set(threadcpu.GROUPS))
    return [
        Result(NAME, cases[0], plain, "ms", {**common, "all": [round(sum(w.values()), 3) for w in by_thread["plain"]]}),
        Result(NAME, cases[1], run, "ms", {**common, "all": [round(sum(w.values()), 3) for w in by_thread["run"]]}),
        *(Result(NAME, f"  of which {g}", median([w.get(g, 0.0) for w in by_thread["run"]]), "ms", common)
          for g in groups),
        Result(NAME, cases[2], plain / run, "x", common),
        *_steady_ceiling(by_thread["plain steady"], by_thread["run steady"], common),
    ]


_STEADY_CEILING = "CPU ceiling over the steady windows: the plain network's CPU per frame / the run's"


def _steady_ceiling(plain: list[dict[str, float]], run: list[dict[str, float]], common: dict[str, Any]) -> list[Result]:
    """The CPU ceiling over the steady windows (where the steady-state ratio is counted): the run's start (each
    stream's first request, the decoder's start) weighs on its whole-call CPU per frame as on its whole-call fps."""
    if not plain or not run:
        return [skipped(NAME, _STEADY_CEILING, "no steady window (too few frames for the request pool)")]
    p, r = median([sum(w.values()) for w in plain]), median([sum(w.values()) for w in run])
    return [Result(NAME, _STEADY_CEILING, p / r, "x", {**common, "plain_ms": round(p, 3), "run_ms": round(r, 3)})]
