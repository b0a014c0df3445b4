"""Run the DMA benchmark: map+release and a cross-socket frame hand-off vs one copy of the frame.

    python bench/dma.py [--quick]
"""

from __future__ import annotations

import argparse
import sys

import interop  # noqa: F401  (runtime set-up first)
from interop.benchmarks import dma, machine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"dma on {machine()}")
    print(f"{'case':34s} {'time':>10s} {'one copy':>10s} {'ratio':>7s}")
    for r in dma.run(quick=args.quick):
        d = r.details
        print(f"{r.case:34s} {d['us']:8.1f}us {d['copy_us']:8.1f}us {r.value:7.3f}  ({d['allocator']}, {d['frame_bytes']} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
