"""Per-frame cost of FFMPEG -> CPU / OPENVINO mapping beside raw PyAV views and to_ndarray(); prints a table.

    python bench/ffmpeg_map.py [--quick] [--json PATH] [--md PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interop.benchmarks import machine  # noqa: E402
from interop.benchmarks.ffmpeg_map import SIZES, run  # noqa: E402


def markdown(results: list, seconds: float, quick: bool) -> str:
    per = {r.case: r for r in results if r.unit == "us/frame"}
    cases = ["raw views", "raw dlpack", "raw openvino", "map cpu", "map cpu + numpy", "map openvino",
             "map openvino + native", "to_ndarray", "to_ndarray rgb", "feed raw openvino", "feed interop"]
    lines = [f"Machine: {machine()}; {'quick' if quick else 'full'} run, {seconds:.0f} s.", "",
             "Median microseconds per frame (each decoded frame handled once by each method, methods in turns; "
             "the feed columns on frames decoded one by one, as a decode loop has them):", "",
             "| size | frames | Y pitch | " + " | ".join(cases) + " |", "|---|---|---|" + "---|" * len(cases)]
    for label in SIZES:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    results = run(quick=args.quick)
    seconds = time.perf_counter() - t0
    md = markdown(results, seconds, args.quick)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "results": [asdict(r) for r in results]}, indent=1))
    if args.md:
        Path(args.md).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
