"""examples/gst_infer.py: GStreamer decode -> OpenVINO -> boxes drawn -> GStreamer encode; the only copies are
the drawn frames (one per frame, counted), and the written file decodes to the frames pushed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import interop  # noqa: F401 - before openvino (the runtime set-up)
from tests.support.requirements import need_module

ROOT = Path(__file__).resolve().parent.parent


def test_gst_infer_example(tmp_path):
    av = need_module("av")
    need_module("openvino")
    from interop import textdet

    if not textdet.model_status()[0]:
        pytest.skip("needs the PP-OCRv4 model")
    out = tmp_path / "boxes.mp4"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "gst_infer.py"), "--out", str(out), "--frames", "10"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["frames"] == 10 and res["boxes"] >= 30
    assert res["copies"] == 10 and res["bytes_copied"] == 10 * 640 * 480 * 3 // 2  # one drawn copy per frame
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 10
