"""interop.wrap()/map() as a type checker sees them: a numpy array or Tensor types as a Tensor, a Frame or a decoded
video frame as a Frame, whether PyAV's own types are there or not."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_wrap_and_map_of_a_numpy_array_type_as_a_tensor_without_pyavs_types(tmp_path: Path) -> None:
    """api.py imports av.VideoFrame for its overloads under TYPE_CHECKING. Where PyAV is not installed (it is an
    extra) or ships no stubs, pyproject's ignore_missing_imports makes VideoFrame Any, and the overload taking a
    VideoFrame (wrap's third, map's first: ``Frame | VideoFrame``) matches every argument before the ndarray/Tensor
    ones: wrap(ndarray) and map(tensor) are typed Frame, and mypy on interop itself reports overload-cannot-match."""
    import os
    import subprocess
    import sys

    pytest.importorskip("mypy")
    stub = tmp_path / "stubs" / "av"
    stub.mkdir(parents=True)
    (stub / "__init__.pyi").write_text("from typing import Any\ndef __getattr__(name: str) -> Any: ...\n")
    user = tmp_path / "user.py"
    user.write_text("import numpy as np\nimport interop\nfrom interop import MemoryType\n"
                    "t = interop.wrap(np.zeros((4, 4), np.uint8))\nreveal_type(t)\n"
                    "reveal_type(interop.map(t, MemoryType.CPU))\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                          "--config-file", str(root / "pyproject.toml"), str(user)],
                         cwd=root, env={**os.environ, "MYPYPATH": str(tmp_path / "stubs")},
                         capture_output=True, text=True, timeout=300).stdout
    revealed = [line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed type is" in line]
    assert revealed == ['"interop.tensor.Tensor"', '"interop.tensor.Tensor"'], out
