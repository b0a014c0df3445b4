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


def test_routes_unknown_type_is_a_clear_error():
    out = cli("routes", "cpu", "floppy")
    assert out.returncode == 1 and "unknown memory type" in out.stderr


@pytest.mark.parametrize("args", [["--version"]])
def test_version(args):
    out = cli(*args)
    assert out.returncode == 0 and "interop" in out.stdout
