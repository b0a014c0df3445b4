"""The Backend descriptors (interop/backends.py): one per memory type, one spelling of each backend's name, probes
ordered by declared dependencies, pip hints naming the distribution interop-video."""

from __future__ import annotations

import ast
import pathlib

import pytest

import interop
from interop import backends as B
from interop._dist import DISTRIBUTION
from interop.backends import Backend, BackendReport
from interop.errors import BackendUnavailableError, InteropError, UnsupportedTypeError
from interop.types import MemoryType

ROOT = pathlib.Path(interop.__file__).parent

# Memory types whose tensors module does not declare its Backend yet (issue 16 point 2): strict, so this test says
# so the day they land.
PENDING: set[MemoryType] = set()


@pytest.mark.parametrize("mt", [pytest.param(m, marks=pytest.mark.xfail(
    strict=True, reason=f"{m}: its tensors module still registers a bare probe")) if m in PENDING else m
    for m in MemoryType], ids=lambda m: m.value)
def test_every_memory_type_has_one_descriptor(mt: MemoryType) -> None:
    b = B.backend_of(mt)
    assert mt in b.memory_types
    assert b.name == mt.value  # the one spelling: BackendUnavailableError.backend, tests' tables, doctor
    assert b.tier in B.TIERS
    assert (b.tier == "A") == (b.hardware is None), "tier B/C backends name the hardware they need, tier A none"


def test_names_are_unique_and_lookups_agree() -> None:
    names = [b.name for b in B.all_backends()]
    assert len(names) == len(set(names))
    for b in B.all_backends():
        assert B.backend_named(b.name) is b
        for mt in b.memory_types:
            assert B.backend_of(mt) is b
    with pytest.raises(KeyError, match="known"):
        B.backend_named("FFmpeg")  # the display title is not a name
    with pytest.raises(UnsupportedTypeError, match="MemoryType.FFMPEG"):
        B.backend_of("ffmpeg")  # type: ignore[arg-type]


def test_descriptors_refuse_bad_declarations() -> None:
    with pytest.raises(ValueError, match="lower-case"):
        Backend("FFmpeg", "FFmpeg", ())
    with pytest.raises(ValueError, match="tier"):
        Backend("toy", "Toy", (), tier="D")
    with pytest.raises(TypeError, match="tuples"):
        Backend("toy", "Toy", (), requires="av")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declared twice"):
        B.register_backend(Backend("ffmpeg", "Another FFmpeg", ()))
    with pytest.raises(ValueError, match="belongs to backend 'cpu'"):
        B.register_backend(Backend("toy_cpu", "Toy", (MemoryType.CPU,)))
    assert "toy_cpu" not in {b.name for b in B.all_backends()}


def _fake(name: str, mt: MemoryType | None = None, **kw: object) -> Backend:
    return Backend(name, name, (mt,) if mt else (), **kw)  # type: ignore[arg-type]


def test_probe_order_follows_declared_dependencies() -> None:
    cpu, cl, usm = _fake("cpu", MemoryType.CPU), _fake("opencl", MemoryType.OPENCL), _fake("usm", MemoryType.USM)
    # without dependencies: MemoryType's order
    assert [b.name for b in B._ordered([usm, cl, cpu])] == ["cpu", "opencl", "usm"]
    # a declared dependency wins over that order
    cl_after_usm = _fake("opencl", MemoryType.OPENCL, after=("usm",))
    assert [b.name for b in B._ordered([usm, cl_after_usm, cpu])] == ["cpu", "usm", "opencl"]
    # an early backend runs before every backend that is not early
    pin = _fake("pin", early=True)
    assert [b.name for b in B._ordered([usm, cl, cpu, pin])] == ["pin", "cpu", "opencl", "usm"]
    with pytest.raises(ValueError, match="cycle"):
        B._ordered([_fake("a", MemoryType.CPU, after=("b",)), _fake("b", MemoryType.USM, after=("a",))])
    with pytest.raises(ValueError, match="no module declares"):
        B._ordered([_fake("a", MemoryType.CPU, after=("nothing",))])


def test_level_zero_pins_before_sycl_and_opencl() -> None:
    order = [b.name for b in B.all_backends()]
    for user in ("opencv_umat", "opencl", "usm", "openvino", "npu"):
        assert order.index("level_zero") < order.index(user)
    assert order.index("opencv_umat") < order.index("opencl") < order.index("usm")


def test_doctor_rows_in_memory_type_order_and_a_failing_probe_is_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[BackendReport]:
        raise RuntimeError("driver exploded")

    cuda = B.backend_of(MemoryType.CUDA)
    monkeypatch.setitem(B._backends, "cuda", Backend(cuda.name, cuda.title, cuda.memory_types, tier="B",
                                                     probe=broken, hardware=cuda.hardware))
    rows = B.run_probes()
    assert rows[0].name == "CPU"
    row = next(r for r in rows if r.name == "CUDA")
    assert not row.available and row.tier == "B" and "driver exploded" in (row.reason or "")


def test_no_probe_order_numbers_where_a_descriptor_is_declared() -> None:
    for path in sorted((ROOT / "tensors").glob("*.py")):
        calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if "register_backend" in calls:
            assert "register_probe" not in calls, f"{path.name} declares a Backend and still a numbered probe"


def test_missing_module_names_the_backend_and_the_distribution() -> None:
    with pytest.raises(BackendUnavailableError) as e:
        B.require("interop_no_such_module", "ffmpeg")
    assert e.value.backend == "ffmpeg" and e.value.extra == "ffmpeg"
    assert f"pip install '{DISTRIBUTION}[ffmpeg]'" in str(e.value)
    toy = Backend("toy", "Toy", (), extra="toy", requires=("interop_no_such_module",))
    assert toy.missing_module() == toy.missing()
    assert f"pip install '{DISTRIBUTION}[toy]'" in (toy.missing() or "")
    assert not toy.rows()[0].installed


def test_no_pip_hint_names_the_foreign_distribution() -> None:
    # `pip install 'interop[...]'` installs another project (Illumina InterOp): every hint names interop-video.
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(ROOT.rglob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if "pip install 'interop[" in line or 'pip install "interop[' in line]
    assert not offenders, offenders


@pytest.mark.parametrize("mt", [m for m in MemoryType if m is not MemoryType.CPU], ids=lambda m: m.value)
def test_unavailable_default_contexts_name_a_declared_backend(mt: MemoryType) -> None:
    try:
        interop.Context.default(mt)
    except BackendUnavailableError as e:
        assert e.backend in {b.name for b in B.all_backends()}, (e.backend, str(e))
    except InteropError:
        pass  # another refusal (a framework's own error): not about the backend's name


def test_edge_needs_derive_what_mappers_declare() -> None:
    from interop.mapper import registered

    # edges that legitimately need other modules or hardware than their two backends: USM memory may be Level Zero's
    # (no dpctl), a dma-buf import into Level Zero is tier C, an OpenCV UMat <- OpenCL edge needs the OpenCL runtime
    overrides = {"usm_to_cpu", "usm_to_npu", "usm_to_opencl", "dma_to_usm", "usm_to_dma", "opencl_to_opencv_umat"}
    checked = 0
    for m in registered().values():
        if m.src in PENDING or m.dst in PENDING:
            continue
        own = {k for k in ("requires", "extra", "tier") if k in m.__dict__}
        if m.name in overrides:
            assert own, f"{m.name} is listed as an override but restates nothing"
            continue
        # every other mapper derives them: no literal on the class, and the values are the descriptors'
        assert not own, f"{m.name} restates {sorted(own)}: the backends' descriptors say it (edge_needs)"
        n = B.edge_needs(m.src, m.dst)
        assert (m.requires, m.extra, m.tier) == (n.requires, n.extra, n.tier), m.name
        checked += 1
    assert checked >= 20


def test_mapper_overrides_beat_the_derived_needs() -> None:
    from interop.mapper import registered

    by_name = {m.name: m for m in registered().values()}
    # Level Zero USM needs no dpctl, and a dma-buf import into Level Zero needs Level Zero hardware
    assert "dpctl" not in by_name["usm_to_cpu"].requires and "dpctl" in B.edge_needs(MemoryType.USM, MemoryType.CPU).requires
    assert by_name["dma_to_usm"].tier == "C" and B.edge_needs(MemoryType.DMA, MemoryType.USM).tier == "A"
    assert by_name["opencl_to_opencv_umat"].extra == "opencl"
    assert sorted(by_name["opencl_to_opencv_umat"].requires) == ["cv2", "pyopencl"]


def test_missing_module_names_the_declared_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from interop.errors import BackendUnavailableError
    from interop.mapper import registered

    m = next(m for m in registered().values() if m.name == "ffmpeg_to_openvino")
    monkeypatch.setattr(m, "_ready", False)
    monkeypatch.setattr("interop.mapper.module_available", lambda mod: mod != "openvino")
    why = m.missing()
    assert why is not None and "openvino" in why and "interop-video[openvino]" in why
    with pytest.raises(BackendUnavailableError) as e:
        m()._require()
    assert e.value.backend == B.backend_of(MemoryType.OPENVINO).name and e.value.extra == "openvino"


def test_version_is_declared_once() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+: the stdlib parser
    meta = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "interop.__version__"}
    assert isinstance(interop.__version__, str) and interop.__version__
