"""The one skip policy (tests/support/requirements.py): a missing or broken tier A backend fails under
INTEROP_REQUIRE_TIER_A (on unless set to 0), tier B/C skips only for absent hardware and names it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import requirements as R

ROOT = Path(__file__).resolve().parent.parent

Failed = pytest.fail.Exception
Skipped = pytest.skip.Exception


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv(R.ENV, "1")


@pytest.fixture
def lenient(monkeypatch):
    monkeypatch.setenv(R.ENV, "0")


def test_strict_unless_set_to_zero(monkeypatch):
    monkeypatch.delenv(R.ENV, raising=False)
    assert R.strict()
    for off in ("0", "false", "no", "off"):
        monkeypatch.setenv(R.ENV, off)
        assert not R.strict()
    monkeypatch.setenv(R.ENV, "1")
    assert R.strict()


@pytest.mark.parametrize("backend", ["ffmpeg", "opencv", "opencl", "usm", "openvino", "gst"])
def test_a_tier_a_framework_that_does_not_import_fails(strict, backend):
    with pytest.raises(Failed, match=rf"tier A and must work on every machine.*interop-video\[{R.BACKENDS[backend].extra}\]"):
        R.need_module("interop_test_no_such_module", backend)


def test_a_tier_a_framework_that_does_not_import_skips_only_when_told(lenient):
    with pytest.raises(Skipped, match=r"skipped: INTEROP_REQUIRE_TIER_A=0"):
        R.need_module("interop_test_no_such_module", "ffmpeg")


def test_a_broken_install_is_not_a_missing_one(strict, tmp_path, monkeypatch):
    """A framework that is there but raises at import (a half-installed wheel) fails the same way."""
    (tmp_path / "interop_test_broken_mod.py").write_text("raise OSError('libfoo.so: cannot open shared object')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Failed, match="OSError: libfoo.so"):
        R.need_module("interop_test_broken_mod", "opencv")


def test_tier_b_c_skips_naming_the_absent_hardware(strict, monkeypatch):
    monkeypatch.setattr(R, "hardware_present", lambda key: False)
    with pytest.raises(Skipped, match=r"needs an NVIDIA CUDA GPU \(tier B\): none found"):
        R.need_module("torch", "cuda")
    with pytest.raises(Skipped, match=r"needs a VA-API render node .*\(tier C\)"):
        R.need("vaapi")
    with pytest.raises(Skipped, match=r"needs an Intel NPU \(tier C\)"):
        R.need("npu")


def test_tier_b_with_its_hardware_fails_without_its_framework(lenient, monkeypatch):
    """On a CUDA machine the gpu tests run: torch missing there is a failure even when tier A may skip."""
    monkeypatch.setattr(R, "hardware_present", lambda key: True)
    with pytest.raises(Failed, match=r"CUDA \(tier B\): its hardware is here"):
        R.need_module("interop_test_no_such_module", "cuda")


def test_every_module_maps_to_a_known_backend():
    assert set(R.MODULE_BACKEND.values()) <= set(R.BACKENDS)
    assert {b.name for b in R.BACKENDS.values() if b.tier == "A"} == {
        "cpu", "ffmpeg", "opencv", "opencv_umat", "opencl", "usm", "dma", "openvino", "gst"}
    assert all(b.hardware for b in R.BACKENDS.values() if b.tier != "A")


def test_tier_a_backends_work_here(strict):
    """Every tier A backend passes need() on this machine (the healthy case: nothing to skip)."""
    R.need(*(name for name, b in R.BACKENDS.items() if b.tier == "A"))


# ---- acceptance: a broken OpenCL ICD fails the OpenCL, USM and UMat tests -------------------------------------

PROBE_TESTS = textwrap.dedent('''
    from tests.support.ocl_support import opencl_context, sycl_context, umat_context

    def test_opencl():
        assert opencl_context() is not None

    def test_usm():
        assert sycl_context() is not None

    def test_umat():
        assert umat_context() is not None
''')


def run_probe_tests(tmp_path: Path, broken_icd: bool, require: str) -> subprocess.CompletedProcess:
    test = tmp_path / "test_probe_ocl.py"
    test.write_text(PROBE_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "OPENCV_OPENCL_RUNTIME",
                                                            "OPENCV_OPENCL_DEVICE", "PYTEST_ADDOPTS")}
    if broken_icd:
        # a vendor directory whose only ICD names a library that does not exist: interop's runtime set-up keeps a
        # user's directory that holds an .icd, so every OpenCL user in the child sees no platform at all
        icd = tmp_path / "vendors"
        icd.mkdir()
        (icd / "broken.icd").write_text("/nonexistent/libOpenCL-broken.so\n")
        env["OCL_ICD_VENDORS"] = str(icd)
    env[R.ENV] = require
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p",
                           "tests.support.requirements", "--rootdir", str(tmp_path), str(test)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_broken_opencl_icd_fails_the_opencl_usm_and_umat_tests(tmp_path):
    out = run_probe_tests(tmp_path, broken_icd=True, require="1")
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 1, tail
    assert "3 failed" in out.stdout and "skipped" not in out.stdout, tail
    assert "no OpenCL platform" in out.stdout, tail


def test_broken_opencl_icd_skips_only_when_tier_a_is_not_required(tmp_path):
    out = run_probe_tests(tmp_path, broken_icd=True, require="0")
    assert out.returncode == 0 and "3 skipped" in out.stdout, out.stdout[-3000:]


def test_healthy_opencl_passes_the_probe_tests(tmp_path):
    out = run_probe_tests(tmp_path, broken_icd=False, require="1")
    assert out.returncode == 0 and "3 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]
