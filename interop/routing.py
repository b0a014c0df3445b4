"""Route search over the static mapper graph: fewest copies, then fewest steps, then by name."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .context import Context
from .errors import CopyRequiredError, NoRouteError, UnsupportedTypeError
from .mapper import MemoryMapper, MemoryMapperChain, registered
from .types import MemoryType, check_memory_type

Path = tuple[type[MemoryMapper], ...]


def _endpoint(x: object, what: str) -> tuple[MemoryType, Context | None]:
    if isinstance(x, Context):
        return x.memory_type, x
    if isinstance(x, MemoryType):
        return x, None
    return check_memory_type(x, what), None


def all_paths(edges: tuple[type[MemoryMapper], ...], src: MemoryType, dst: MemoryType) -> list[Path]:
    """Every simple path from src to dst over ``edges``, cheapest first by (copies, steps, names)."""
    graph: dict[MemoryType, list[type[MemoryMapper]]] = {}
    for cls in edges:
        graph.setdefault(cls.src, []).append(cls)
    paths: list[Path] = []

    def walk(node: MemoryType, seen: frozenset[MemoryType], path: Path) -> None:
        if node is dst and path:
            paths.append(path)
            return
        for cls in graph.get(node, ()):
            if cls.dst not in seen and not (path and cls.first_only):
                walk(cls.dst, seen | {cls.dst}, path + (cls,))

    walk(src, frozenset({src}), ())
    paths.sort(key=_cost)
    return paths


def search(edges: tuple[type[MemoryMapper], ...], src: MemoryType, dst: MemoryType) -> tuple[Path | None, Path | None]:
    """(best zero-copy path, best path allowing copies) over ``edges``."""
    return _pick(all_paths(edges, src, dst))


def _pick(paths: Sequence[Path]) -> tuple[Path | None, Path | None]:
    """(cheapest zero-copy path, cheapest path) of paths sorted cheapest first."""
    zero = next((p for p in paths if all(c.zero_copy for c in p)), None)
    return zero, (paths[0] if paths else None)


@functools.cache
def _ranked(src: MemoryType, dst: MemoryType) -> tuple[Path, ...]:
    return tuple(all_paths(tuple(registered().values()), src, dst))


def alternatives(chain: MemoryMapperChain, allow_copy: bool, limit: int = 8) -> list[MemoryMapperChain]:
    """Chains to try after ``chain`` when one of its steps cannot run on this machine, cheapest first.

    The graph is static (a route through Level Zero exists everywhere); map() falls back along these
    when a step raises BackendUnavailableError, so a machine without that backend still gets the next route.
    """
    if not chain.mappers:
        return []
    s, d = chain.mappers[0].src, chain.mappers[-1].dst
    sctx, dctx = chain.input_context, chain.output_context
    first = tuple(type(m) for m in chain.mappers)
    out = []
    for path in _ranked(s, d):
        if path == first or (not allow_copy and not all(c.zero_copy for c in path)):
            continue
        out.append(_instantiate(path, sctx, dctx))
        if len(out) >= limit:
            break
    return out


def _instantiate(path: Path, sctx: Context | None, dctx: Context | None) -> MemoryMapperChain:
    mappers = [cls(sctx if i == 0 else None, dctx if i == len(path) - 1 else None) for i, cls in enumerate(path)]
    return MemoryMapperChain(mappers, sctx, dctx)


def _cost(path: Path) -> tuple[int, int, tuple[str, ...]]:
    return (sum(not c.zero_copy for c in path), len(path), tuple(c.name for c in path))


@functools.cache
def _best(src: MemoryType, dst: MemoryType) -> tuple[Path | None, Path | None]:
    return search(tuple(registered().values()), src, dst)


def reachable(src: MemoryType) -> frozenset[MemoryType]:
    seen = {src}
    todo = [src]
    edges = registered()
    while todo:
        n = todo.pop()
        for (a, b) in edges:
            if a is n and b not in seen:
                seen.add(b)
                todo.append(b)
    return frozenset(seen - {src})


def route(src: object, dst: object, *, allow_copy: bool = False) -> MemoryMapperChain:
    """The chain of mappers from ``src`` to ``dst`` (MemoryType or Context).

    A route that needs a copy is refused with CopyRequiredError unless ``allow_copy=True``.
    Chains hold no state but their contexts, so one chain serves every call with the same ends.
    """
    if not isinstance(allow_copy, bool):
        raise UnsupportedTypeError(f"allow_copy must be True or False, not {allow_copy!r}")
    if type(src) is MemoryType and type(dst) is MemoryType:
        return _cached_route(src, dst, allow_copy)
    # Chains made for contexts carry those very objects (two equal contexts may still hold different native
    # handles), so a cached chain is reused only for the identical context objects.
    key = (id(src), id(dst), allow_copy)
    hit = _by_identity.get(key)
    if hit is not None and hit[0] is src and hit[1] is dst:
        return hit[2]
    chain = _route(src, dst, allow_copy)
    if len(_by_identity) >= 256:
        _by_identity.clear()
    _by_identity[key] = (src, dst, chain)  # holds the contexts, so their ids cannot be reused meanwhile
    return chain


_by_identity: dict[tuple[int, int, bool], tuple[object, object, MemoryMapperChain]] = {}


@functools.lru_cache(maxsize=256)
def _cached_route(src: MemoryType, dst: MemoryType, allow_copy: bool) -> MemoryMapperChain:
    return _route(src, dst, allow_copy)


def _route(src: object, dst: object, allow_copy: object) -> MemoryMapperChain:
    if not isinstance(allow_copy, bool):
        raise UnsupportedTypeError(f"allow_copy must be True or False, not {allow_copy!r}")
    s, sctx = _endpoint(src, "route source")
    d, dctx = _endpoint(dst, "route destination")
    if s is d:
        if sctx is None or dctx is None or sctx == dctx:
            return MemoryMapperChain([], sctx, dctx)
        raise NoRouteError(f"no mapper moves {s.name} memory between two different contexts ({sctx!r} -> {dctx!r}); "
                           f"map through MemoryType.CPU with allow_copy=True", src=s, dst=d, reachable=reachable(s))
    zero, best = _best(s, d)
    path = zero if zero is not None else best
    if path is None:
        can = reachable(s)
        names = ", ".join(sorted(m.name for m in can)) or "nothing"
        raise NoRouteError(f"no route from {s.name} to {d.name}; from {s.name} interop can reach: {names}",
                           src=s, dst=d, reachable=can)
    if zero is None and not allow_copy:
        step = next(c for c in path if not c.zero_copy)
        raise CopyRequiredError(
            f"every route from {s.name} to {d.name} copies; the cheapest copies at step {step.name} "
            f"({step.src.name} -> {step.dst.name}): pass allow_copy=True to accept it",
            step=step, src=s, dst=d, reachable=reachable(s))
    return _instantiate(path, sctx, dctx)


def forget_cached_routes() -> None:
    """Drop cached chains (they hold contexts): used at exit so frameworks can shut down in order."""
    _cached_route.cache_clear()
    _by_identity.clear()
