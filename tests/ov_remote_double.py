"""A test double of OpenVINO's remote-context Python API as the NPU plugin answers it (openvino.RemoteContext /
RemoteTensor; plugin behaviour from src/plugins/intel_npu, zero_remote_tensor.cpp), strict about what it is asked:

- ``get_params()`` gives ``L0_CONTEXT`` as OpenVINO does, an OVAny holding a ``void*`` (readable only through
  ``astype(str)``, which prints it as hex);
- ``create_tensor(type, shape, properties)`` takes an ``openvino.Type``, a list of ints and a dict; MEM_TYPE
  must be one of the plugin's names; MEM_HANDLE must survive OpenVINO's ``as<void*>()``, i.e. be a string a
  C++ ``operator>>(void*&)`` parses (an int fails there with "Bad as from: l to: Pv", as the real one does);
- SHARED_BUF "imports" the fd from its start like the plugin: the fd must be open and hold the tensor's bytes;
  the double maps it, so a test can check that the plugin would read the frame's own memory.
"""

from __future__ import annotations

import mmap
import os
import re
from typing import Any

MEM_TYPES = ("L0_INTERNAL_BUF", "SHARED_BUF", "MMAPED_FILE", "CPU_VA")


class OVAnyPointer:
    """What get_params() holds for a void*: OVAny has no int view of it, only astype(str) -> '0x…'."""

    def __init__(self, value: int):
        self._value = value

    def astype(self, t: type) -> Any:
        if t is str:
            return f"0x{self._value:x}"
        raise RuntimeError(f"Bad as from: Pv to: {t.__name__}")

    @property
    def value(self) -> Any:
        raise TypeError("Failed to convert parameter to Python representation!")


def as_void_ptr(value: Any) -> int:
    """ov::Any::as<void*>() of what Python's py_object_to_any made of ``value``."""
    if isinstance(value, bool) or isinstance(value, int):
        raise RuntimeError("Exception from include/openvino/core/any.hpp:783: Bad as from: l to: Pv")
    if not isinstance(value, str):
        raise RuntimeError(f"Bad as from: {type(value).__name__} to: Pv")
    m = re.fullmatch(r"\s*(0[xX])?([0-9a-fA-F]+)\s*", value)
    if not m:
        raise RuntimeError(f"Could not read {value!r} as void*")
    return int(m.group(2), 16)


class RemoteTensorDouble:
    def __init__(self, ctx: RemoteContextDouble, type: Any, shape: list[int], props: dict[str, Any]):
        self._ctx, self._type, self._shape, self._props = ctx, type, list(shape), dict(props)
        self.byte_size = type.size * _prod(shape)
        self.fd: int | None = None
        self.mapping: mmap.mmap | None = None
        if props.get("MEM_TYPE") == "SHARED_BUF":
            fd = as_void_ptr(props["MEM_HANDLE"])
            st = os.fstat(fd)  # raises on a closed fd, as the plugin's import would fail
            if st.st_size and st.st_size < self.byte_size:
                raise RuntimeError(f"zeMemAllocHost import: fd {fd} holds {st.st_size} bytes, {self.byte_size} needed")
            self.fd = fd
            self.mapping = mmap.mmap(fd, self.byte_size)

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def get_byte_size(self) -> int:
        return self.byte_size

    def get_device_name(self) -> str:
        return self._ctx.get_device_name()

    def get_params(self) -> dict[str, Any]:
        return dict(self._props)

    @property
    def data(self) -> Any:
        raise NotImplementedError("RemoteTensor has no data view")


class RemoteContextDouble:
    _next = 0x5A5A0000

    def __init__(self, l0_context: int | None = None):
        if l0_context is None:  # each double its own plugin context unless told otherwise
            RemoteContextDouble._next += 0x1000
            l0_context = RemoteContextDouble._next
        self.l0_context = int(l0_context)
        self.calls: list[tuple[Any, list[int], dict[str, Any]]] = []
        self.tensors: list[RemoteTensorDouble] = []

    def get_device_name(self) -> str:
        return "NPU"

    def get_params(self) -> dict[str, Any]:
        return {"L0_CONTEXT": OVAnyPointer(self.l0_context)}

    def create_tensor(self, type: Any, shape: Any, properties: Any) -> RemoteTensorDouble:
        import openvino as ov

        if not isinstance(type, ov.Type):
            raise TypeError(f"create_tensor(): type must be openvino.Type, got {type!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
            raise TypeError(f"create_tensor(): shape must be a list of positive ints, got {shape!r}")
        if not isinstance(properties, dict) or not all(isinstance(k, str) for k in properties):
            raise TypeError(f"create_tensor(): properties must be a dict with str keys, got {properties!r}")
        if properties.get("MEM_TYPE") not in MEM_TYPES:
            raise RuntimeError(f"MEM_TYPE must be one of {MEM_TYPES}, got {properties.get('MEM_TYPE')!r}")
        self.calls.append((type, list(shape), dict(properties)))
        t = RemoteTensorDouble(self, type, shape, properties)
        self.tensors.append(t)
        return t


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
