"""The DMA producer/consumer example pair runs briefly: frames cross processes zero-copy and come back to the pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.requirements import need_module

need_module("av")
need_module("openvino")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_producer_consumer_pair(tmp_path):
    from interop import textdet

    try:
        textdet.model_path()
    except Exception as e:  # the model ships in a package; name what is missing
        pytest.skip(f"text-detection model not installed: {e}")
    sock = str(tmp_path / "frames.sock")
    prod = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "dma_producer.py"), "--socket", sock,
                             "--frames", "6", "--pool", "3"], stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        cons = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "dma_consumer.py"), "--socket", sock],
                              capture_output=True, text=True, timeout=180, cwd=ROOT)
        _, perr = prod.communicate(timeout=60)
    finally:
        if prod.poll() is None:
            prod.kill()
    assert cons.returncode == 0, cons.stderr[-2000:]
    out = json.loads(cons.stdout.strip().splitlines()[-1])
    assert out["frames"] == 6 and out["copies"] == 0 and out["torn"] == 0 and out["boxes"] > 0
    assert prod.returncode == 0, perr[-2000:]
    assert "sent 6 frames" in perr and "all returned: True, pool free 3/3" in perr
