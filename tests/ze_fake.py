"""Runs Level Zero test cases in a child process whose real loader (libze_loader.so.1) loads our fake driver.

The loader picks its drivers once per process (ZE_ENABLE_ALT_DRIVERS is read at the first zeInit), and the
OpenVINO NPU plugin loaded in the test process would see the fake NPU too, so the cases run in one child
process per test module: each ``case_*`` function of a module becomes a ``test_*`` that reports the child's
outcome (traceback on failure, a skip with its reason). Usage at the end of a test module:

    globals().update(ze_fake.tests_for(globals()))
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "fakes" / "build" / "ze"
FAKE_DRIVER = BUILD / "libze_fake_driver.so.1"
HEADERS = Path("/usr/include/level_zero/ze_api.h")


def _loader_present() -> bool:
    import ctypes.util

    return any(Path(d, "libze_loader.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")) \
        or bool(ctypes.util.find_library("ze_loader"))


@functools.cache
def _build() -> str:
    """Run tests/prepare.d/fakes_ze.sh (idempotent) without apt: make test installed the packages already.
    Returns the script's output."""
    proc = subprocess.run(["bash", str(ROOT / "tests" / "prepare.d" / "fakes_ze.sh")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "INTEROP_FAKES_NO_APT": "1"})
    return f"exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"


def missing() -> str | None:
    """Why the fake cannot run here (naming the missing Debian packages), or None. Builds it when it can;
    when nothing is missing and it still did not build, the calling test fails with the build script's output."""
    output = _build() if not FAKE_DRIVER.exists() else ""
    need = [pkg for pkg, ok in (("libze-dev", HEADERS.exists()), ("libze1", _loader_present()),
                                ("gcc", shutil.which("gcc") is not None)) if not ok]
    if need:
        return f"the Level Zero fake needs the Debian packages: {' '.join(need)} (apt install {' '.join(need)})"
    if not FAKE_DRIVER.exists():
        pytest.fail("the Level Zero fake driver did not build although its packages are installed; "
                    f"tests/prepare.d/fakes_ze.sh said:\n{output}", pytrace=False)
    return None


def fake_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ZE_ENABLE_ALT_DRIVERS"] = str(FAKE_DRIVER)
    env.pop("INTEROP_ZE_LOADER", None)
    env.update(extra)
    return env


_results: dict[str, dict[str, Any]] = {}


def _run_module(path: str, names: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "tests.ze_fake", path, *names], cwd=ROOT, env=fake_env(),
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {n: {"status": "error", "detail": f"child exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"}
                for n in names}
    return json.loads(lines[-1])


def isolated(fn: Callable[[], None]) -> Callable[[], None]:
    """Run this case in a child process of its own (it leaves the loader in a state others must not see)."""
    fn._ze_isolated = True  # type: ignore[attr-defined]
    return fn


def tests_for(namespace: dict[str, Any]) -> dict[str, Callable[[], None]]:
    """``test_<x>`` functions for the module's ``case_<x>`` functions (call it at the end of the module)."""
    path = namespace["__file__"]
    names = sorted(n for n, f in namespace.items() if n.startswith("case_") and callable(f))
    shared = [n for n in names if not getattr(namespace[n], "_ze_isolated", False)]
    out = {}
    for name in names:
        def test(name: str = name) -> None:
            why = missing()
            if why:
                pytest.skip(why)
            key = path if name in shared else f"{path}::{name}"
            if key not in _results:
                _results[key] = _run_module(path, shared if name in shared else [name])
            res = _results[key].get(name, {"status": "error", "detail": "the child did not run this case"})
            if res["status"] == "skip":
                pytest.skip(res["detail"])
            if res["status"] != "ok":
                pytest.fail(f"{name} failed in the child process (fake Level Zero driver):\n{res['detail']}", pytrace=False)
        test.__name__ = "test_" + name[len("case_"):]
        test.__doc__ = namespace[name].__doc__
        out[test.__name__] = test
    return out


def _main(argv: list[str]) -> int:
    path, names = argv[0], argv[1:]
    spec = importlib.util.spec_from_file_location("ze_cases_" + Path(path).stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    results: dict[str, Any] = {}
    for name in names:
        try:
            getattr(mod, name)()
            results[name] = {"status": "ok", "detail": ""}
        except pytest.skip.Exception as e:
            results[name] = {"status": "skip", "detail": str(e)}
        except BaseException:
            results[name] = {"status": "fail", "detail": traceback.format_exc()}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
