"""A bounded cache for per-frame paths, keyed by value or by object identity, whose hit is one dict lookup."""

from __future__ import annotations

import threading
from typing import Any, Final, TypeVar

from .errors import InvalidTensorError, UnsupportedTypeError

K = TypeVar("K")
V = TypeVar("V")

#: ``cache.get(key, MISSING)`` tells a miss from a cached None.
MISSING: Final[Any] = object()


class IdentityCache(dict[K, V]):
    """A dict of at most ``maxsize`` entries for caches read on every frame.

    Read it as a dict: ``cache.get(key)`` (or ``cache.get(key, MISSING)`` where None is a cached value); nothing
    runs in Python on a hit. On a per-frame path bind the method once, ``lookup = cache.get`` at import: CPython
    specialises attribute lookups for exact dicts only, and a bound ``get`` costs what a plain dict's ``get`` does.
    Fill it with :meth:`put` only: when it is full, ``put`` empties it first (a stream's few layouts come back at
    once; a workload with more distinct keys than ``maxsize`` would miss anyway).

    Keyed by identity: give ``put`` the objects whose ``id()`` the key holds (``put((id(a), id(b)), v, a, b)``). The
    cache keeps them alive while the entry lives, so no other object can have those ids meanwhile, and a hit needs
    no ``is`` check. Keyed by value: give ``put`` the key alone.

    Thread-safe under the GIL: ``put`` and ``clear`` hold a lock; a reader on another thread sees an entry only
    while the objects of its key are held (they are dropped after the entries).
    """

    __slots__ = ("maxsize", "_held", "_lock")

    def __init__(self, maxsize: int):
        super().__init__()
        if type(maxsize) is not int:
            raise UnsupportedTypeError(f"IdentityCache(maxsize) takes a positive int, not {maxsize!r}")
        if maxsize < 1:
            raise InvalidTensorError(f"IdentityCache(maxsize) takes a positive int, not {maxsize!r}")
        self.maxsize = maxsize
        self._held: dict[K, tuple[object, ...]] = {}
        self._lock = threading.Lock()

    def put(self, key: K, value: V, *held: object) -> V:
        """Store ``value`` under ``key``, keeping ``held`` (the objects whose ids ``key`` holds) alive as long as the
        entry; returns ``value``."""
        with self._lock:
            if len(self) >= self.maxsize and key not in self:
                self._clear()
            if held:
                self._held[key] = held  # before the entry: a reader never sees an entry whose objects are gone
            else:
                self._held.pop(key, None)
            dict.__setitem__(self, key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        dict.clear(self)
        self._held.clear()  # after the entries, for the same reason

    def __repr__(self) -> str:
        return f"IdentityCache({len(self)}/{self.maxsize})"
