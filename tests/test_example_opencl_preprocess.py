"""examples/opencl_preprocess.py: decode -> our OpenCL I420->RGB+resize kernel -> OpenVINO, zero-copy, vs OpenCV."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.ocl_support import need, opencl_context

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "opencl_preprocess.py")


def test_example_matches_opencv_without_copies():
    need("av", "PyAV")
    need("cv2", "OpenCV")
    need("openvino", "OpenVINO")
    if not opencl_context().host_shared:
        pytest.skip("zero-copy decode -> OpenCL needs an OpenCL device that works in host memory (the CPU device)")
    spec = importlib.util.spec_from_file_location("opencl_preprocess", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    s = mod.run(frames=3, size=(200, 150))
    assert s["frames"] == 3
    assert s["copies"] == 0 and s["bytes_copied"] == 0  # decoder planes -> OpenCL -> OpenVINO without a copy
    assert s["max_abs_diff"] <= 2 and s["mean_abs_diff"] < 0.1  # our kernel == cv2.cvtColor + cv2.resize, to rounding
    assert s["max_output_rel_diff"] < 1e-2
    assert mod.main(["--frames", "1", "--size", "64", "48"]) == 0
