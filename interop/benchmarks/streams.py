"""N streams on one host: aggregate fps of ``interop run`` over N = 1, 2, 4, 8 copies of the pinned 1080p clip
(each stream decoded on a thread of its own, one Inference for all, as ``interop run A B ...`` runs by default; for
N = 1 its single-stream loop, as ``interop run CLIP`` runs), with decode worker processes + one Inference
(``--decode processes``) beside it, beside (a) N separate ``interop run`` processes and (b) N
threads in one process each running ``interop.pipeline.run`` (each with its own Inference), and beside the bound
min(N decode processes together, the plain network fed pre-processed tensors from memory, measured again beside
each repetition), all measured in the same run on the same clip, frames and model input (PP-OCRv4 text detection
at 960x544, CPU).

Aggregate fps is every stream's frames over the time the run took: for the multi-stream run its wall time (model
compilation excluded). N processes and N threads each compile their own model at their own moment, so they do not
start together; three counts: ``fps`` from the first run's start (model compiled) to the last run's end, which counts
the start and the end, where fewer runs go, against them; ``fps_longest_wall``, the same frames over the longest
run's own wall time, which counts a run going while the others compiled as shared; ``fps_steady``, the frames every
run made in the window where all of them were making results (from the last one's first result to the first one's
last), over that window: the steady state, without the starts and ends, but counting the results of requests
already running at the window's start, so it reads high by up to a request pool's worth of frames over a short
window (each run's results are timed by its ``on_progress``; ``interop run``'s own rows report it too, beside
their whole-run count; the N processes run ``interop.pipeline.run``, the loop ``interop run CLIP`` runs, so that
their results can be timed). The multi-stream runs also report their counted copies (with decode workers, each
decoded frame written into its worker's pool buffer; decoded in threads, none).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from . import Result, median

NAME = "streams"
SUMMARY = "`interop run` over N streams (decoded in threads or worker processes, one Inference) vs N processes, N " \
          "threads, and the bound"
REQUIRES: tuple[tuple[str, str], ...] = (("av", "PyAV"), ("openvino", "OpenVINO"), ("cv2", "OpenCV"))
COUNTS = (1, 2, 4, 8)


def _input_size() -> tuple[int, int]:
    from .pipeline import INPUT_SIZE

    return INPUT_SIZE


def single_loop(path: str, frames: int, precision: str | None) -> dict[str, Any]:
    """``interop run CLIP`` with one input: its own loop in one process (no decode worker)."""
    from ..pipeline import run

    marks: list[tuple[float, int]] = []
    r = run(path, device="CPU", frames=frames, precision=precision, input_size=_input_size(),
            on_progress=lambda done, total: marks.append((time.monotonic(), done)))
    return {"fps": r.fps, "fps_steady": steady_fps([marks]), "frames": r.frames, "copies": r.copies,
            "bytes_copied": r.bytes_copied}


def interop_streams(path: str, n: int, frames: int, precision: str | None, decode: str = "threads") -> dict[str, Any]:
    from ..streams import run_streams

    marks: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    res = run_streams([path] * n, device="CPU", frames=frames, precision=precision, input_size=_input_size(),
                      decode=decode, on_progress=lambda k, done, total: marks[k].append((time.monotonic(), done)))
    errors = [s.error for s in res.streams if s.error]
    if errors:
        raise RuntimeError(f"a stream failed: {errors[0]}")
    return {"fps": res.fps, "fps_steady": steady_fps(marks), "frames": res.frames, "copies": res.total_copies,
            "bytes_copied": res.total_bytes_copied}


_RUN = """import json, sys, time
from interop.pipeline import run
marks = []
r = run(sys.argv[1], device="CPU", frames=int(sys.argv[2]), precision=sys.argv[3] or None,
        input_size=(int(sys.argv[4]), int(sys.argv[5])),
        on_progress=lambda done, total: marks.append((time.monotonic(), done)))
print(json.dumps({"frames": r.frames, "span": [r.started + r.compile, r.ended], "wall": r.wall, "marks": marks}))
"""


def separate_processes(path: str, n: int, frames: int, precision: str | None) -> dict[str, Any]:
    """N processes, each running ``interop run CLIP``'s loop (``interop.pipeline.run``) with its own model."""
    w, h = _input_size()
    cmd = [sys.executable, "-c", _RUN, path, str(frames), precision or "", str(w), str(h)]
    # stderr to files: read one process at a time, pipes would stall a process that logs much while it waits its turn
    errs = [tempfile.TemporaryFile("w+") for _ in range(n)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=e, text=True) for e in errs]
    outs = []
    for p, e in zip(procs, errs):
        out, _ = p.communicate(timeout=3600)
        e.seek(0)
        err = e.read()
        e.close()
        if p.returncode != 0:
            raise RuntimeError(f"interop.pipeline.run exited with {p.returncode}: {err.strip()[-300:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(o["frames"] for o in outs)
    return _aggregate(total, [tuple(o["span"]) for o in outs], max(o["wall"] for o in outs),
                      [[tuple(m) for m in o["marks"]] for o in outs])


def _count_at(marks: list[tuple[float, int]], t: float) -> float:
    """Results a run had made at time ``t``, from its (time, results so far) marks, linear between two marks."""
    if t <= marks[0][0]:
        return float(marks[0][1])
    for (t0, d0), (t1, d1) in zip(marks, marks[1:]):
        if t <= t1:
            return d0 + (d1 - d0) * (t - t0) / (t1 - t0) if t1 > t0 else float(d1)
    return float(marks[-1][1])


def steady_fps(runs: list[list[tuple[float, int]]]) -> float | None:
    """Aggregate fps of runs going at once, over the window where every one was making results: from the last run's
    first result to the first run's last. None when they never all went at once (or a run made no result)."""
    made = [[m for m in marks if m[1] > 0] for marks in runs]
    if not made or any(not m for m in made):
        return None
    lo, hi = max(m[0][0] for m in made), min(m[-1][0] for m in made)
    if hi <= lo:
        return None
    return sum(_count_at(m, hi) - _count_at(m, lo) for m in made) / (hi - lo)


def _aggregate(total: int, spans: list[tuple[float, float]], longest_wall: float,
               marks: list[list[tuple[float, int]]]) -> dict[str, Any]:
    """Aggregate fps of runs that each compile their own model at their own moment, so do not start together:
    ``fps`` is every frame over first start (model compiled) -> last end, which counts the start and the end, where
    fewer runs go, against them; ``fps_longest_wall`` every frame over the longest run's own wall time, which counts
    a run that went while the others still compiled as if it had shared the machine; ``fps_steady`` the frames made
    while every run was making results, over that window (steady_fps; None when they never all went at once).
    ``start_spread_s`` says how far apart they started."""
    first, last = min(b for b, _ in spans), max(e for _, e in spans)
    return {"fps": total / max(1e-9, last - first), "fps_longest_wall": total / max(1e-9, longest_wall),
            "fps_steady": steady_fps(marks), "start_spread_s": round(max(b for b, _ in spans) - first, 3),
            "frames": total}


def threads(path: str, n: int, frames: int, precision: str | None) -> dict[str, Any]:
    from ..pipeline import run

    results: list[Any] = [None] * n
    marks: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    errors: list[BaseException] = []

    def one(k: int) -> None:
        def progress(done: int, total: int | None) -> None:
            marks[k].append((time.monotonic(), done))

        try:
            results[k] = run(path, device="CPU", frames=frames, precision=precision, input_size=_input_size(),
                             on_progress=progress)
        except BaseException as e:  # noqa: B036 - re-raised below on the caller's thread
            errors.append(e)

    ts = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    total = sum(r.frames for r in results)
    return _aggregate(total, [(r.started + r.compile, r.ended) for r in results], max(r.wall for r in results), marks)


_DECODE = ("import sys; from interop.benchmarks.pipeline import decode_only; from interop.pipeline import "
           "WORKER_DECODE_THREADS as T; print(decode_only(sys.argv[1], int(sys.argv[2]), T))")


def decode_processes(path: str, n: int, frames: int) -> float:
    """Aggregate fps of N processes decoding the clip at once (PyAV, as interop run's workers decode it)."""
    procs = [subprocess.Popen([sys.executable, "-c", _DECODE, path, str(frames)], stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    fps = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        fps.append(float(out.strip().splitlines()[-1]))
    # each ran for frames / fps seconds; all frames over the longest of them
    return n * frames / max(frames / f for f in fps)


def networks(path: str, frames: int, precision: str | None) -> tuple[float, float, int]:
    """(the plain network's fps fed pre-processed tensors from memory, interop's model (pre-processing inside) on
    decoded frames held in memory, its request pool)."""
    from .pipeline import _inference, frame_pool_size, infer_only

    inf = _inference(precision)
    nreq = frame_pool_size(inf, path)
    model = infer_only(inf, path, frames)
    inf.close()
    return plain_network(path, frames, precision, nreq), float(model), int(nreq)


def plain_network(path: str, frames: int, precision: str | None, nreq: int) -> float:
    """The plain network's fps fed pre-processed tensors from memory through a pool of ``nreq`` requests."""
    from .pipeline import PlainNetwork

    return float(PlainNetwork(precision, nreq, path).infer_only(frames))


def _median_of(got: dict[str, list[Any]], case: str, key: str = "fps") -> float:
    return median([r[key] for r in got[case]])


def _ratios(got: dict[str, list[Any]], dec: float, case: str) -> list[float]:
    """Each repetition's fps of ``case`` against that repetition's own bound."""
    return [r["fps"] / min(dec, p) for r, p in zip(got[case], got["plain"])]


def _x_bound(got: dict[str, list[Any]], dec: float, case: str) -> float:
    """The median over the repetitions of ``case``'s fps against that repetition's own bound."""
    return median(_ratios(got, dec, case))


def _steady_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The steady-state count (steady_fps), median over the repetitions where every stream went at once."""
    steady = [r["fps_steady"] for r in runs if r["fps_steady"] is not None]
    return {"fps_steady": round(median(steady), 2) if steady else None, "steady_reps": len(steady)}


def _other_counts(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The longest-wall and steady-state counts of N runs that started apart (medians over the repetitions)."""
    return {"fps_longest_wall": round(median([r["fps_longest_wall"] for r in runs]), 2), **_steady_of(runs),
            "start_spread_s": max(r["start_spread_s"] for r in runs)}


def run(quick: bool = False, precision: str | None = None, reps: int | None = None) -> list[Result]:
    """``reps``: repetitions of each N's cases, interleaved (the plain network, then each way of running N streams);
    each figure is the median over them, each ratio the median of the repetitions' own ratios."""
    from .pipeline import CLIP, clip_path

    path = clip_path()
    frames = 20 if quick else 100
    counts = (1, 2) if quick else COUNTS
    reps = max(1, int(reps or 1))
    plain, model, nreq = networks(path, 4 * frames, precision)
    out: list[Result] = [Result(NAME, "plain network, pre-processed tensors in memory", round(plain, 2), "fps",
                                {"frames": 4 * frames, "requests": nreq}),
                         Result(NAME, "interop's model (pre-processing inside) on frames in memory", round(model, 2),
                                "fps", {"frames": 4 * frames, "requests": nreq})]
    for n in counts:
        # 4 x frames in all where the clip has them: a run of a few hundred milliseconds would measure its start and
        # its end
        per = min(max(frames, 4 * frames // n), int(CLIP["frames"]))
        common: dict[str, Any] = {"streams": n, "frames_per_stream": per, "reps": reps,
                                  "stat": f"median of {reps} interleaved repetitions", "cores": os.cpu_count()}
        dec = decode_processes(path, n, per)
        t0 = time.perf_counter()
        got: dict[str, list[Any]] = {"plain": [], "s": [], "workers": [], "a": [], "b": []}
        for _ in range(reps):
            # the plain network again beside each repetition: this machine's speed drifts over a run of minutes
            got["plain"].append(plain_network(path, 4 * frames, precision, nreq))
            # `interop run` with one input runs its single-stream loop; with several, each input on a thread
            got["s"].append(single_loop(path, per, precision) if n == 1 else
                            interop_streams(path, n, per, precision, "threads"))
            got["workers"].append(interop_streams(path, n, per, precision, "processes"))
            got["a"].append(separate_processes(path, n, per, precision))
            got["b"].append(threads(path, n, per, precision))
        common["seconds"] = round(time.perf_counter() - t0, 1)
        plain_n = median(got["plain"])
        bound = min(dec, plain_n)
        fps = functools.partial(_median_of, got)
        x_bound = functools.partial(_x_bound, got, dec)

        s, workers = got["s"][-1], got["workers"][-1]
        what = "its single-stream loop" if n == 1 else "decoded in threads, one Inference"
        out += [
            Result(NAME, f"N={n} decode processes together", round(dec, 2), "fps", common),
            Result(NAME, f"N={n} plain network (measured beside each repetition)", round(plain_n, 2), "fps", common),
            Result(NAME, f"N={n} bound min(decode, plain network)", round(bound, 2), "fps", common),
            Result(NAME, f"N={n} interop run ({what})", round(fps("s"), 2), "fps",
                   {**common, "copies": s["copies"], "bytes_copied": s["bytes_copied"],
                    "x_bound": round(x_bound("s"), 3), **_steady_of(got["s"])}),
            Result(NAME, f"N={n} interop run --decode processes (decode workers + one Inference)",
                   round(fps("workers"), 2), "fps",
                   {**common, "copies": workers["copies"], "bytes_copied": workers["bytes_copied"],
                    "x_bound": round(x_bound("workers"), 3), **_steady_of(got["workers"])}),
            Result(NAME, f"N={n} separate interop run processes", round(fps("a"), 2), "fps",
                   {**common, **_other_counts(got["a"])}),
            Result(NAME, f"N={n} threads in one process", round(fps("b"), 2), "fps",
                   {**common, **_other_counts(got["b"])}),
            Result(NAME, f"N={n} interop run / bound (target >= 0.9 on the Xeon)", round(x_bound("s"), 3), "x",
                   {**common, "stat": f"median of the {reps} repetitions' own ratios (each against the plain "
                                      f"network measured beside it)",
                    "per_rep": [round(x, 3) for x in _ratios(got, dec, "s")]}),
        ]
    return out


def markdown(results: list[Result]) -> str:
    lines = ["| case | value | unit | details |", "|---|---:|---|---|"]
    for r in results:
        d = {k: v for k, v in r.details.items() if k not in ("cores",)}
        lines.append(f"| {r.case} | {r.value:.4g} | {r.unit} | {', '.join(f'{k} {v}' for k, v in d.items())} |")
    return "\n".join(lines) + "\n"
