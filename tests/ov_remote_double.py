"""A test double of OpenVINO's remote-context Python API as the NPU plugin answers it (openvino.RemoteContext /
RemoteTensor; plugin behaviour from src/plugins/intel_npu, zero_remote_tensor.cpp), strict about what it is asked:

- ``get_params()`` gives ``L0_CONTEXT`` as OpenVINO does, an OVAny holding a ``void*`` (readable only through
  ``astype(str)``, which prints it as hex);
- ``create_tensor(type, shape, properties)`` takes an ``openvino.Type``, a list of ints and a dict; MEM_TYPE
  must be one of the plugin's names; MEM_HANDLE must survive OpenVINO's ``as<void*>()``, i.e. be a string a
  C++ ``operator>>(void*&)`` parses (an int fails there with "Bad as from: l to: Pv", as the real one does);
- SHARED_BUF "imports" the fd from its start like the plugin: the fd must be open and hold the tensor's bytes;
  the double maps it, so a test can check that the plugin would read the frame's own memory;
- CPU_VA imports host memory as the plugin's ``zero_mem::import_standard_allocation_memory`` does
  (src/plugins/intel_npu/src/utils/src/zero/zero_mem.cpp), in this order: a driver with
  ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION, address and byte size multiples of 4096, the page after the
  range not part of an existing allocation of the context, then zeMemAllocHost with the system-memory import; the
  messages are the plugin's. Given a real (fake-driver) Level Zero context (``ze_context=``), the import is a real
  zeMemAllocHost through interop.native.level_zero, so the fake driver's own rules apply too; without one, the
  double keeps the live imports itself. The import ends when the RemoteTensor is collected (the plugin frees it in
  its destructor); ``imports`` lists the live ones.
"""

from __future__ import annotations

import mmap
import os
import re
import weakref
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
        self.start = 0
        self.alloc: Any = None
        if props.get("MEM_TYPE") == "CPU_VA":
            self.start = ctx._import(as_void_ptr(props["MEM_HANDLE"]) if "MEM_HANDLE" in props else 0, self.byte_size, self)
            self._props["MEM_HANDLE"] = OVAnyPointer(self.start)  # update_properties(): mem_handle(_data)
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

    def __init__(self, l0_context: int | None = None, *, ze_context: Any = None, standard_allocation: bool = True):
        if ze_context is not None:
            l0_context = ze_context.handle
        if l0_context is None:  # each double its own plugin context unless told otherwise
            RemoteContextDouble._next += 0x1000
            l0_context = RemoteContextDouble._next
        self.l0_context = int(l0_context)
        self.calls: list[tuple[Any, list[int], dict[str, Any]]] = []
        self.tensors: list[RemoteTensorDouble] = []  # SHARED_BUF / L0_INTERNAL_BUF tensors (kept alive)
        self.ze_context = ze_context
        self.standard_allocation = standard_allocation
        self._imports: list[weakref.ref[RemoteTensorDouble]] = []

    @property
    def imports(self) -> list[RemoteTensorDouble]:
        """The live CPU_VA imports (RemoteTensors not yet collected)."""
        live = [t for r in self._imports if (t := r()) is not None]
        self._imports = [weakref.ref(t) for t in live]
        return live

    def _allocation_id(self, address: int) -> int:
        """zeroUtils::get_l0_context_memory_allocation_id: the id of the allocation holding ``address``, else 0."""
        if self.ze_context is not None:
            from interop.native import level_zero as ze

            return ze.alloc_properties(self.ze_context, address).id
        for t in self.imports:
            if t.start <= address < t.start + t.byte_size:
                return id(t)
        return 0

    def _import(self, address: int, size: int, tensor: RemoteTensorDouble) -> int:
        if not self.standard_allocation:
            raise RuntimeError("Importing standard allocation is not supported with this driver version")
        if address % 4096 or size % 4096:
            raise RuntimeError("Importing standard allocation is not supported if memory is not aligned to standard page size")
        if self._allocation_id(address + size) > 0:
            raise RuntimeError("Can not import a memory which is part of an existing allocation")
        if self.ze_context is not None:
            from interop.native import level_zero as ze

            try:
                tensor.alloc = ze.import_system_memory(self.ze_context, address, size)
            except Exception as e:
                raise RuntimeError(f"Importing memory failed ({e})") from e
            start = tensor.alloc.pointer
        else:
            if address == 0 or any(t.start < address + size and address < t.start + t.byte_size for t in self.imports):
                raise RuntimeError("Importing memory failed")  # the driver refuses NULL and overlaps
            start = address
        self._imports.append(weakref.ref(tensor))
        return start

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
        if properties.get("MEM_TYPE") != "CPU_VA":
            self.tensors.append(t)
        return t


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
