"""`import interop` imports no framework, and wrap()/route() of plain numpy do not either."""

from __future__ import annotations

import json
import subprocess
import sys

from interop.backends import all_backends

# every framework a backend declares, plus the array libraries CUDA allocates with (optional, so not required)
FRAMEWORKS = sorted({m.split(".")[0] for b in all_backends() for m in b.requires} | {"torch", "cupy"})


def test_import_interop_imports_no_framework():
    code = ("import sys, json, numpy as np, interop\n"
            "t = interop.wrap(np.zeros((2, 2)))\n"
            "interop.route(interop.MemoryType.CPU, interop.MemoryType.CPU)\n"
            "from interop.mapper import registered; registered()\n"
            "try:\n    interop.route(interop.MemoryType.FFMPEG, interop.MemoryType.OPENVINO, allow_copy=True)\n"
            "except interop.InteropError:\n    pass\n"
            f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_public_api_names():
    import interop

    for name in ["__version__", "MemoryType", "AccessMode", "FrameFormat", "TensorInfo", "Tensor", "Frame", "Context",
                 "MemoryMapper", "MemoryMapperChain", "wrap", "map", "route", "copy_meter", "Inference",
                 "InteropError", "NoRouteError", "CopyRequiredError", "BackendUnavailableError", "InvalidTensorError"]:
        assert hasattr(interop, name), name
    assert issubclass(interop.CopyRequiredError, interop.NoRouteError)
    assert issubclass(interop.NoRouteError, interop.InteropError)
    assert issubclass(interop.BackendUnavailableError, ImportError)
    assert issubclass(interop.InvalidTensorError, ValueError)
    assert {m.name for m in interop.MemoryType} == {"CPU", "FFMPEG", "GST", "OPENCV", "OPENCV_UMAT", "OPENCL", "USM", "DMA",
                                                     "VAAPI", "OPENVINO", "NPU", "CUDA"}
