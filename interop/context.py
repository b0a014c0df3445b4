"""Context: the device scope of a framework (OpenCL context + queue, SYCL queue, VA display, OpenVINO core …)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from .errors import BackendUnavailableError, InteropError
from .types import MemoryType, check_memory_type

_factories: dict[MemoryType, Callable[[], Context]] = {}
_defaults: dict[MemoryType, Context] = {}
_lock = threading.RLock()


class Context:
    """A framework's device scope. Subclasses hold the native objects; equality is by native handle."""

    memory_type: ClassVar[MemoryType]

    def __init__(self, native: Any = None, device: Any = None, parent: Context | None = None):
        self._native = native
        self._device = device
        self._parent = parent

    @property
    def native(self) -> Any:
        """The framework's own context object (cl.Context, dpctl.SyclQueue, ov.Core …)."""
        return self._native

    @property
    def device(self) -> Any:
        """The device this context runs on (a framework device object or a name)."""
        return self._device

    @property
    def parent(self) -> Context | None:
        """The context this one was derived from, if any."""
        return self._parent

    def key(self) -> Any:
        """What makes two contexts the same scope; by default the native object's identity."""
        return id(self._native) if self._native is not None else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Context):
            return NotImplemented
        return type(self) is type(other) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash((type(self), self.key()))

    @classmethod
    def default(cls, memory_type: MemoryType) -> Context:
        """The process-wide default context of a memory type, made on first use."""
        memory_type = check_memory_type(memory_type)
        from .backends import load_all

        load_all()
        with _lock:
            ctx = _defaults.get(memory_type)
            if ctx is None:
                factory = _factories.get(memory_type)
                if factory is None:
                    from .backends import backend_of

                    try:
                        name = backend_of(memory_type).name
                    except InteropError:  # no descriptor either: the memory type's own value names it
                        name = memory_type.value
                    raise BackendUnavailableError(f"no backend provides a {memory_type.name} context", backend=name)
                ctx = factory()
                _defaults[memory_type] = ctx
            return ctx

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.memory_type.name} device={self._device!r}>"


def register_default_context(memory_type: MemoryType, factory: Callable[[], Context]) -> None:
    """Backends call this at import: how to make the default context of their memory type."""
    _factories[memory_type] = factory


def set_default_context(memory_type: MemoryType, ctx: Context | None) -> None:
    """Replace (or with None, forget) the default context of a memory type."""
    with _lock:
        if ctx is None:
            _defaults.pop(memory_type, None)
        else:
            _defaults[memory_type] = ctx


class CPUContext(Context):
    """Host memory of this process. There is one."""

    memory_type = MemoryType.CPU

    def __init__(self) -> None:
        super().__init__(native=None, device="cpu")

    def key(self) -> Any:
        return "cpu"


CPU_CONTEXT = CPUContext()
register_default_context(MemoryType.CPU, lambda: CPU_CONTEXT)
