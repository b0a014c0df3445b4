"""Run the Level Zero benchmark: DMA -> USM import and USM -> DMA export per frame vs one copy of the frame.

    python bench/level_zero.py [--quick] [--fake]

--fake runs it on the test fake driver (tests/fakes/build/ze; build it with bash tests/prepare.d/fakes_ze.sh):
the numbers are then interop's and the loader's overhead, not a device's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fake", action="store_true")
    args = ap.parse_args()
    if args.fake and "ZE_ENABLE_ALT_DRIVERS" not in os.environ:
        fake = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "build" / "ze" / "libze_fake_driver.so.1"
        os.environ["ZE_ENABLE_ALT_DRIVERS"] = str(fake)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import interop  # noqa: F401  (runtime set-up first)
    from interop.benchmarks import level_zero, machine

    print(f"level_zero on {machine()}")
    rows = level_zero.run(quick=args.quick)
    if not rows:
        print("no Level Zero driver here (use --fake for the test fake driver)")
    for r in rows:
        d = r.details
        print(f"{r.case:32s} {d['us']:8.1f}us  one copy {d['copy_us']:9.1f}us  ratio {r.value:7.4f}  ({d['driver']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
