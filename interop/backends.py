"""Backends: their descriptors (``Backend``: name, tier, pip extra, requirements, detection, doctor row), the
discovery of backend modules (interop.tensors.*, interop.mappers.*) and what those register.

Backend modules import no framework at module level, so loading all of them is cheap and lets the
routing graph and ``interop routes`` answer on machines where a framework is missing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import missing_backend
from .types import MemoryType, check_memory_type

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


_UNSET: Any = object()


def require(module: str, backend: str, extra: str | None = _UNSET) -> Any:
    """Import a framework on first real use; a missing one is a BackendUnavailableError naming the backend and its
    pip extra (the declared backend's, unless ``extra`` is given)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if extra is _UNSET:
            declared = _backends.get(backend)
            extra = declared.extra if declared is not None else None
        err = missing_backend(backend, module, extra)
        raise err from e


def lazy_module(module: str, backend: str, extra: str | None = _UNSET) -> Callable[[], Any]:
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


# ---- backend descriptors and doctor rows ---------------------------------------------------------------


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


TIERS = ("A", "B", "C")


@dataclass(frozen=True)
class Backend:
    """Everything the library, its CLI and its tests need to know of one backend, declared once, in its tensors
    module (``register_backend(Backend(...))``).

    ``name`` is the one spelling of the backend everywhere: ``BackendUnavailableError.backend``, the tests' tables,
    ``backend_named()``. A backend owns the memory types it lists (``backend_of(mt)``); a driver shared by several
    backends (Level Zero) lists none. ``tier``: "A" runs on every machine (tests fail when it is missing), "B" needs
    an NVIDIA GPU, "C" other hardware (VA-API, Level Zero, an NPU); ``hardware`` names that hardware in words.
    ``extra`` is the pip extra that installs ``requires`` (the Python modules its tensors and mappers import lazily).
    ``detect()`` says, without importing a framework or touching a device, why the backend cannot run here (None
    when it may); ``probe()`` gives its ``interop doctor`` rows (it may import and open devices). ``after`` lists
    backends whose probes must run before this one's; ``early`` ones run before every backend that is not (a side
    effect the others depend on: Level Zero's driver pinning). Ties keep the order of ``MemoryType``.
    """

    name: str
    title: str
    memory_types: tuple[MemoryType, ...]
    tier: str = "A"
    extra: str | None = None
    requires: tuple[str, ...] = ()
    probe: Callable[[], list[BackendReport]] | None = None
    detect: Callable[[], str | None] | None = None
    hardware: str | None = None
    after: tuple[str, ...] = ()
    early: bool = False

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower() or " " in self.name:
            raise ValueError(f"a backend name is one lower-case word (snake_case), not {self.name!r}")
        if self.tier not in TIERS:
            raise ValueError(f"backend {self.name}: tier must be one of {TIERS}, not {self.tier!r}")
        if isinstance(self.requires, str) or isinstance(self.memory_types, str):
            raise TypeError(f"backend {self.name}: requires and memory_types are tuples, not strings")

    def missing_module(self) -> str | None:
        """The first required Python module that is not installed, named with its pip hint; None when all are.
        Imports nothing."""
        for mod in self.requires:
            if not module_available(mod):
                return f"needs the Python module '{mod}': {install_hint(mod, self.extra)}"
        return None

    def missing(self) -> str | None:
        """Why this backend cannot run here, or None: ``missing_module()``, then ``detect()`` (absent hardware).
        Imports no framework."""
        why = self.missing_module()
        if why is None and self.detect is not None:
            why = self.detect()
        return why

    def require(self, module: str) -> Any:
        """``import module`` now; a missing one is a BackendUnavailableError naming this backend and its extra."""
        return require(module, self.name, self.extra)

    def rows(self) -> list[BackendReport]:
        """This backend's ``interop doctor`` rows: its probe's, or one row from ``missing()`` when it has none."""
        if self.probe is not None:
            return self.probe()
        return [BackendReport(self.title, installed=self.missing_module() is None, tier=self.tier, reason=self.missing())]


_backends: dict[str, Backend] = {}
_by_type: dict[MemoryType, Backend] = {}


def register_backend(b: Backend) -> Backend:
    """Declare a backend (its tensors module does this once, at import). A second declaration of the same name or
    memory type is a mistake of the module that makes it, refused unless it is the very same descriptor."""
    with _lock:
        old = _backends.get(b.name)
        if old is not None and old != b:
            raise ValueError(f"backend {b.name!r} is declared twice ({old.title!r} and {b.title!r})")
        for mt in b.memory_types:
            owner = _by_type.get(mt)
            if owner is not None and owner.name != b.name:
                raise ValueError(f"memory type {mt} belongs to backend {owner.name!r}; {b.name!r} cannot declare it")
        _backends[b.name] = b
        for mt in b.memory_types:
            _by_type[mt] = b
    return b


def all_backends() -> list[Backend]:
    """Every declared backend, in probe order (declared dependencies first, then the order of MemoryType)."""
    load_all()
    with _lock:
        return _ordered(list(_backends.values()))


def backend_of(memory_type: MemoryType) -> Backend:
    """The backend that owns a memory type (UnsupportedTypeError for a string or a type nobody declared)."""
    mt = check_memory_type(memory_type)
    b = _by_type.get(mt)
    if b is None:
        load_all()
        b = _by_type.get(mt)
    if b is None:
        from .errors import UnsupportedTypeError

        raise UnsupportedTypeError(f"no backend declares the memory type {mt}: its tensors module must call "
                                   f"register_backend(Backend(..., memory_types=(MemoryType.{mt.name},)))")
    return b


def backend_named(name: str) -> Backend:
    """The backend of that name (the spelling of ``BackendUnavailableError.backend``); KeyError if none."""
    b = _backends.get(name)
    if b is None:
        load_all()
        b = _backends.get(name)
    if b is None:
        raise KeyError(f"no backend is named {name!r}; known: {', '.join(sorted(_backends))}")
    return b


def install_hint(module: str, extra: str | None) -> str:
    """What to run to get ``module``: the pip extra of this distribution that brings it, else the module itself."""
    from ._dist import pip_hint

    return pip_hint(extra) if extra else f"install the Python module '{module}'"


def _ordered(backends: list[Backend]) -> list[Backend]:
    """Topological order over ``after`` (and ``early``), ties by the position of the first memory type in
    MemoryType, then by name. A cycle or an unknown name in ``after`` is a mistake of the declaring module."""
    pos = {mt: i for i, mt in enumerate(MemoryType)}
    names = {b.name for b in backends}

    def key(b: Backend) -> tuple[int, int, str]:
        first = min((pos.get(mt, len(pos)) for mt in b.memory_types), default=-1)
        return (0 if b.early else 1, first, b.name)

    deps: dict[str, set[str]] = {}
    for b in backends:
        unknown = set(b.after) - names
        if unknown:
            raise ValueError(f"backend {b.name!r} runs after {sorted(unknown)}, which no module declares")
        deps[b.name] = set(b.after) | ({x.name for x in backends if x.early} if not b.early else set())
    out: list[Backend] = []
    left = sorted(backends, key=key)
    while left:
        done = {b.name for b in out}
        ready = [b for b in left if deps[b.name] <= done]
        if not ready:
            raise ValueError(f"backends {[b.name for b in left]} depend on each other in a cycle (Backend.after)")
        out.append(ready[0])
        left.remove(ready[0])
    return out


def _display_order(backends: list[Backend]) -> list[Backend]:
    """The order doctor shows: MemoryType's; a backend without a memory type (a shared driver) just before the
    first backend that runs after it."""
    pos = {mt: i for i, mt in enumerate(MemoryType)}

    def key(b: Backend) -> tuple[float, str]:
        if b.memory_types:
            return (float(min(pos.get(mt, len(pos)) for mt in b.memory_types)), b.name)
        users = [key(u)[0] for u in backends if b.name in u.after and u.memory_types]
        return ((min(users) if users else float(len(pos))) - 0.5, b.name)

    return sorted(backends, key=key)


def run_probes() -> list[BackendReport]:
    """Every backend's doctor rows: the probes run in probe order (declared dependencies first), the rows come in
    display order (MemoryType's). A probe that fails is a row that says so."""
    rows: dict[str, list[BackendReport]] = {}
    backends = all_backends()
    for b in backends:
        try:
            rows[b.name] = b.rows()
        except Exception as e:  # a broken backend is a row that says so, not a crash of doctor
            rows[b.name] = [BackendReport(name=b.title, installed=False, tier=b.tier, reason=f"probe failed: {e}")]
    return [r for b in _display_order(backends) for r in rows[b.name]]


@dataclass(frozen=True)
class EdgeNeeds:
    """What a mapper between two memory types needs, derived from the two backends' descriptors."""

    requires: tuple[str, ...]
    extra: str | None
    tier: str


@functools.lru_cache(maxsize=256)  # mappers read it per availability check; declared backends never change
def edge_needs(src: MemoryType, dst: MemoryType) -> EdgeNeeds:
    """The defaults of a ``src -> dst`` mapper: the modules both backends require (the source's first), the pip
    extra of the destination (else the source's), and the higher of the two tiers. A mapper that needs more (a
    dma-buf import into Level Zero is tier C between two tier A types) says so on its class."""
    a, b = backend_of(src), backend_of(dst)
    return EdgeNeeds(requires=tuple(dict.fromkeys(a.requires + b.requires)), extra=b.extra or a.extra,
                     tier=max(a.tier, b.tier))
