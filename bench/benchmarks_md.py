"""Rebuild BENCHMARKS.md: its hand-written head (up to the first "## Issue" section) plus one section per results
file in bench/results/, each file's headings one level down.

    python bench/benchmarks_md.py
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    ("Issue 3 (a): mapping decoded frames, FFMPEG -> CPU / OPENVINO", "ffmpeg_map.md"),
    ("Issue 3 (b): `interop run` against its bound and the naive loop", "pipeline.md"),
    ("Issue 4: map + release of 64 MiB vs a copy (OpenCL, OpenCV, USM)", "map64.md"),
    ("Issue 5: DMA-BUF map and cross-process hand-off", "dma.md"),
    ("Issue 7: CUDA / NVDEC on the H100", "cuda.md"),
    ("Issue 8: Level Zero import/export through the fake driver", "level_zero.md"),
]


def section(title: str, name: str) -> str:
    lines = (ROOT / "bench" / "results" / name).read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]  # the file's own title: the section has one
    body = "\n".join(re.sub(r"^(#+) ", r"#\1 ", ln) for ln in lines).strip("\n")
    return f"## {title}\n\n_Source: `bench/results/{name}`._\n\n{body}\n"


def main() -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    head = text[: text.index("\n## Issue ")].rstrip("\n") + "\n"
    path.write_text(head + "\n\n" + "\n\n".join(section(t, n) for t, n in SECTIONS))


if __name__ == "__main__":
    main()
