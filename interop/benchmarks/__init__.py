"""Benchmarks behind ``interop bench``: each module here has ``NAME`` and ``run(quick) -> list[Result]``.

Results are ratios measured side by side in one run, never absolute timings checked by tests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Result:
    benchmark: str
    case: str
    value: float
    unit: str
    details: dict[str, Any] = field(default_factory=dict)


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
    import os

    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def modules() -> list[Any]:
    from . import __path__ as path

    return [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name)
            if not m.name.startswith("_")]


def main(args: argparse.Namespace) -> int:
    only = set(args.only.split(",")) if getattr(args, "only", None) else None
    results: list[Result] = []
    t0 = time.perf_counter()
    for mod in modules():
        if only and mod.NAME not in only:
            continue
        print(f"[bench] {mod.NAME} ...", file=sys.stderr, flush=True)
        res = mod.run(quick=bool(getattr(args, "quick", False)))
        results.extend(res)
        if not args.json:
            for r in res:
                print(f"{r.benchmark:24s} {r.case:48s} {r.value:12.4g} {r.unit}")
    if args.json:
        print(json.dumps({"machine": machine(), "seconds": round(time.perf_counter() - t0, 1),
                          "results": [asdict(r) for r in results]}, default=str))
    return 0
