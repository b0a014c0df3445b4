"""The README's install line, as a user outside the checkout would run it.

Builds the wheel from this checkout, installs it with every extra into a fresh venv outside the checkout from the
wheelhouse that `make install` filled (``--no-index``: nothing is downloaded a second time), installs the default
model with ``interop models install``, then runs ``interop doctor`` and ``interop run`` from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = Path(os.environ.get("INTEROP_WHEELHOUSE", ROOT / ".wheelhouse"))


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    assert WHEELHOUSE.is_dir() and any(WHEELHOUSE.glob("*.whl")), (
        f"no wheelhouse at {WHEELHOUSE}: `make install` fills it (every dependency, downloaded once)")
    tmp = tmp_path_factory.mktemp("install")
    # the user's environment, minus anything pointing at this checkout or its venv
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE), PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(ROOT)], tmp, env)
    wheels = list((tmp / "dist").glob("interop_video-*.whl"))
    assert len(wheels) == 1, f"expected one interop_video wheel, got {wheels}"
    venv.EnvBuilder(with_pip=True).create(tmp / "venv")
    bin_ = tmp / "venv" / "bin"
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    _run([str(bin_ / "python"), "-m", "pip", "install", "-q", f"{wheels[0]}[all]"], tmp, env)
    return bin_, env


def test_doctor_reports_the_missing_model_and_the_fix(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_, env = installed
    p = subprocess.run([str(bin_ / "python"), "-c", "import interop.textdet as t; print(t.model_status())"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # The model may already be in (test order): the row names the path, or the command that installs it.
    assert p.returncode == 0, p.stderr
    assert "interop models install" in p.stdout or ".onnx" in p.stdout


def test_wheel_installs_outside_the_checkout_and_runs(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_, env = installed
    _run([str(bin_ / "interop"), "models", "install"], tmp_path, env)
    doc = json.loads(_run([str(bin_ / "interop"), "doctor", "--json"], tmp_path, env).stdout.splitlines()[-1])
    assert doc["model"]["installed"] is True, doc["model"]
    assert doc.get("problems", []) == [] or all("interop" not in p for p in doc.get("problems", []))
    where = _run([str(bin_ / "python"), "-c", "import interop; print(interop.__file__)"], tmp_path, env).stdout.strip()
    assert str(bin_.parent) in where and str(ROOT) not in where, where
    out = _run([str(bin_ / "interop"), "run", "--frames", "8", "--json", "--no-progress"], tmp_path, env).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["frames"] == 8 and res["copies"] == 0 and res["bytes_copied"] == 0, res


def test_doctor_names_a_foreign_interop_that_shares_the_import_name(tmp_path: Path) -> None:
    # What `pip install interop` leaves behind: the metadata of PyPI's `interop` (another project) on sys.path.
    info = tmp_path / "interop-1.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: interop\nVersion: 1.9.0\n"
                                   "Summary: The Illumina InterOp libraries\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    p = subprocess.run([sys.executable, "-m", "interop", "doctor"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Illumina InterOp" in p.stdout and "pip uninstall interop" in p.stdout, p.stdout[-2000:]
    d = subprocess.run([sys.executable, "-m", "interop", "doctor", "--json"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    problems = json.loads(d.stdout.splitlines()[-1])["problems"]
    assert any("pip uninstall interop" in p for p in problems), problems
