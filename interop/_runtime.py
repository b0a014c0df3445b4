"""Process set-up that must happen before any backend framework is imported (an ICD list or a TBB loaded later is
ignored: the first one loaded wins).

* A private OpenCL ICD directory (``OCL_ICD_VENDORS``) naming the Intel CPU runtime shipped in the
  environment (``intel-opencl-rt``), plus the system's own ICDs and NVIDIA's, so no platform disappears.
  The wheel's own .icd file holds an unexpanded placeholder path, so we write our own.
* oneTBB 2023 from the ``tbb`` wheel loaded before OpenVINO can load its bundled TBB 2021 under the same
  soname: the Intel OpenCL runtime needs the newer one and OpenVINO runs on it unchanged.
* The runtime libraries Intel's OpenCL loader needs (it has no RUNPATH) loaded by absolute path, and
  OpenCV told which loader and device to use, since LD_LIBRARY_PATH cannot change inside a process.

Idempotent, silent where the runtime is not installed, and it respects a user's own OCL_ICD_VENDORS.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

log = logging.getLogger("interop")

_PRELOADS = ("libtbb.so.12", "libtbbmalloc.so.2", "libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so",
             "libOpenCL.so.1")
_NVIDIA_ICD_PATHS = ("/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1", "/usr/lib64/libnvidia-opencl.so.1",
                     "/usr/local/nvidia/lib64/libnvidia-opencl.so.1", "/usr/lib/libnvidia-opencl.so.1")


class InteropRuntimeWarning(RuntimeWarning):
    """The process was set up in an order interop cannot repair (e.g. openvino imported first)."""


@dataclass
class RuntimeState:
    lib_dir: str | None = None
    icd_dir: str | None = None
    icds: dict[str, str] = field(default_factory=dict)
    preloaded: list[str] = field(default_factory=list)
    user_icd_vendors: str | None = None
    tbb_path: str | None = None
    problems: list[str] = field(default_factory=list)


STATE = RuntimeState()
_done = False


def _lib_dirs() -> list[str]:
    dirs = [os.path.join(sys.prefix, "lib")]
    base = os.path.join(sys.base_prefix, "lib")
    if base not in dirs:
        dirs.append(base)
    return dirs


def _find_intel_lib_dir() -> str | None:
    for d in _lib_dirs():
        if os.path.exists(os.path.join(d, "libintelocl.so")):
            return d
    return None


def loaded_tbb() -> str | None:
    """Path of the libtbb.so.12 mapped into this process, if any."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libtbb.so.12" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


def _system_icds() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(glob.glob("/etc/OpenCL/vendors/*.icd")):
        try:
            with open(path) as f:
                lib = f.read().strip()
        except OSError:
            continue
        if lib:
            out["system-" + os.path.basename(path)[:-4]] = lib
    for p in _NVIDIA_ICD_PATHS:
        if os.path.exists(p) and not any("nvidia" in v for v in out.values()):
            out["nvidia"] = p
            break
    return out


def _write_icd_dir(libs: dict[str, str]) -> str:
    d = os.path.join(tempfile.gettempdir(), f"interop-icd-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):  # exact contents: a stale .icd could name a runtime that is gone
        if old.endswith(".icd") and old[:-4] not in libs:
            try:
                os.unlink(os.path.join(d, old))
            except OSError:
                pass
    for name, lib in libs.items():
        path = os.path.join(d, name + ".icd")
        want = lib + "\n"
        try:
            with open(path) as f:
                if f.read() == want:
                    continue
        except OSError:
            pass
        tmp = f"{path}.{os.getpid()}.tmp"  # atomic, so parallel processes never read half a file
        with open(tmp, "w") as f:
            f.write(want)
        os.replace(tmp, path)
    return d


def _user_icd_vendors_works(value: str) -> bool:
    if os.path.isdir(value):
        return any(n.endswith(".icd") for n in os.listdir(value))
    return os.path.isfile(value)


def _global_libgcc() -> None:
    # GModule (GStreamer through PyGObject) opens its libraries and their dependencies (libz, libdw, cairo)
    # RTLD_GLOBAL. With any of those global before libgcc_s, Intel's CPU OpenCL runtime, started later in the same
    # process, aborts; with libgcc_s global first it does not. So it goes first, before any backend loads.
    try:
        ctypes.CDLL("libgcc_s.so.1", mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError:  # no libgcc_s (not glibc): nothing to order
        pass


def setup() -> RuntimeState:
    """Run the set-up once. Safe to call again."""
    global _done
    if _done:
        return STATE
    _done = True
    if not sys.platform.startswith("linux"):
        return STATE
    _global_libgcc()
    lib = _find_intel_lib_dir()
    STATE.lib_dir = lib
    if "openvino" in sys.modules:
        tbb = loaded_tbb()
        STATE.tbb_path = tbb
        if lib is not None and tbb is not None and os.path.dirname(os.path.realpath(tbb)) != os.path.realpath(lib):
            msg = ("openvino was imported before interop, so its bundled TBB 2021 is loaded and Intel's OpenCL CPU "
                   "runtime cannot start in this process (pyopencl, dpctl and OpenCV will see no OpenCL platform). "
                   "Fix: `import interop` before `import openvino`, or start Python with "
                   f"LD_PRELOAD={os.path.join(lib, 'libtbb.so.12')}")
            STATE.problems.append(msg)
            warnings.warn(msg, InteropRuntimeWarning, stacklevel=3)
            log.debug(msg)  # not a warning: with no logging set up, Python prints warnings on stderr a second time
    if lib is None:
        return STATE  # no Intel runtime in this environment: nothing to set up
    user = os.environ.get("OCL_ICD_VENDORS")
    ours_prefix = os.path.join(tempfile.gettempdir(), "interop-icd-")
    if user and not user.startswith(ours_prefix) and _user_icd_vendors_works(user):
        STATE.user_icd_vendors = user
        log.info("keeping the user's OCL_ICD_VENDORS=%s", user)
    else:
        icds = {"intel-cpu": os.path.join(lib, "libintelocl.so")}
        icds.update(_system_icds())
        try:
            STATE.icd_dir = _write_icd_dir(icds)
            STATE.icds = icds
            os.environ["OCL_ICD_VENDORS"] = STATE.icd_dir
        except OSError as e:
            STATE.problems.append(f"cannot write the OpenCL ICD directory: {e}")
            log.warning("cannot write the OpenCL ICD directory: %s", e)
    if "openvino" not in sys.modules:
        for name in _PRELOADS:
            path = os.path.join(lib, name)
            if not os.path.exists(path):
                continue
            try:
                ctypes.CDLL(path, mode=os.RTLD_NOW)  # RTLD_LOCAL: do not interpose pyopencl's own loader
                STATE.preloaded.append(path)
            except OSError as e:
                STATE.problems.append(f"cannot preload {path}: {e}")
                log.warning("cannot preload %s: %s", path, e)
        STATE.tbb_path = loaded_tbb()
    loader = os.path.join(lib, "libOpenCL.so.1")
    if os.path.exists(loader):
        os.environ.setdefault("OPENCV_OPENCL_RUNTIME", loader)
        # not ":CPU:", which would pick PoCL first when it is installed
        os.environ.setdefault("OPENCV_OPENCL_DEVICE", "Intel:CPU:")
    return STATE
