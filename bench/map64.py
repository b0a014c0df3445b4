"""Run the map64 benchmark: map + release of a 64 MiB buffer vs copying it (OpenCL, OpenCV, USM paths).

    python bench/map64.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

import interop  # noqa: F401  (runtime set-up first)
from interop.benchmarks import machine, map64


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = map64.run(quick=args.quick)
    if args.json:
        print(json.dumps({"machine": machine(), "results": [asdict(r) for r in results]}))
        return 0
    print(f"map64 on {machine()}")
    print(f"{'path':24s} {'map+release':>12s} {'copy':>10s} {'ratio':>8s}  copy is")
    for r in results:
        d = r.details
        print(f"{r.case:24s} {d['map_release_us']:10.1f}us {d['copy_ms']:8.2f}ms {r.value:7.3f}%  {d['copy']}")
    return 0 if all(r.value <= r.details["target_pct"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
