"""The one skip policy of the test suite.

Tier A backends (CPU, FFmpeg, OpenCV, OpenCL, USM, DMA on memfd, OpenVINO CPU, GStreamer) run on every machine:
when one is missing or broken the test FAILS while ``INTEROP_REQUIRE_TIER_A`` is on, and only then may it skip
(``INTEROP_REQUIRE_TIER_A=0``, for a deliberately partial install). The variable is on when absent: DESIGN says
tier A runs everywhere, and a broken install that reads as a column of skips is how regressions hid before.
``make test`` and ``.ci/run`` also set it explicitly.

Tier B/C backends (CUDA; VA-API, Level Zero, NPU) skip only when their hardware is absent, and the skip names
it; with the hardware present, a missing framework (torch on a CUDA machine) or a failing context is a failure.

Use ``need("opencl")`` inside a test or fixture, ``@pytest.mark.needs("opencl", "openvino")`` on a test, or
``need_module("av")`` where ``pytest.importorskip`` was used; ``context(MemoryType.X)`` gives a default context
under the same rules.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

import pytest

ENV = "INTEROP_REQUIRE_TIER_A"


@dataclass(frozen=True)
class Backend:
    """What the tests need to know of a backend: its tier, the third-party modules it imports, the pip extra
    that installs them, and (tier B/C) the hardware whose absence is the only reason to skip."""

    name: str  # BackendUnavailableError.backend spelling (lower case)
    tier: str
    what: str
    modules: tuple[str, ...] = ()
    extra: str | None = None
    hardware: str | None = None  # tier B/C: a key of devices.hardware_devices(), or "cuda"


# One table until interop/backends.py carries a Backend descriptor per memory type (issue 16 point 2); when it
# does, this table should be built from it.
BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("cpu", "A", "the CPU backend"),
    Backend("ffmpeg", "A", "FFmpeg (PyAV)", ("av",), "ffmpeg"),
    Backend("opencv", "A", "OpenCV", ("cv2",), "opencv"),
    Backend("opencv_umat", "A", "OpenCV's OpenCL UMat", ("cv2",), "opencv"),
    Backend("opencl", "A", "OpenCL (pyopencl and Intel's CPU runtime)", ("pyopencl",), "opencl"),
    Backend("usm", "A", "SYCL USM (dpctl)", ("dpctl", "pyopencl"), "sycl"),
    Backend("dma", "A", "DMA-BUF on memfd"),
    Backend("openvino", "A", "OpenVINO (CPU device)", ("openvino",), "openvino"),
    Backend("gst", "A", "GStreamer (PyGObject)", ("gi",), "gst"),
    Backend("cuda", "B", "CUDA", ("torch",), None, "cuda"),
    Backend("vaapi", "C", "VA-API", (), None, "vaapi"),
    Backend("level_zero", "C", "Level Zero", (), None, "level_zero"),
    Backend("npu", "C", "the Intel NPU", ("openvino",), "openvino", "npu"),
)}

#: third-party module -> the backend that needs it (what a failed import of it means)
MODULE_BACKEND = {"av": "ffmpeg", "cv2": "opencv", "pyopencl": "opencl", "dpctl": "usm", "openvino": "openvino",
                  "gi": "gst", "torch": "cuda", "cupy": "cuda"}

#: human name of each tier B/C hardware key, for skip messages
HARDWARE = {"cuda": "an NVIDIA CUDA GPU", "vaapi": "a VA-API render node with a working driver",
            "level_zero": "a Level Zero driver", "npu": "an Intel NPU",
            "dma_heap": "a dma-buf heap (/dev/dma_heap/system)", "udmabuf": "the udmabuf device (/dev/udmabuf)"}

#: spellings of BackendUnavailableError.backend -> our backend name
_ALIASES = {"gstreamer": "gst", "opencv_umat": "opencv_umat", "level zero": "level_zero"}


def strict() -> bool:
    """Whether a missing or broken tier A backend fails (the default) rather than skips."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def backend(name: str) -> Backend:
    key = name.lower()
    key = _ALIASES.get(key, key)
    try:
        return BACKENDS[key]
    except KeyError:
        raise AssertionError(f"tests/support/requirements.py has no backend {name!r}: add it to BACKENDS") from None


def hardware_present(key: str) -> bool:
    from tests.support.devices import cuda_device, hardware_devices

    return cuda_device() is not None if key == "cuda" else bool(hardware_devices().get(key))


def absent_hardware(b: Backend) -> str | None:
    """The name of the tier B/C hardware ``b`` needs when it is absent here, else None."""
    if b.hardware is not None and not hardware_present(b.hardware):
        return HARDWARE.get(b.hardware, b.hardware)
    return None


def unavailable(name: str, why: str) -> NoReturn:
    """A backend cannot be used here: fail or skip as its tier says."""
    b = backend(name)
    hw = absent_hardware(b)
    if hw is not None:
        pytest.skip(f"needs {hw} (tier {b.tier}): none found on this machine ({why})", allow_module_level=True)
    if b.tier != "A":
        pytest.fail(f"{b.what} (tier {b.tier}): its hardware is here but the backend cannot be used: {why}",
                    pytrace=False)
    fix = f"pip install 'interop-video[{b.extra}]' (make install)" if b.extra else "make install"
    msg = f"{b.what} is tier A and must work on every machine, but here: {why}. Fix the install ({fix})"
    if strict():
        pytest.fail(f"{msg}; only {ENV}=0 (a deliberately partial install) makes this a skip", pytrace=False)
    pytest.skip(f"{msg} (skipped: {ENV}=0)", allow_module_level=True)


def need_module(module: str, backend_name: str | None = None) -> ModuleType:
    """``import module``; a failed import (not installed, or broken) is a failure or skip by the tier of the
    backend that needs it. Replaces ``pytest.importorskip`` for every framework of interop."""
    name = backend_name or MODULE_BACKEND.get(module.split(".")[0])
    if name is None:
        raise AssertionError(f"need_module({module!r}): which backend needs it? pass backend_name")
    b = backend(name)
    hw = absent_hardware(b)
    if hw is not None:  # tier B/C without its hardware: the module does not matter
        pytest.skip(f"needs {hw} (tier {b.tier}): none found on this machine", allow_module_level=True)
    try:
        return importlib.import_module(module)
    except Exception as e:  # ImportError, or a broken install raising anything at import
        unavailable(name, f"`import {module}` failed ({type(e).__name__}: {e})")


def lacking_hardware(e: BaseException) -> str | None:
    """The tier B/C hardware whose absence ``e`` (a BackendUnavailableError) reports, or None: any other error,
    a tier A backend refusing included, is a failure, never a skip."""
    from interop.errors import BackendUnavailableError

    if not isinstance(e, BackendUnavailableError):
        return None
    name = _ALIASES.get((e.backend or "").lower(), (e.backend or "").lower())
    b = BACKENDS.get(name)
    if b is not None and b.tier != "A":
        return {"cuda": "CUDA", "vaapi": "VA-API", "level_zero": "Level Zero", "npu": "NPU"}[b.name]
    if name == "usm" and "level zero" in str(e).lower():  # USM over Level Zero: its loader/driver/device is absent
        return "Level Zero"
    return None


def context(memory_type: Any) -> Any:
    """``interop.Context.default(memory_type)`` under the policy: a tier A backend without its default context
    fails (strict) or skips; tier B/C skips naming the absent hardware."""
    from interop import Context, MemoryType
    from interop.errors import BackendUnavailableError

    mt = MemoryType(memory_type) if not isinstance(memory_type, MemoryType) else memory_type
    name = mt.value.lower()
    for module in backend(name).modules:
        need_module(module, name)
    try:
        return Context.default(mt)
    except BackendUnavailableError as e:
        hw = lacking_hardware(e)
        if hw is not None and absent_hardware(backend(name)) is not None:
            pytest.skip(f"needs {hw}: none found on this machine ({e})", allow_module_level=True)
        if hw is not None and backend(name).tier == "A":  # USM over an absent Level Zero: hardware, not install
            pytest.skip(f"needs {hw} (tier C): {e}", allow_module_level=True)
        unavailable(name, f"Context.default({mt.name}) raised {type(e).__name__}: {e}")


#: backend -> how to prove it works, beyond importing its modules
def _probe_dma() -> None:
    from interop.native.dmabuf import memfd_alloc

    os.close(memfd_alloc(4096))


def _probe_gst() -> None:
    from interop.tensors.gst import gst

    gst()


_PROBES = {"dma": _probe_dma, "gst": _probe_gst}
_CONTEXTS = {"opencl": "OPENCL", "opencv_umat": "OPENCV_UMAT", "usm": "USM", "openvino": "OPENVINO",
             "vaapi": "VAAPI", "npu": "NPU", "cuda": "CUDA"}


def need(*names: str) -> None:
    """Require backends by name (``need("opencl", "openvino")``): each one's modules import, its default context
    (where it has one) opens, its probe runs; otherwise fail or skip by the policy in this module's docstring."""
    for name in names:
        b = backend(name)
        hw = absent_hardware(b)
        if hw is not None:
            pytest.skip(f"needs {hw} (tier {b.tier}): none found on this machine", allow_module_level=True)
        for module in b.modules:
            need_module(module, b.name)
        if b.name in _CONTEXTS:
            from interop import MemoryType

            context(MemoryType[_CONTEXTS[b.name]])
        probe = _PROBES.get(b.name)
        if probe is not None:
            try:
                probe()
            except Exception as e:
                unavailable(b.name, f"{type(e).__name__}: {e}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*backends): the backends a test needs, under the one skip policy "
                                       "(tests/support/requirements.py): tier A fails when missing, B/C skips")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        need(*mark.args)
    if "gpu" in item.keywords and hardware_present("cuda"):
        need_module("torch", "cuda")  # a CUDA machine runs the gpu tests: no torch there is a failure
