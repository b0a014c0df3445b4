"""NVDEC -> torch through interop, beside raw PyAV + DLPack capsules and the naive CPU path (tier B, needs a GPU).

Cases, each fps over a whole clip (median of interleaved runs):
  raw      PyAV NVDEC (HWAccel('cuda', is_hw_owned=True)) + torch.from_dlpack(plane.__dlpack__(stream=None)) per plane
  interop  the same decode + interop.map(frame, MemoryType.CUDA) + torch.from_dlpack(plane) per plane
  interop + torch_views   the same decode + torch_views(interop.map(frame, MemoryType.CUDA))
  torch_views(vf)         the same decode + interop.tensors.cuda.torch_views(frame): the planes straight to torch
  naive    CPU decode (PyAV's default threading) + to_ndarray('rgb24') + torch.from_numpy(...).cuda();
           also with frame threads on all cores
  N decoders in threads (HEVC 1080p, the whole 2000-frame clip each), aggregate fps, raw and interop; once with
           one idle NVDEC decoder held in the process for every case (interop.cuda.keep_nvdec_warm: no close waits
           for the driver's teardown tick) and once without
  files in turn    one decoder at a time, 10 files one after another: raw PyAV against open_nvdec (kept warm)
Experiments to beat PyAV's own loop: demux on a separate thread, the *_cuvid decoders, frame threads. Their
gains depend on the clip: frame threads gain more on these synthetic clips (no B-frames in the H.264 ones) than on
realistic encodes.

Clips are synthetic and made on the machine that runs this (PyAV's libx264 / libx265, ultrafast), cached in
$INTEROP_BENCH_CLIPS (default /tmp/interop-bench-clips).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from . import Result, Skipped, median

_log = logging.getLogger(__name__)  # progress, run by run: `interop -v bench` shows it

NAME = "cuda"
SUMMARY = "NVDEC -> torch through interop beside raw PyAV + DLPack and the naive CPU path (needs an NVIDIA GPU)"
REQUIRES: tuple[tuple[str, str], ...] = (("torch", "torch (with CUDA)"), ("av", "PyAV"))
WARM = ", NVDEC kept warm"  # the aggregate cases run with one idle NVDEC decoder held in the process

CLIPS = {  # name: (codec, width, height, frames full, frames quick)
    "1080p H.264": ("libx264", 1920, 1080, 2000, 300),
    "1080p HEVC": ("libx265", 1920, 1080, 2000, 300),
    "4K H.264": ("libx264", 3840, 2160, 500, 90),
}


def clip_dir() -> Path:
    return Path(os.environ.get("INTEROP_BENCH_CLIPS", "/tmp/interop-bench-clips"))


def panning_texture(width: int, height: int) -> Callable[[int, int, int], Any]:
    """The benchmark clips' pattern (yuv420p arrays): a textured picture panning across the frame plus a moving
    bright block (cheap to make and encode, a realistic bitrate: motion vectors predict most of it, the texture
    keeps residuals busy)."""
    import numpy as np

    rng = np.random.default_rng(0)
    H, W = height + 256, width + 512
    yy, xx = np.mgrid[0:H, 0:W]
    tex = (((xx // 8) ^ (yy // 8)) % 160 + 40 + rng.integers(0, 24, (H, W))).astype(np.uint8)
    ctex = ((xx[: H // 2] // 3 + yy[: H // 2]) % 128 + 64).astype(np.uint8)

    def picture(i: int, width: int, height: int) -> Any:
        dx, dy = (4 * i) % 512, 0
        y = tex[dy:dy + height, dx:dx + width].copy()
        b = (i * 7) % (height - 64)
        y[b:b + 64, b:b + 64] = 235
        uv = ctex[dy // 2:dy // 2 + height // 2, dx:dx + width]
        return np.concatenate([y, uv])

    return picture


def make_clip(path: Path, codec: str, width: int, height: int, frames: int) -> Path:
    """A synthetic clip of ``panning_texture``, made once and cached at ``path``."""
    from ..clip import encode

    return encode(path, frames, width, height, codec=codec, pattern=panning_texture(width, height),
                  array_format="yuv420p", container="mp4", thread_type="AUTO", reuse=True)


def make_clips(quick: bool, names: Any = None) -> dict[str, Path]:
    d = clip_dir()
    out = {}
    for name, (codec, w, h, full, short) in CLIPS.items():
        if names is not None and name not in names:
            continue
        n = short if quick else full
        out[name] = make_clip(d / f"{codec}_{w}x{h}_{n}.mp4", codec, w, h, n)
    return out


# ---- decode loops -------------------------------------------------------------------------------------------


def _nvdec(path: Path) -> Any:
    import av
    from av.codec.hwaccel import HWAccel

    return av.open(str(path), hwaccel=HWAccel("cuda", allow_software_fallback=False, is_hw_owned=True))


def _open_nvdec(path: Path) -> Any:
    """interop's open_nvdec (NVDEC kept warm by default)."""
    from interop.cuda import open_nvdec

    return open_nvdec(str(path))


def _consume_raw(torch: Any) -> Callable[[Any], Any]:
    def f(vf: Any) -> Any:
        p = vf.planes
        return torch.from_dlpack(p[0].__dlpack__(stream=None)), torch.from_dlpack(p[1].__dlpack__(stream=None))

    return f


def _consume_interop(torch: Any) -> Callable[[Any], Any]:
    import interop

    cuda = interop.MemoryType.CUDA

    def f(vf: Any) -> Any:
        fr: Any = interop.map(vf, cuda)
        return torch.from_dlpack(fr[0]), torch.from_dlpack(fr[1])

    return f


def _consume_interop_views(torch: Any) -> Callable[[Any], Any]:
    import interop
    from interop.cuda import torch_views

    cuda = interop.MemoryType.CUDA

    def f(vf: Any) -> Any:
        return torch_views(interop.map(vf, cuda))

    return f


def _consume_direct_views(torch: Any) -> Callable[[Any], Any]:
    from interop.cuda import torch_views

    return torch_views  # straight from the av.VideoFrame


def loop_plain(path: Path, consume: Callable[[Any], Any], limit: int | None = None, frame_threads: bool = False,
               opener: Callable[[Path], Any] = _nvdec) -> int:
    n = 0
    with opener(path) as c:
        if frame_threads:
            c.streams.video[0].thread_type = "AUTO"
        for vf in c.decode(video=0):
            consume(vf)
            n += 1
            if limit is not None and n >= limit:
                break
    return n


def files_in_turn(path: Path, files: int, frames: int, consume: Callable[[Any], Any],
                  opener: Callable[[Path], Any]) -> int:
    """``files`` videos decoded one after another (the same clip reopened), ``frames`` of each, by one decoder at
    a time opened with ``opener``: the frames decoded."""
    return sum(loop_plain(path, consume, frames, opener=opener) for _ in range(files))


def loop_frame_threads(path: Path, consume: Callable[[Any], Any], limit: int | None = None) -> int:
    """loop_plain with FFmpeg's frame threads on (thread_type AUTO), as ``open_nvdec(frame_threads=True)``."""
    return loop_plain(path, consume, limit, frame_threads=True)


def loop_decode_thread(path: Path, consume: Callable[[Any], Any], limit: int | None = None,
                       frame_threads: bool = False) -> int:
    """interop's nvdec_frames(): decode on a worker thread, map + torch views here."""
    from interop.cuda import nvdec_frames, torch_views

    n = 0
    # not kept warm: the experiments compare decode strategies, every one closing its decoder cold like raw
    for f in nvdec_frames(str(path), frame_threads=frame_threads, keep_warm=False):
        torch_views(f)
        n += 1
    return n


def loop_decode_thread_ft(path: Path, consume: Callable[[Any], Any], limit: int | None = None) -> int:
    return loop_decode_thread(path, consume, limit, frame_threads=True)


def _demux_thread(c: Any, stream: Any, q: queue.Queue) -> threading.Thread:
    def run() -> None:
        try:
            for pkt in c.demux(stream):
                if pkt.size:
                    q.put(pkt)
        finally:
            q.put(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _decode_demuxed(c: Any, stream: Any, cc: Any, consume: Callable[[Any], Any],
                    check_first: Callable[[Any], None] | None = None) -> int:
    """Decode with ``cc`` the packets of ``stream`` that _demux_thread reads on another thread, consume each frame
    here (``check_first`` sees the first frame before it is consumed); returns the frame count."""
    n = 0
    q: queue.Queue = queue.Queue(maxsize=64)
    t = _demux_thread(c, stream, q)
    while True:
        pkt = q.get()
        for vf in cc.decode(pkt):
            if n == 0 and check_first is not None:
                check_first(vf)
            consume(vf)
            n += 1
        if pkt is None:
            break
    t.join()
    return n


def loop_pipelined(path: Path, consume: Callable[[Any], Any], limit: int | None = None) -> int:
    """Demux on another thread (PyAV releases the GIL in demux and decode), decode + consume here."""
    with _nvdec(path) as c:
        stream = c.streams.video[0]
        return _decode_demuxed(c, stream, stream.codec_context, consume)


def loop_cuvid_isolated(path: Path, consume: Callable[[Any], Any], limit: int | None = None) -> float:
    """loop_cuvid in a child process (a crash there must not end the benchmark); returns its fps."""
    import subprocess
    import sys

    code = ("import sys, time, torch; from pathlib import Path; import interop.benchmarks.cuda as b; "
            "f = b._consume_interop(torch); b.loop_cuvid(Path(sys.argv[1]), f, 30); torch.cuda.synchronize(); "
            "t = time.perf_counter(); n = b.loop_cuvid(Path(sys.argv[1]), f); torch.cuda.synchronize(); "
            "print('FPS', n / (time.perf_counter() - t))")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("FPS "):
            return float(line.split()[1])
    raise RuntimeError(f"cuvid child exited with {r.returncode}: {r.stderr.strip().splitlines()[-1:] or ''}")


def loop_cuvid(path: Path, consume: Callable[[Any], Any], limit: int | None = None) -> int:
    """The *_cuvid decoders (NVDEC through FFmpeg's cuviddec, which parses the stream on NVIDIA's parser)."""
    import av
    from av.codec.hwaccel import HWAccel

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        name = {"h264": "h264_cuvid", "hevc": "hevc_cuvid"}[stream.codec_context.name]
        cc: Any = av.CodecContext.create(name, "r", hwaccel=HWAccel("cuda", allow_software_fallback=False, is_hw_owned=True))
        cc.extradata = stream.codec_context.extradata
        cc.width, cc.height = stream.codec_context.width, stream.codec_context.height

        def check(vf: Any) -> None:
            if vf.format.name != "cuda":
                raise RuntimeError(f"{name} gave {vf.format.name} frames, not cuda")

        return _decode_demuxed(c, stream, cc, consume, check)


def loop_naive(path: Path, torch: Any, limit: int | None = None, all_cores: bool = False) -> int:
    import av

    n = 0
    with av.open(str(path)) as c:
        if all_cores:
            c.streams.video[0].thread_type = "AUTO"
        for vf in c.decode(video=0):
            torch.from_numpy(vf.to_ndarray(format="rgb24")).cuda()
            n += 1
    return n


def _per_frame_cost(path: Path, consumers: dict[str, Callable[[Any], Any]], frames: int) -> dict[str, float]:
    """Mean time spent in each consumer per frame (µs), measured in the decode loop on the same frames."""
    out: dict[str, list[float]] = {k: [] for k in consumers}
    clock = time.perf_counter
    with _nvdec(path) as c:
        for i, vf in enumerate(c.decode(video=0)):
            for k, f in consumers.items():
                t0 = clock()
                f(vf)
                out[k].append(clock() - t0)
            if i + 1 >= frames:
                break
    return {k: median(v) * 1e6 for k, v in out.items()}


def timed(fn: Callable[[], int], torch: Any) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = fn()
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def concurrent(path: Path, consume: Callable[[Any], Any], decoders: int, limit: int, torch: Any,
               loop: Callable[..., int] = loop_plain, detail: dict[str, Any] | None = None) -> float:
    """Aggregate fps of ``decoders`` threads each decoding ``limit`` frames of its own container with ``loop``:
    all frames over the time from the common start until every thread has closed its container.

    ``detail`` (if given) receives ``to_last_frame``: the aggregate over the time until the last frame was
    handed out (closing the last NVDEC decoder of the process sometimes waits for the driver's teardown tick,
    whatever the consumer: docs/cuda.md), and per thread ``last_frame`` and ``done`` (closed) in seconds from the start.
    """
    counts = [0] * decoders
    last = [0.0] * decoders
    ends = [0.0] * decoders
    start = threading.Barrier(decoders + 1)
    clock = time.perf_counter

    def work(i: int) -> None:
        def timed_consume(vf: Any) -> Any:  # the same cost for every consumer
            out = consume(vf)
            last[i] = clock()
            return out

        start.wait()
        counts[i] = loop(path, timed_consume, limit)
        ends[i] = clock()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(decoders)]
    for t in threads:
        t.start()
    torch.cuda.synchronize()
    start.wait()
    t0 = clock()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    wall = clock() - t0
    if detail is not None:
        detail["to_last_frame"] = sum(counts) / (max(last) - t0)
        detail["last_frame"] = [x - t0 for x in last]
        detail["done"] = [x - t0 for x in ends]
    return sum(counts) / wall


# ---- the benchmark --------------------------------------------------------------------------------------------


def run(quick: bool) -> list[Result]:
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("no CUDA device")
        import av  # noqa: F401
    except ImportError as e:
        raise Skipped(f"needs torch with a CUDA device and PyAV: {e}") from None
    log = _log.info
    runs = 3 if quick else int(os.environ.get("INTEROP_BENCH_RUNS", "5"))
    parts = set(os.environ.get("INTEROP_BENCH_PARTS", "main,main_warm,aggregate_warm,aggregate,files,extra").split(","))
    only = os.environ.get("INTEROP_BENCH_CLIPS_ONLY")  # e.g. "1080p H.264": the single-stream part on those clips
    names = ["1080p HEVC"] if parts <= {"aggregate", "aggregate_warm", "files"} else (only.split(",") + ["1080p HEVC"] if only else None)
    clips = make_clips(quick, names)
    raw, via, views = _consume_raw(torch), _consume_interop(torch), _consume_interop_views(torch)
    direct = _consume_direct_views(torch)
    for p in clips.values():  # warm-up: CUDA/NVDEC initialisation, interop imports
        loop_plain(p, via, 30)
        loop_plain(p, raw, 30)
    samples: dict[str, list[float]] = {}
    overhead = _per_frame_cost(clips["1080p HEVC"], {"raw": raw, "interop": via, "interop torch_views": views,
                                                      "torch_views(vf)": direct}, 400)
    for k, v in overhead.items():
        log(f"per-frame Python cost of the consumer, {k}: {v:.1f} us")

    def add(case: str, fps: float) -> None:
        samples.setdefault(case, []).append(fps)
        log(f"{case:44s} {fps:8.1f} fps")

    def single_streams(tag: str, naive: bool) -> None:
        for r in range(runs):
            for name, p in clips.items():
                if only and name not in only.split(","):
                    continue
                add(f"{name}{tag}: raw PyAV NVDEC + DLPack", timed(partial(loop_plain, p, raw), torch))
                add(f"{name}{tag}: interop NVDEC -> torch", timed(partial(loop_plain, p, via), torch))
                add(f"{name}{tag}: interop + torch_views", timed(partial(loop_plain, p, views), torch))
                add(f"{name}{tag}: torch_views(vf)", timed(partial(loop_plain, p, direct), torch))
                if naive and (name != "4K H.264" or r == 0):
                    add(f"{name}: naive CPU decode + rgb24 + .cuda()", timed(partial(loop_naive, p, torch), torch))
                if naive and os.environ.get("INTEROP_BENCH_NAIVE_ALL_CORES") and ((name != "4K H.264" and r < 3) or r == 0):
                    add(f"{name}: naive, all cores (frame threads)",
                        timed(partial(loop_naive, p, torch, all_cores=True), torch))

    from interop.cuda import keep_nvdec_warm, release_nvdec_warm

    if "main" in parts:
        single_streams("", naive=True)
    if "main_warm" in parts:
        # every case with one idle NVDEC decoder held: no run's close waits for the driver's teardown
        # tick (docs/cuda.md), which otherwise rounds each run's time up to the next tick (the 1080p H.264 "speed steps")
        keep_nvdec_warm(0)
        try:
            single_streams(WARM, naive="main" not in parts)
        finally:
            release_nvdec_warm(0)
    # N decoders in threads, each decoding the whole 2000-frame HEVC clip (the clip length: start-up and
    # teardown must not dominate); every case of every N in turn, run by run
    hevc = clips["1080p HEVC"]
    limit = int(CLIPS["1080p HEVC"][4 if quick else 3])
    decoder_counts = [int(x) for x in os.environ.get("INTEROP_BENCH_DECODERS", "1,2,4,7").split(",")]
    # At 7 decoders the wall figure takes a few values a teardown tick apart (the driver's, below), so 7
    # runs can put two equal consumers' medians on different values: 15 runs there.
    many = int(os.environ.get("INTEROP_BENCH_RUNS_MANY_DECODERS", "3" if quick else "15"))

    same_decode = [("raw", raw, loop_plain), ("interop", via, loop_plain),
                   ("interop + torch_views", views, loop_plain), ("torch_views(vf)", direct, loop_plain)]
    # as a user of interop decodes: open_nvdec, which makes the idle decoder in the run (timed) and keeps it
    by_open_nvdec = ("open_nvdec + torch_views(vf)", direct, partial(loop_plain, opener=_open_nvdec))

    def aggregates(tag: str, cases: list[tuple[str, Callable[[Any], Any], Callable[..., int]]]) -> None:
        for r in range(max(runs, many)):
            for n in decoder_counts:
                if r >= (max(runs, many) if n >= 7 else runs):
                    continue
                for label, consume, loop in cases:
                    detail: dict[str, Any] = {}
                    add(f"1080p HEVC x{n} decoders{tag}: {label}", concurrent(hevc, consume, n, limit, torch, loop, detail))
                    add(f"1080p HEVC x{n} decoders{tag} to last frame: {label}", detail["to_last_frame"])
                    if loop is not loop_plain:
                        release_nvdec_warm()  # the next cases start cold again

    if "aggregate_warm" in parts:
        # The same with one idle NVDEC decoder held through every case (raw too): closing the process's last
        # decoder then never waits for the driver's teardown tick (interop.cuda.keep_nvdec_warm,
        # docs/cuda.md), which otherwise rounds each run's wall time up to the next tick.
        keep_nvdec_warm(0)
        try:
            aggregates(WARM, same_decode)
        finally:
            release_nvdec_warm(0)
    if "aggregate" in parts:
        aggregates("", [*same_decode, by_open_nvdec])
    # One decoder at a time, file after file (a pipeline taking videos in turn): every close is the process's
    # last unless NVDEC is kept warm. interop's open_nvdec makes its idle decoder in every run (a process pays
    # that once) and lets it go after, so the raw runs stay cold.
    files, frames_per_file = (4, 100) if quick else (10, 300)
    for _r in range(runs if "files" in parts else 0):
        add(f"1080p HEVC, {files} files in turn: raw PyAV NVDEC + DLPack",
            timed(partial(files_in_turn, hevc, files, frames_per_file, raw, _nvdec), torch))
        add(f"1080p HEVC, {files} files in turn: open_nvdec (kept warm) + torch_views(vf)",
            timed(partial(files_in_turn, hevc, files, frames_per_file, direct, _open_nvdec), torch))
        release_nvdec_warm()
    for _r in range(min(runs, 3) if "extra" in parts else 0):
        for name in clips:
            p = clips[name]
            if "main" not in parts:
                add(f"{name}: raw PyAV NVDEC + DLPack", timed(partial(loop_plain, p, raw), torch))
            for label, loop in (("demux thread", loop_pipelined), ("cuvid decoder", None),
                                ("frame threads", loop_frame_threads), ("decode thread", loop_decode_thread),
                                ("decode thread + frame threads", loop_decode_thread_ft)):
                try:
                    if loop is None:
                        add(f"{name}: interop + {label}", loop_cuvid_isolated(p, via))
                        continue
                    add(f"{name}: interop + {label}", timed(partial(loop, p, via), torch))
                except Exception as e:  # an experiment that cannot run here is a finding, not a crash
                    log(f"{name}: {label} failed: {type(e).__name__}: {e}")
                    samples.setdefault(f"{name}: interop + {label}", [])
    results = [Result(NAME, f"per-frame cost of consume(): {k}", round(v, 1), "us", {"clip": "1080p HEVC"})
               for k, v in overhead.items()]
    for case, xs in samples.items():
        if xs:
            results.append(Result(NAME, case, round(median(xs), 1), "fps", {"runs": [round(x, 1) for x in xs]}))
    med = {r.case: r.value for r in results}

    def ratio(case: str, a: str, b: str) -> None:
        if med.get(a) and med.get(b):
            results.append(Result(NAME, case, round(med[a] / med[b], 3), "x", {"of": a, "over": b}))

    for clip in clips:
        naive_case = f"{clip}: naive CPU decode + rgb24 + .cuda()"
        for name in (clip, clip + WARM):
            ratio(f"{name}: interop / raw", f"{name}: interop NVDEC -> torch", f"{name}: raw PyAV NVDEC + DLPack")
            ratio(f"{name}: interop / naive", f"{name}: interop NVDEC -> torch", naive_case)
            ratio(f"{name}: interop + torch_views / raw", f"{name}: interop + torch_views",
                  f"{name}: raw PyAV NVDEC + DLPack")
            ratio(f"{name}: torch_views(vf) / raw", f"{name}: torch_views(vf)", f"{name}: raw PyAV NVDEC + DLPack")
            ratio(f"{name}: torch_views(vf) / naive", f"{name}: torch_views(vf)", naive_case)
            ratio(f"{name}: interop + torch_views / naive", f"{name}: interop + torch_views", naive_case)
    for name in clips:
        ratio(f"{name}: interop / naive all cores", f"{name}: interop NVDEC -> torch",
              f"{name}: naive, all cores (frame threads)")
    for n in (1, 2, 4, 7):
        for how in (" decoders", " decoders to last frame", f" decoders{WARM}", f" decoders{WARM} to last frame"):
            for label in ("interop", "interop + torch_views", "torch_views(vf)", "open_nvdec + torch_views(vf)"):
                ratio(f"1080p HEVC x{n}{how}: {label} / raw", f"1080p HEVC x{n}{how}: {label}",
                      f"1080p HEVC x{n}{how}: raw")
    in_turn = f"1080p HEVC, {files} files in turn"
    ratio(f"{in_turn}: open_nvdec kept warm / raw", f"{in_turn}: open_nvdec (kept warm) + torch_views(vf)",
          f"{in_turn}: raw PyAV NVDEC + DLPack")
    for name in clips:
        for label in ("demux thread", "cuvid decoder", "frame threads", "decode thread", "decode thread + frame threads"):
            ratio(f"{name}: interop + {label} / raw", f"{name}: interop + {label}", f"{name}: raw PyAV NVDEC + DLPack")
    return results


def environment() -> str:
    """The GPU and driver (nvidia-smi), torch and PyAV versions: the device the figures belong to."""
    import subprocess

    import av
    import torch

    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip() or "unknown GPU"
    except (OSError, subprocess.SubprocessError):
        gpu = "unknown GPU"
    return f"GPU: {gpu}; torch {torch.__version__}, PyAV {av.__version__}"
