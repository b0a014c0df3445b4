"""Adding a backend takes one MemoryType member, one descriptor, one tensors module and one mapper module
(docs/architecture.md, "Adding a backend"), and no other module names it.

An Enum cannot gain a member at runtime, so the test copies the package to a temporary folder, adds the member
line to the copy's types.py and two new files (tensors/toy.py with the descriptor, mappers/toy_to_cpu.py), and
runs the copy in a child interpreter: routes, route(), map(), wrap(), doctor and Context.default see the toy
backend without any other edit.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import interop

SRC = pathlib.Path(interop.__file__).parent

MEMBER = '    TOY = "toy"\n'

TENSOR_MODULE = '''
"""Toy tensors: host memory in a ToyBuffer (a bytearray with a shape), for the architecture test."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import Backend, BackendReport, Wrapper, class_in, register_backend, register_wrapper
from ..context import Context, register_default_context
from ..info import TensorInfo
from ..tensor import Tensor
from ..types import MemoryType


class ToyBuffer:
    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.data = bytearray(int(np.prod(shape)))


class ToyContext(Context):
    memory_type = MemoryType.TOY

    def key(self) -> Any:
        return "toy"


TOY_CONTEXT = ToyContext(device="toy")
register_default_context(MemoryType.TOY, lambda: TOY_CONTEXT)


class ToyTensor(Tensor):
    memory_type = MemoryType.TOY

    def __init__(self, buf: ToyBuffer):
        super().__init__(buf, TensorInfo(buf.shape, np.uint8), context=TOY_CONTEXT)

    def array(self) -> np.ndarray:
        return np.frombuffer(self.native.data, np.uint8).reshape(self.native.shape)


register_wrapper(Wrapper("ToyBuffer", lambda c: class_in(c, __name__, "ToyBuffer"),
                         lambda obj, **kw: ToyTensor(obj)))


def _probe() -> list[BackendReport]:
    return [BackendReport(BACKEND.title, True, "toy 1.0", ["toy device"], BACKEND.tier)]


BACKEND = register_backend(Backend("toy", "Toy", (MemoryType.TOY,), tier="A", probe=_probe))
'''

MAPPER_MODULE = '''
"""TOY -> CPU: a numpy view of the toy buffer, zero-copy."""

from __future__ import annotations

from ..mapper import MemoryMapper, register
from ..tensor import Tensor
from ..tensors.cpu import CPUTensor
from ..tensors.toy import ToyTensor
from ..types import AccessMode, MemoryType


@register
class ToyToCPU(MemoryMapper):
    src = MemoryType.TOY
    dst = MemoryType.CPU
    zero_copy = True

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        assert isinstance(t, ToyTensor)
        return CPUTensor(t.array(), parent=t, writable=mode.writes)
'''

CHILD = '''
import json, sys
import numpy as np
import interop
from interop import MemoryType
from interop.backends import all_backends, backend_of, run_probes
from interop.tensors.toy import ToyBuffer

out = {"file": interop.__file__}
out["backend"] = [backend_of(MemoryType.TOY).name, backend_of(MemoryType.TOY).tier]
out["in_all"] = "toy" in [b.name for b in all_backends()]
chain = interop.route(MemoryType.TOY, MemoryType.CPU)
out["route"] = [m.name for m in chain.mappers]
out["route_via_cpu"] = [m.name for m in interop.route(MemoryType.TOY, MemoryType.FFMPEG, allow_copy=True).mappers]
buf = ToyBuffer((2, 3))
buf.data[:] = bytes(range(6))
t = interop.wrap(buf)
out["wrapped"] = t.memory_type.value
with interop.copy_meter() as meter:
    cpu = interop.map(t, MemoryType.CPU)
out["mapped"] = np.asarray(cpu).tolist()
out["copies"] = meter.copies
out["context"] = interop.Context.default(MemoryType.TOY).device
out["doctor"] = [r.name for r in run_probes() if r.available]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("toy")
    pkg = root / "interop"
    shutil.copytree(SRC, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    # the package as it was copied, to compare with (others may edit the working tree meanwhile)
    shutil.copytree(pkg, tmp_path_factory.mktemp("pristine") / "interop")
    types_py = pkg / "types.py"
    text = types_py.read_text()
    anchor = '    CUDA = "cuda"\n'
    assert anchor in text, "types.py changed shape: update the member anchor of this test"
    types_py.write_text(text.replace(anchor, anchor + MEMBER, 1))
    (pkg / "tensors" / "toy.py").write_text(textwrap.dedent(TENSOR_MODULE).lstrip())
    (pkg / "mappers" / "toy_to_cpu.py").write_text(textwrap.dedent(MAPPER_MODULE).lstrip())
    return root


def _run(root: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # -P would drop the script folder too; the copy must win over the editable install of the real package
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, env=env, cwd=root)


def test_toy_backend_is_routed_mapped_and_reported(toy_package: pathlib.Path) -> None:
    proc = _run(toy_package, "-c", CHILD)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(toy_package)), "the child imported the real package, not the copy"
    assert out["backend"] == ["toy", "A"] and out["in_all"]
    assert out["route"] == ["toy_to_cpu"]
    assert out["route_via_cpu"][0] == "toy_to_cpu" and len(out["route_via_cpu"]) == 2
    assert out["wrapped"] == "toy"
    assert out["mapped"] == [[0, 1, 2], [3, 4, 5]] and out["copies"] == 0
    assert out["context"] == "toy"
    assert "Toy" in out["doctor"]


def test_toy_backend_appears_in_the_cli(toy_package: pathlib.Path) -> None:
    routes = _run(toy_package, "-m", "interop", "routes", "toy", "cpu")
    assert routes.returncode == 0, routes.stderr[-4000:]
    assert "toy_to_cpu" in routes.stdout
    doctor = _run(toy_package, "-m", "interop", "doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr[-4000:]
    rows = {b["name"]: b for b in json.loads(doctor.stdout.strip().splitlines()[-1])["backends"]}
    assert rows["Toy"]["available"] and rows["Toy"]["tier"] == "A"


def test_no_other_module_names_the_toy_backend(toy_package: pathlib.Path) -> None:
    # The copy differs from the package by the member line and the two new files: nothing else had to change.
    copy = toy_package / "interop"
    pristine = next(p for p in toy_package.parent.glob("pristine*/interop"))
    added = {p.relative_to(copy).as_posix() for p in copy.rglob("*.py")} - \
        {p.relative_to(pristine).as_posix() for p in pristine.rglob("*.py")}
    assert added == {"tensors/toy.py", "mappers/toy_to_cpu.py"}
    changed = sorted(p.relative_to(pristine).as_posix() for p in pristine.rglob("*.py")
                     if (copy / p.relative_to(pristine)).read_text() != p.read_text())
    assert changed == ["types.py"]
    naming = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*.py")
                    if "toy" in p.read_text().lower() and p.name not in ("toy.py", "toy_to_cpu.py"))
    assert naming == ["types.py"]
