"""Every ctypes Structure and constant of interop.native.level_zero against the real ze_api.h (libze-dev):
a C program built from the header prints sizeof/offsetof of each struct and field and the constants' values."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

from interop.native import level_zero as ze
from tests import ze_fake

CONSTANTS = [
    "ZE_INIT_FLAG_GPU_ONLY", "ZE_INIT_FLAG_VPU_ONLY", "ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES",
    "ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES", "ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES",
    "ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED", "ZE_STRUCTURE_TYPE_CONTEXT_DESC", "ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC",
    "ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC", "ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES",
    "ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC", "ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_FD",
    "ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD", "ZE_EXTERNAL_MEMORY_TYPE_FLAG_OPAQUE_FD",
    "ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF", "ZE_MEMORY_TYPE_UNKNOWN", "ZE_MEMORY_TYPE_HOST", "ZE_MEMORY_TYPE_DEVICE",
    "ZE_MEMORY_TYPE_SHARED", "ZE_DEVICE_TYPE_VPU", "ZE_MAX_DEVICE_NAME", "ZE_MAX_DEVICE_UUID_SIZE",
    "ZE_MAX_DRIVER_UUID_SIZE", "ZE_MAX_EXTENSION_NAME", "ZE_RESULT_ERROR_UNINITIALIZED",
]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not ze_fake.HEADERS.exists() or shutil.which("gcc") is None:
        pytest.skip("needs the Debian packages libze-dev and gcc (apt install libze-dev gcc)")
    lines = ["#include <level_zero/ze_api.h>", "#include <stdio.h>", "#include <stddef.h>", "int main(void) {",
             'printf("{\\"structs\\": {");']
    first = True
    for cname, cls in ze.STRUCTURES.items():
        fields = ", ".join(f'\\"{f}\\": %zu' for f, _ in cls._fields_)
        args = ", ".join(f"offsetof({cname}, {f})" for f, _ in cls._fields_)
        sep = "" if first else ", "
        first = False
        lines.append(f'printf("{sep}\\"{cname}\\": {{\\"size\\": %zu, \\"align\\": %zu, {fields}}}", '
                     f"sizeof({cname}), _Alignof({cname}), {args});")
    lines.append('printf("}, \\"constants\\": {");')
    for i, name in enumerate(CONSTANTS):
        lines.append(f'printf("{"" if i == 0 else ", "}\\"{name}\\": %lld", (long long){name});')
    lines.append('printf("}}\\n"); return 0; }')
    d = tmp_path_factory.mktemp("ze_layout")
    (d / "layout.c").write_text("\n".join(lines))
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(d / "layout"), str(d / "layout.c")], check=True,
                   capture_output=True, timeout=120)
    return json.loads(subprocess.run([str(d / "layout")], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("cname", sorted(ze.STRUCTURES))
def test_struct_matches_header(c_layout: dict, cname: str) -> None:
    cls = ze.STRUCTURES[cname]
    c = c_layout["structs"][cname]
    assert ctypes.sizeof(cls) == c["size"], f"sizeof({cname})"
    assert ctypes.alignment(cls) == c["align"], f"_Alignof({cname})"
    for fname, _ in cls._fields_:
        assert getattr(cls, fname).offset == c[fname], f"offsetof({cname}, {fname})"


def test_constants_match_header(c_layout: dict) -> None:
    for name in CONSTANTS:
        assert getattr(ze, name) == c_layout["constants"][name], name


def test_result_names_cover_header() -> None:
    """Every ze_result_t of the header has its name in RESULT_NAMES (so errors are never a bare number)."""
    if not ze_fake.HEADERS.exists():
        pytest.skip("needs the Debian package libze-dev (apt install libze-dev)")
    import re

    text = ze_fake.HEADERS.read_text()
    block = text[text.index("typedef enum _ze_result_t"):text.index("} ze_result_t;")]
    found = dict(re.findall(r"^\s+(ZE_RESULT_\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", block, re.M))
    for name, value in found.items():
        if name == "ZE_RESULT_FORCE_UINT32":
            continue
        assert ze.RESULT_NAMES.get(int(value, 0)) == name, name


EXT_HEADER = ze_fake.ROOT / "tests" / "fakes" / "ze" / "ze_mem_import_system_memory_ext.h"


@pytest.mark.parametrize("cname", sorted(ze.EXTENSION_STRUCTURES))
def test_extension_struct_matches_header(cname: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The NPU extension's system-memory import structure against the copy of its declaration that the fake driver
    is built with (ze_mem_import_system_memory_ext.h is not packaged; the copy says where it comes from)."""
    if not ze_fake.HEADERS.exists() or shutil.which("gcc") is None:
        pytest.skip("needs the Debian packages libze-dev and gcc (apt install libze-dev gcc)")
    cls = ze.EXTENSION_STRUCTURES[cname]
    fields = ", ".join(f'\\"field_{f}\\": %zu' for f, _ in cls._fields_)
    args = ", ".join(f"offsetof({cname}, {f})" for f, _ in cls._fields_)
    src = "\n".join([f'#include "{EXT_HEADER}"', "#include <stdio.h>", "#include <stddef.h>", "int main(void) {",
                     f'printf("{{\\"size\\": %zu, \\"align\\": %zu, {fields}, \\"stype\\": %d, \\"flag\\": %d}}", '
                     f"sizeof({cname}), _Alignof({cname}), {args}, ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY, "
                     f"ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION);", "return 0; }"])
    (tmp_path / "ext.c").write_text(src)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(tmp_path / "ext"), str(tmp_path / "ext.c")],
                   check=True, capture_output=True, timeout=120)
    c = json.loads(subprocess.run([str(tmp_path / "ext")], capture_output=True, text=True, check=True).stdout)
    assert ctypes.sizeof(cls) == c["size"] and ctypes.alignment(cls) == c["align"]
    for fname, _ in cls._fields_:
        assert getattr(cls, fname).offset == c[f"field_{fname}"], f"offsetof({cname}, {fname})"
    assert ze.ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY == c["stype"]
    assert ze.ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION == c["flag"]
