"""Benchmarks behind ``interop bench``: ratios measured side by side in one run, never absolute timings checked by
tests.

Each module here is one benchmark and has ``NAME``, ``SUMMARY`` (one line for ``interop bench --help``),
``REQUIRES`` (the Python modules it cannot run without, each with the package that provides it) and
``run(quick=False, ...) -> list[Result]``. A benchmark that cannot run here (no GPU, no driver) raises
:class:`Skipped` or ``BackendUnavailableError``; a part of one that cannot run returns a :func:`skipped` result.
Optional hooks: ``markdown(results) -> str`` (its own table) and ``environment() -> str`` (the device it ran on).
Nothing here prints: the CLI formats a :class:`Report` with :func:`text`, :func:`markdown` or :func:`to_json`.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import inspect
import json
import logging
import os
import pkgutil
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from ..errors import InteropError

log = logging.getLogger(__name__)


@dataclass
class Result:
    benchmark: str
    case: str
    value: float
    unit: str
    details: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None  # why this part did not run; then value and unit mean nothing

    def as_dict(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"benchmark": self.benchmark, "part": self.case, "skipped": self.skipped}
        d = asdict(self)
        del d["skipped"]
        return d


class Skipped(Exception):  # noqa: N818 - control flow, not an error: the benchmark cannot run on this machine
    """Raised by a benchmark's ``run()`` when this machine lacks what it measures; the message says what."""


class UnknownBenchmarkError(InteropError, ValueError):
    """``--only`` named a benchmark that does not exist."""


def skipped(benchmark: str, part: str, reason: str) -> Result:
    """A result saying that one part of a benchmark did not run, and why."""
    return Result(benchmark, part, 0.0, "", skipped=reason)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def modules() -> list[ModuleType]:
    """Every benchmark module, by name."""
    from . import __path__ as path

    return [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name)
            if not m.name.startswith("_")]


def catalogue() -> dict[str, str]:
    """Benchmark name -> its one-line summary."""
    return {m.NAME: m.SUMMARY for m in modules()}


def select(only: str | Sequence[str] | None) -> list[ModuleType]:
    """The benchmarks named in ``only`` (comma-separated or a list; None: all), in catalogue order."""
    mods = modules()
    if not only:
        return mods
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    known = [m.NAME for m in mods]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownBenchmarkError(f"unknown benchmark{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                                    f"known: {', '.join(known)}")
    return [m for m in mods if m.NAME in names]


def options_of(mod: ModuleType) -> set[str]:
    """The options (keyword arguments beyond ``quick``) a benchmark's ``run`` takes, e.g. ``precision``, ``reps``."""
    return {p for p in inspect.signature(mod.run).parameters if p != "quick"}


def check_options(mods: Sequence[ModuleType], options: dict[str, Any]) -> None:
    """Refuse an option that none of the selected benchmarks takes (it would be silently ignored)."""
    for opt in options:
        takers = [m.NAME for m in modules() if opt in options_of(m)]
        if not any(opt in options_of(m) for m in mods):
            raise UnknownBenchmarkError(f"--{opt} applies only to {', '.join(takers) or 'no benchmark'}: "
                                        f"add --only {takers[0] if takers else 'NAME'}")


def missing_requirement(mod: ModuleType) -> str | None:
    """Why ``mod`` cannot run here for want of a Python module, or None."""
    for module, package in getattr(mod, "REQUIRES", ()):
        if importlib.util.find_spec(module) is None:
            return f"needs {package} (Python module {module!r} is not installed)"
    return None


@dataclass
class Report:
    command: str
    machine: str
    date: str
    seconds: float = 0.0
    results: list[Result] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)  # benchmark -> the device it ran on

    @property
    def skips(self) -> list[Result]:
        return [r for r in self.results if r.skipped is not None]


def run(mods: Sequence[ModuleType], *, quick: bool = False, options: dict[str, Any] | None = None,
        command: str = "interop bench", progress: Callable[[str], None] | None = None) -> Report:
    """Run ``mods`` in turn; a benchmark that cannot run here gives one skipped result naming why."""
    from ..errors import BackendUnavailableError

    options = {k: v for k, v in (options or {}).items() if v is not None}
    report = Report(command, machine(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    t0 = time.perf_counter()
    for mod in mods:
        why = missing_requirement(mod)
        if why is None:
            if progress:
                progress(f"{mod.NAME} ...")
            kwargs = {k: v for k, v in options.items() if k in options_of(mod)}
            try:
                res = mod.run(quick=quick, **kwargs)
                if hasattr(mod, "environment"):
                    report.environment[mod.NAME] = mod.environment()
            except (Skipped, BackendUnavailableError) as e:
                why = str(e) or type(e).__name__
        if why is not None:
            log.info("benchmark %s skipped: %s", mod.NAME, why)
            res = [skipped(mod.NAME, "all", why)]
        report.results.extend(res)
    report.seconds = round(time.perf_counter() - t0, 1)
    return report


def to_json(report: Report) -> str:
    """One line of JSON: machine, date, command, seconds, results and skipped parts (each with its reason)."""
    return json.dumps({"machine": report.machine, "date": report.date, "command": report.command,
                       "seconds": report.seconds, "environment": report.environment,
                       "results": [r.as_dict() for r in report.results if r.skipped is None],
                       "skipped": [r.as_dict() for r in report.skips]}, default=str)


def text(report: Report) -> str:
    """A plain table, one line per result; a skipped part reads ``NAME PART skipped: why``."""
    lines = [f"machine: {report.machine}"]
    lines += [f"{k}: {v}" for k, v in report.environment.items()]
    for r in report.results:
        if r.skipped is not None:
            part = "" if r.case == "all" else r.case
            lines.append(f"{r.benchmark:12s} {part:52s} skipped: {r.skipped}")
        else:
            lines.append(f"{r.benchmark:12s} {r.case:52s} {r.value:12.4g} {r.unit}")
    return "\n".join(lines)


def markdown(report: Report) -> str:
    """Markdown: a head naming the machine, date and command, then each benchmark's table (its own, if it has one)."""
    by_name: dict[str, list[Result]] = {}
    for r in report.results:
        by_name.setdefault(r.benchmark, []).append(r)
    hooks = {m.NAME: m for m in modules()}
    out = [f"Machine: {report.machine}; {report.date}; `{report.command}`, {report.seconds:.0f} s."]
    for name, results in by_name.items():
        out += ["", f"## {name}", ""]
        if name in report.environment:
            out += [report.environment[name], ""]
        done = [r for r in results if r.skipped is None]
        mod = hooks.get(name)
        if done and mod is not None and hasattr(mod, "markdown"):
            out.append(mod.markdown(done).rstrip("\n"))
        elif done:
            out += ["| case | value | unit | runs |", "|---|---:|---|---|"]
            for r in done:
                runs = r.details.get("runs", r.details.get("all", []))
                out.append(f"| {r.case} | {r.value:.4g} | {r.unit} | {' '.join(f'{x:.4g}' for x in runs)} |")
        for r in results:
            if r.skipped is not None:
                out.append(f"\n{'Skipped' if r.case == 'all' else f'Part {r.case!r} skipped'}: {r.skipped}")
    return "\n".join(out) + "\n"
