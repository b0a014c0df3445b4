"""The CLI: doctor (table and JSON), routes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interop", *args], capture_output=True, text=True, timeout=timeout)


def test_doctor_json_is_one_valid_line():
    out = cli("doctor", "--json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    names = [b["name"] for b in data["backends"]]
    assert names[0] == "CPU"
    for b in data["backends"]:
        assert set(b) >= {"name", "installed", "available", "version", "devices", "tier", "reason"}
        if not b["available"]:
            assert b["reason"], b  # every unavailable backend says why


def test_doctor_table():
    out = cli("doctor")
    assert out.returncode == 0, out.stderr
    assert "backend" in out.stdout and "CPU" in out.stdout


def test_routes_graph_and_chain():
    out = cli("routes")
    assert out.returncode == 0 and "mappers" in out.stdout
    out = cli("routes", "cpu", "cpu")
    assert out.returncode == 0 and "identity" in out.stdout
    # a step that may copy decides per input: its count is said to be the worst case, not what every input costs
    out = cli("routes", "ffmpeg", "openvino")
    assert out.returncode == 0 and "may copy: at most 1 copy" in out.stdout, out.stdout
    assert "[here: " not in out.stdout and "[here, worst case: " in out.stdout, out.stdout


def test_routes_unknown_type_is_a_clear_error():
    out = cli("routes", "cpu", "floppy")
    assert out.returncode == 1 and "unknown memory type" in out.stderr


@pytest.mark.parametrize("args", [["--version"]])
def test_version(args):
    out = cli(*args)
    assert out.returncode == 0 and "interop" in out.stdout


# `interop bench` (more in tests/test_bench_cli.py)

def _benchmark_modules() -> set[str]:
    import pkgutil

    import interop.benchmarks as pkg

    return {m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")}


BENCHMARKS = _benchmark_modules()  # every module of interop/benchmarks is a benchmark --help must list


def test_bench_help_lists_every_benchmark_with_a_summary():
    out = cli("bench", "--help")
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split("benchmarks (--only", 1)[1].splitlines()[1:]
    rows = {line.split()[0]: line.split(None, 1)[1] for line in listed if line.strip()}
    assert set(rows) == set(BENCHMARKS)
    assert all(len(summary) > 20 for summary in rows.values()), rows


def test_bench_unknown_name_is_one_line_naming_the_known_ones():
    out = cli("bench", "--only", "nonsense")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "'nonsense'" in lines[0] and all(name in lines[0] for name in BENCHMARKS)
    assert out.stdout == ""


@pytest.mark.parametrize("reps", ["0", "-2", "two"])
def test_bench_reps_below_one_is_a_usage_error(reps):
    out = cli("bench", "--only", "handoff", "--reps", reps)
    assert out.returncode == 2 and "--reps" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stdout == ""


def test_bench_only_dma_json_is_one_line():
    out = cli("bench", "--only", "dma", "--quick", "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert {r["benchmark"] for r in data["results"]} == {"dma"} and data["skipped"] == []
    assert {"map+release", "hand-off", "socket"} <= {w for r in data["results"] for w in r["case"].split()}
    assert all(r["value"] > 0 for r in data["results"])
    assert data["machine"] and data["date"] and data["command"] == "interop bench --only dma --quick"


# `interop routes` marks the steps that cannot run on this machine, with why (issue 17)


def _unavailable() -> dict[str, str]:
    data = json.loads(cli("doctor", "--json").stdout)
    return {b["name"]: b["reason"] for b in data["backends"] if not b["available"]}


def test_routes_marks_steps_whose_device_is_missing_here():
    gone = _unavailable()
    if "VA-API" not in gone or "NPU (OpenVINO)" not in gone:
        pytest.skip("this machine has VA-API and an NPU: nothing to mark on VAAPI -> NPU")
    out = cli("routes", "vaapi", "npu")
    assert out.returncode == 0, out.stderr
    steps = [ln for ln in out.stdout.splitlines() if "->" in ln and ln.startswith("  ")]
    assert steps and all("[cannot run here: " in ln for ln in steps), out.stdout
    assert gone["VA-API"] in out.stdout and gone["NPU (OpenVINO)"] in out.stdout  # doctor's reason, word for word


def test_routes_graph_marks_every_edge_touching_a_missing_backend():
    gone = _unavailable()
    names = {"VA-API": "VAAPI", "NPU (OpenVINO)": "NPU", "CUDA": "CUDA"}
    missing_types = {names[n] for n in gone if n in names}
    if not missing_types:
        pytest.skip("VA-API, NPU and CUDA all run here")
    out = cli("routes")
    assert out.returncode == 0, out.stderr
    edges = [ln.split() for ln in out.stdout.splitlines()[1:]]
    touching = [e for e in edges if e[0] in missing_types or e[2] in missing_types]
    assert touching and all("[cannot" in e for e in touching), out.stdout
    marked = sum("[cannot" in e for e in edges)
    assert f"{marked} cannot run here" in out.stdout.splitlines()[0]
    plain = [e for e in edges if "[cannot" not in e]
    assert all(e[0] not in missing_types and e[2] not in missing_types for e in plain)


def test_run_help_names_the_gstreamer_input() -> None:
    out = cli("run", "--help")
    assert out.returncode == 0 and "gst:PIPELINE" in out.stdout


# `interop run`'s progress bar is the CLI's (interop/cli_run.py), fed by pipeline.run's on_progress (issue 16)


def test_run_progress_bar_is_drawn_by_the_cli_from_the_runs_counts(capsys):
    pytest.importorskip("tqdm")
    from interop.cli_run import _Bar

    bar = _Bar()
    for done in range(4):  # run() calls on_progress(0, total) first, then once per frame's result
        bar(done, 3)
    assert (bar._bar.n, bar._bar.total) == (3, 3)  # drawn at most every 0.1 s: the count is the bar's own
    bar.close()
    out, err = capsys.readouterr()
    assert out == ""  # the bar never touches stdout (--json keeps it for the one JSON line)
    assert "interop run:   0%|" in err and "0/3" in err
