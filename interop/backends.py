"""Discovery of backend modules (interop.tensors.*, interop.mappers.*) and what they register.

Backend modules import no framework at module level, so loading all of them is cheap and lets the
routing graph and ``interop routes`` answer on machines where a framework is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import missing_backend

_lock = threading.RLock()
_loaded = False


def load_all() -> None:
    """Import every module of interop.tensors and interop.mappers once (they register themselves)."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        from . import mappers, tensors

        for pkg in (tensors, mappers):
            for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                if not mod.name.startswith("_"):
                    importlib.import_module(f"{pkg.__name__}.{mod.name}")
        _loaded = True


def module_available(name: str) -> bool:
    """Whether a module can be imported, without importing it."""
    import sys

    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, backend: str, extra: str | None) -> Any:
    """Import a framework on first real use; a missing one is a BackendUnavailableError naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        err = missing_backend(backend, module, extra)
        raise err from e


def lazy_module(module: str, backend: str, extra: str | None) -> Callable[[], Any]:
    """A function that imports ``module`` on its first call (BackendUnavailableError naming the extra when it is
    missing) and returns the cached module afterwards: backends call it per frame, so the lookup stays cheap."""
    cache: list[Any] = []

    def get() -> Any:
        if not cache:
            cache.append(require(module, backend, extra))
        return cache[0]

    get.__name__ = module.replace(".", "_")
    get.__doc__ = f"``import {module}`` on first use (BackendUnavailableError when it is missing)."
    return get


# ---- wrap() recognisers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wrapper:
    """How wrap() recognises and wraps one kind of native object."""

    name: str
    matches: Callable[[type], bool]  # decides on the class alone, without importing the framework
    wrap: Callable[..., Any]  # (obj, info=, format=, context=) -> Tensor | Frame
    priority: int = 0  # higher is tried first (cv2.Mat before numpy.ndarray)


_wrappers: list[Wrapper] = []
_wrapper_cache: dict[type, Wrapper | None] = {}


def register_wrapper(w: Wrapper) -> None:
    with _lock:
        _wrappers.append(w)
        _wrappers.sort(key=lambda x: -x.priority)
        _wrapper_cache.clear()


def find_wrapper(obj: object) -> Wrapper | None:
    cls = type(obj)
    try:
        return _wrapper_cache[cls]
    except KeyError:
        pass
    found = None
    for w in _wrappers:
        try:
            if w.matches(cls):
                found = w
                break
        except Exception:  # a recogniser must never break wrap(); treat as no match
            continue
    _wrapper_cache[cls] = found
    return found


def wrapper_names() -> list[str]:
    return [w.name for w in _wrappers]


def class_in(cls: type, module_prefix: str, *names: str) -> bool:
    """True if ``cls`` (or a base) is named one of ``names`` in a module starting with ``module_prefix``."""
    for c in cls.__mro__:
        mod = getattr(c, "__module__", "") or ""
        if (mod == module_prefix or mod.startswith(module_prefix + ".")) and (not names or c.__name__ in names):
            return True
    return False


# ---- doctor probes --------------------------------------------------------------------------------------


@dataclass
class BackendReport:
    """One row of ``interop doctor``."""

    name: str
    installed: bool
    version: str | None = None
    devices: list[str] = field(default_factory=list)
    tier: str = "A"
    reason: str | None = None  # why not available, when it is not
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.installed and self.reason is None


_probes: list[tuple[int, Callable[[], list[BackendReport]]]] = []


def register_probe(order: int, probe: Callable[[], list[BackendReport]]) -> None:
    _probes.append((order, probe))


def run_probes() -> list[BackendReport]:
    load_all()
    out: list[BackendReport] = []
    for _, probe in sorted(_probes, key=lambda p: p[0]):
        try:
            out.extend(probe())
        except Exception as e:  # a broken backend is a row that says so, not a crash of doctor
            out.append(BackendReport(name=getattr(probe, "__module__", "?"), installed=False, reason=f"probe failed: {e}"))
    return out
