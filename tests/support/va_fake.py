"""The VA-API conformance fake: Xvfb + the fake driver (tests/fakes/va) loaded by the real libva.so.2.

Its fixtures (fake_va, va_display, va_ctx) reach every test: tests/conftest.py registers it in pytest_plugins. They skip,
naming what is missing, when the fake cannot be built or run here.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import random
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "fakes" / "build"
DRIVER = BUILD / "interopfake_drv_video.so"
LAYOUT = BUILD / "va_layout"
DRIVER_NAME = "interopfake"
PACKAGES = "libva-dev libva2 libva-drm2 libva-x11-2 xvfb gcc"


def build() -> str | None:
    """Build the fake (tests/prepare.d/fakes_va.sh, idempotent); None when ready, else the missing packages.
    Fails the calling test (with the script's output) when nothing is missing and the build still failed."""
    # make test ran the script (and apt) already; here it only rebuilds what changed, never installs
    proc = subprocess.run(["bash", str(ROOT / "tests" / "prepare.d" / "fakes_va.sh")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "INTEROP_FAKES_NO_APT": "1"})
    missing = [p for p, ok in (("libva-dev", os.path.exists("/usr/include/va/va_backend.h")),
                               ("xvfb", shutil.which("Xvfb") is not None), ("gcc", shutil.which("gcc") is not None))
               if not ok]
    for lib, pkg in (("libva.so.2", "libva2"), ("libva-drm.so.2", "libva-drm2"), ("libva-x11.so.2", "libva-x11-2")):
        try:
            ctypes.CDLL(lib)
        except OSError:
            missing.append(pkg)
    if missing:
        return f"the VA-API fake needs the Debian packages {' '.join(missing)} (apt-get install {PACKAGES})"
    if not DRIVER.exists() or not LAYOUT.exists():
        # every package is there: a build that failed is a failure, not a skip
        pytest.fail(f"the VA-API fake did not build into {BUILD} although its packages are installed; "
                    f"tests/prepare.d/fakes_va.sh said (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}",
                    pytrace=False)
    return None


class FakeVA:
    """A running Xvfb; ``open()`` gives a VA display on it whose driver is the fake."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.display = ""
        self._opened: list[Any] = []
        self.log: Any = None

    def start(self) -> None:
        # A random high display number: X sockets are also abstract (per network namespace), so a display another
        # process holds may be invisible in /tmp and still answer; a collision is retried.
        last = ""
        for _ in range(8):
            num = random.randrange(200, 30000)
            r, w = os.pipe()
            self.log = tempfile.NamedTemporaryFile(prefix="interop-xvfb-", suffix=".log", delete=False)
            self.proc = subprocess.Popen(["Xvfb", f":{num}", "-displayfd", str(w), "-nolisten", "tcp", "-screen", "0",
                                          "64x64x24"], pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=self.log)
            os.close(w)
            data = b""
            while not data.endswith(b"\n"):  # Xvfb writes the number and the newline separately: read both
                ready, _, _ = select.select([r], [], [], 30)
                chunk = os.read(r, 64) if ready else b""
                if not chunk:
                    break
                data += chunk
            os.close(r)
            if data.strip() == str(num).encode() and self.proc.poll() is None:
                self.display = f":{num}"
                return
            last = open(self.log.name).read()[-500:]
            self.stop()
        raise RuntimeError(f"Xvfb did not start: {last}")

    def stop(self) -> None:
        # every display goes before the X server: Xlib exits the process on a lost connection
        for d in self._opened:
            d.close()
        self._opened.clear()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        if self.log is not None:
            os.unlink(self.log.name)
            self.log = None

    def open(self) -> Any:
        from interop.errors import BackendUnavailableError
        from interop.native import libva

        # libva reads these in vaInitialize only: set them around it, so a hardware test in the same run gets
        # the machine's real driver
        saved = {k: os.environ.get(k) for k in ("LIBVA_DRIVER_NAME", "LIBVA_DRIVERS_PATH", "LIBVA_MESSAGING_LEVEL")}
        os.environ.update(LIBVA_DRIVER_NAME=DRIVER_NAME, LIBVA_DRIVERS_PATH=str(BUILD), LIBVA_MESSAGING_LEVEL="0")
        try:
            for attempt in range(20):
                try:
                    d = libva.Display.open_x11(self.display)
                    break
                except BackendUnavailableError:
                    # XOpenDisplay fails now and then on a loaded machine while Xvfb runs fine; a retry connects
                    if attempt == 19 or self.proc is None or self.proc.poll() is not None:
                        raise
                    time.sleep(0.05 * (attempt + 1))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._opened.append(d)
        return d

    @property
    def hooks(self) -> ctypes.CDLL:
        """The fake driver's test hooks (the very library libva loaded: same handle, same state)."""
        lib = ctypes.CDLL(str(DRIVER))
        lib.fakeva_plane_address.restype = ctypes.c_void_p
        lib.fakeva_plane_address.argtypes = [ctypes.c_uint32, ctypes.c_uint]
        return lib

    def info(self, surface: int) -> dict[str, Any]:
        out = SurfaceInfo()
        assert self.hooks.fakeva_surface_info_get(surface, ctypes.byref(out)) == 0, f"no fake surface {surface}"
        return {name: (list(getattr(out, name)) if isinstance(getattr(out, name), ctypes.Array) else getattr(out, name))
                for name, _ in SurfaceInfo._fields_}

    def live(self) -> tuple[int, int, int]:
        s, i, b = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self.hooks.fakeva_live(ctypes.byref(s), ctypes.byref(i), ctypes.byref(b))
        return s.value, i.value, b.value

    def plane(self, surface: int, plane: int, nbytes: int) -> Any:
        """A numpy view of the fake's own mapping of a plane (behind the back of the code under test)."""
        import numpy as np

        addr = self.hooks.fakeva_plane_address(surface, plane)
        assert addr, f"no plane {plane} on fake surface {surface}"
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


class SurfaceInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("fourcc", "width", "height", "mem_type", "num_objects", "num_planes",
                                               "syncs", "exports", "export_flags", "images")] + [
        ("modifier", ctypes.c_uint64 * 4), ("object_size", ctypes.c_uint32 * 4), ("offset", ctypes.c_uint32 * 4),
        ("pitch", ctypes.c_uint32 * 4), ("plane_object", ctypes.c_uint32 * 4)]


_shared: FakeVA | None = None


@pytest.fixture(scope="session")
def fake_va() -> Iterator[FakeVA]:
    """One Xvfb for the whole run (each test module that imports this fixture shares it)."""
    global _shared
    why = build()
    if why:
        pytest.skip(why)
    if _shared is None or _shared.proc is None:
        fake = FakeVA()
        try:
            fake.start()
        except (OSError, RuntimeError) as e:
            pytest.skip(f"the VA-API fake needs Xvfb to run ({e})")
        _shared = fake
    yield _shared
    _shared.stop()  # at the end of the session; idempotent


@pytest.fixture
def va_display(fake_va: FakeVA) -> Iterator[Any]:
    """A fresh initialised VA display on the fake driver, terminated after the test."""
    d = fake_va.open()
    yield d
    d.close()


@pytest.fixture
def va_ctx(fake_va: FakeVA) -> Iterator[Any]:
    """A VAContext over the fake, installed as the default VAAPI context for the test."""
    from interop.context import set_default_context
    from interop.tensors.vaapi import VAContext
    from interop.types import MemoryType

    ctx = VAContext(fake_va.open())
    set_default_context(MemoryType.VAAPI, ctx)
    yield ctx
    set_default_context(MemoryType.VAAPI, None)
    ctx.close()
