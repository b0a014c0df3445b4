"""NVDEC -> torch through interop vs raw PyAV and the naive CPU path; prints a table, writes JSON and Markdown.

    python bench/cuda.py [--quick] [--json PATH] [--md PATH]

Needs an NVIDIA GPU, torch and PyAV; bench/gpu.sh runs it on the device machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interop.benchmarks import machine  # noqa: E402
from interop.benchmarks.cuda import run  # noqa: E402


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError:
        return "unknown GPU"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    t0 = time.perf_counter()
    res = run(a.quick)
    import av
    import torch

    head = f"GPU: {gpu_name()}; CPU: {machine()}; torch {torch.__version__}, PyAV {av.__version__}"
    lines = [head, "", "| case | value | unit | runs |", "|---|---|---|---|"]
    for r in res:
        lines.append(f"| {r.case} | {r.value:g} | {r.unit} | {' '.join(map(str, r.details.get('runs', [])))} |")
    text = "\n".join(lines)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"gpu": gpu_name(), "machine": machine(), "seconds": round(time.perf_counter() - t0),
                                            "results": [asdict(r) for r in res]}, indent=1))
    if a.md:
        Path(a.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
