"""Runtime set-up: after `import interop`, OpenVINO, pyopencl, dpctl and OpenCV load in any order and see Intel's
OpenCL CPU platform; `import openvino` first is detected and answered by a warning that says the fix."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from interop import _runtime
from tests.support import requirements


def installed_runtime_dir() -> str | None:
    """Where pip put Intel's CPU OpenCL runtime (intel-opencl-rt), from the package's own file list: found apart
    from _runtime, so a regression in _runtime's discovery fails these tests instead of skipping them."""
    try:
        files = importlib.metadata.distribution("intel-opencl-rt").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libintelocl.so":
            return os.path.dirname(os.path.realpath(str(f.locate())))
    return None


@pytest.fixture(autouse=True)
def needs_runtime() -> None:
    """Intel's CPU OpenCL runtime is part of the OpenCL extra on x86-64 (tier A): its absence fails under the skip
    policy."""
    if platform.machine() != "x86_64":
        pytest.skip("intel-opencl-rt exists for x86-64 only")
    if installed_runtime_dir() is None:
        requirements.unavailable("opencl", "Intel's CPU OpenCL runtime (pip intel-opencl-rt) is not installed")


def test_runtime_is_found_where_pip_installed_it():
    assert _runtime.STATE.lib_dir is not None, _runtime.STATE
    assert os.path.realpath(_runtime.STATE.lib_dir) == installed_runtime_dir()

PROBE = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("always")
    order = sys.argv[1].split(",")
    caught = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for name in order:
            __import__(name)
        caught = [str(x.message) for x in w if "interop" in type(x.message).__module__ or "openvino was imported" in str(x.message)]
    import pyopencl as cl, dpctl, cv2
    try:
        plats = [p.name for p in cl.get_platforms()]
        devs = [d.name for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as e:
        plats, devs = ["ERR " + str(e)[:60]], []
    sycl = [d.name for d in dpctl.get_devices()]
    cvdev = cv2.ocl.Device.getDefault().name() if cv2.ocl.haveOpenCL() else None
    import openvino as ov
    print(json.dumps({"platforms": plats, "devices": devs, "sycl": sycl, "cv2": cvdev,
                      "ov": ov.Core().available_devices, "warnings": caught}))
""")


def run_probe(order: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "OPENCV_OPENCL_RUNTIME", "OPENCV_OPENCL_DEVICE", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", PROBE, order], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("order", ["interop,openvino,pyopencl,dpctl,cv2", "interop,cv2,dpctl,pyopencl,openvino"])
def test_any_order_after_interop_sees_one_intel_platform(order):
    r = run_probe(order)
    assert any("Intel" in p for p in r["platforms"]), r
    assert r["devices"] and r["sycl"] and r["cv2"], r
    # one device, seen by all three frameworks
    assert r["cv2"] in r["devices"] and any(d in r["sycl"] for d in r["devices"]), r
    assert "CPU" in r["ov"]
    assert r["warnings"] == []


def test_openvino_first_is_detected_with_the_fix_in_the_warning():
    r = run_probe("openvino,interop")
    assert any("import interop" in w and "LD_PRELOAD" in w for w in r["warnings"]), r


def test_setup_is_idempotent_and_icd_dir_is_exact():
    before = dict(_runtime.STATE.icds)
    assert _runtime.setup() is _runtime.STATE
    assert _runtime.STATE.icds == before
    if _runtime.STATE.icd_dir:
        files = sorted(f for f in os.listdir(_runtime.STATE.icd_dir) if f.endswith(".icd"))
        assert files == sorted(n + ".icd" for n in before)
        assert os.environ["OCL_ICD_VENDORS"] == _runtime.STATE.icd_dir


def test_users_own_working_icd_vendors_is_respected(tmp_path):
    icd = tmp_path / "mine.icd"
    icd.write_text(os.path.join(_runtime.STATE.lib_dir, "libintelocl.so") + "\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path))
    code = "import interop, os, json; print(json.dumps([os.environ['OCL_ICD_VENDORS'], interop._runtime.STATE.user_icd_vendors]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [str(tmp_path), str(tmp_path)]


def test_opencl_starts_after_gstreamer_loaded_its_libraries_globally():
    # GModule (GStreamer through PyGObject) loads libz, libdw, cairo RTLD_GLOBAL; Intel's CPU OpenCL runtime then
    # aborted at start-up unless libgcc_s was made global first, which interop's start-up does.
    import subprocess
    import sys

    code = ("import ctypes, os, interop\n"
            "ctypes.CDLL('libz.so.1', mode=os.RTLD_GLOBAL)\n"
            "from interop import Context, MemoryType\n"
            "print(Context.default(MemoryType.OPENCL).device)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])


def test_openvino_imported_first_gives_typed_errors_that_name_the_fix():
    # OpenVINO's TBB 2021 loaded first keeps Intel's OpenCL CPU runtime from starting: every OpenCL/USM/UMat map is a
    # BackendUnavailableError that names the import order (dpctl's own SyclQueueCreationError leaked before).
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "import openvino\n"
            "import numpy as np, interop\n"
            "from interop import MemoryType\n"
            "for mt in (MemoryType.OPENCL, MemoryType.USM, MemoryType.OPENCV_UMAT):\n"
            "    try:\n"
            "        interop.map(np.zeros((4, 4), np.float32), mt, allow_copy=True)\n"
            "        print(mt.name, 'mapped')\n"
            "    except interop.BackendUnavailableError as e:\n"
            "        print(mt.name, 'typed', 'import interop' in str(e))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in p.stdout.split("\n") if line)
    assert set(lines) == {"OPENCL", "USM", "OPENCV_UMAT"}, p.stdout
    assert all(v == "typed True" for v in lines.values()), p.stdout


def test_openvino_imported_first_is_said_once_on_stderr():
    """The import-order warning went out twice (the warnings module, then the logger's last-resort handler)."""
    code = "import openvino\nimport interop\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert _runtime.STATE.lib_dir is not None  # make install puts Intel's OpenCL runtime here: the warning's cause
    assert p.stderr.count("openvino was imported before interop") == 1, p.stderr
