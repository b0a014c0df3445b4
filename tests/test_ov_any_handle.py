"""Why NPU handles go to OpenVINO as hex strings (no C helper): checked with OpenVINO's own ov::Any.

A C++ program built against the openvino wheel's headers and libopenvino shows that ``as<void*>()`` refuses the
int64 that a Python int becomes, parses a hex string into the pointer, and prints a void* as hex (which is how
``parse_handle`` reads ``get_params()["L0_CONTEXT"]``), and that the CPU_VA property map interop sends converts
the way the NPU plugin's remote context reads it (``ov::Any(...).as<ov::intel_npu::MemType>()`` / ``as<void*>()``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from interop.tensors.npu import handle_value, parse_handle
from tests.support.requirements import need_module

SRC = Path(__file__).parent / "fakes" / "ze" / "ov_any_handle.cpp"
BUILD = Path(__file__).parent / "fakes" / "build" / "ze"


@pytest.fixture(scope="module")
def any_results() -> dict[str, str]:
    ov = need_module("openvino")
    root = Path(ov.__file__).parent
    libs = sorted((root / "libs").glob("libopenvino.so.*"))
    if shutil.which("g++") is None:
        pytest.skip("needs g++ (apt install g++) to build the ov::Any check")
    if not (root / "include" / "openvino" / "core" / "any.hpp").exists() or not libs:
        pytest.skip("the openvino wheel here ships no C++ headers or libopenvino.so")
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "ov_any_handle"
    if not exe.exists() or exe.stat().st_mtime < SRC.stat().st_mtime:
        subprocess.run(["g++", "-std=c++17", "-O0", f"-I{root / 'include'}", str(SRC), "-o", str(exe), str(libs[0]),
                        f"-Wl,-rpath,{root / 'libs'}"], check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_int_handle_is_refused_by_void_ptr(any_results: dict[str, str]) -> None:
    assert "int_to_ptr" not in any_results
    assert "Bad as from" in any_results["int_to_ptr_error"]


def test_hex_string_handle_becomes_the_pointer(any_results: dict[str, str]) -> None:
    assert int(any_results["str_to_ptr"], 16) == 0x7F00DEADBEEF
    assert int(any_results["small_str_to_ptr"], 16) == 42
    assert handle_value(42) == "0x2a" and handle_value(0x7F00DEADBEEF) == "0x7f00deadbeef"


def test_void_ptr_prints_as_hex_and_parses_back(any_results: dict[str, str]) -> None:
    assert parse_handle(any_results["ptr_as_string"]) == 0x1234ABCD


def test_cpu_va_property_map_reads_as_the_plugin_reads_it(any_results: dict[str, str]) -> None:
    """The map host_planes gives create_tensor: MEM_TYPE "CPU_VA" becomes MemType::CPU_VA (3) and MEM_HANDLE the
    page's address, through the wheel's own operator>> and ov::Any; an unknown name is refused, not misread."""
    assert any_results["cpu_va_is_cpu_va"] == "1" and any_results["cpu_va_mem_type"] == "3"
    assert int(any_results["cpu_va_mem_handle"], 16) == 0x7F0000001000 == int(handle_value(0x7F0000001000), 16)
    assert any_results["mem_type_name"].split()[0] == "MEM_TYPE"
    assert any_results["bad_mem_type"] == "refused"
