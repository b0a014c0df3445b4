"""Benchmark (b): `interop run` vs decode-only, infer-only, their serial bound, and the naive CPU loop.

    python bench/pipeline.py [--quick] [--precision f32] [--reps N] [--json]

Same as `interop bench --only pipeline`; results with the machine named go to bench/results/pipeline.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import interop  # noqa: F401  (runtime set-up before OpenVINO is imported)
from interop.benchmarks import machine
from interop.benchmarks.pipeline import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--precision", default=None, help="INFERENCE_PRECISION_HINT for every case (e.g. f32)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 3): more on a noisy machine")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(quick=args.quick, precision=args.precision, reps=args.reps)
    if args.json:
        print(json.dumps({"machine": machine(), "results": [asdict(r) for r in res]}, default=str))
        return 0
    print(f"machine: {machine()}")
    for r in res:
        extra = {k: v for k, v in r.details.items() if k in ("all", "ms_per_frame", "copies")}
        print(f"{r.case:52s} {r.value:9.3f} {r.unit:4s} {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
