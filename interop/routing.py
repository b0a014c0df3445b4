"""Route search over the static mapper graph.

By type (``route(MemoryType | Context, ...)``): each edge counts at its worst case; a chain with a step that always
copies is refused without ``allow_copy``, and steps that copy only for some inputs are marked "may copy". Routes are
ranked by steps that always copy, then steps, then steps that may copy, then by name.

By object (``route(obj, ...)``, and ``interop.map()``): each route's first step says what it does with this very
input in this access mode (``MemoryMapper.cost``: zero-copy, a copy, or WrongMemoryError for an input it cannot
take), later steps their worst case for the mode. A later step cannot see its input in advance, so for ranking it
counts as a copy: the direct edge, when it takes the input, wins over a longer route that only might be zero-copy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .context import Context
from .errors import (
    BackendUnavailableError,
    CopyRequiredError,
    InteropError,
    NoRouteError,
    UnsupportedTypeError,
    WrongMemoryError,
)
from .frame import Frame
from .mapper import Cost, MemoryMapper, MemoryMapperChain, reachable, registered, wrap_native
from .tensor import Tensor
from .types import AccessMode, MemoryType, check_memory_type, check_mode

__all__ = ["all_paths", "alternatives", "forget_cached_routes", "reachable", "route", "route_object", "search"]

Path = tuple[type[MemoryMapper], ...]


def _endpoint(x: object, what: str) -> tuple[MemoryType, Context | None]:
    if isinstance(x, Context):
        return x.memory_type, x
    if isinstance(x, MemoryType):
        return x, None
    return check_memory_type(x, what), None


def _always(c: Any) -> bool:
    return not c.zero_copy and not c.may_copy


def _cost(path: Path) -> tuple[int, int, int, tuple[str, ...]]:
    return (sum(_always(c) for c in path), len(path), sum(bool(c.may_copy) for c in path), tuple(c.name for c in path))


def all_paths(edges: tuple[type[MemoryMapper], ...], src: MemoryType, dst: MemoryType) -> list[Path]:
    """Every simple path from src to dst over ``edges``, cheapest first by (copies, steps, may-copies, names)."""
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
    """(best path without a step that always copies, best path allowing copies) over ``edges``."""
    return _pick(all_paths(edges, src, dst))


def _pick(paths: Sequence[Path]) -> tuple[Path | None, Path | None]:
    free = next((p for p in paths if not any(_always(c) for c in p)), None)
    return free, (paths[0] if paths else None)


@functools.cache
def _ranked(src: MemoryType, dst: MemoryType) -> tuple[Path, ...]:
    return tuple(all_paths(tuple(registered().values()), src, dst))


def _instantiate(path: Path, sctx: Context | None, dctx: Context | None) -> MemoryMapperChain:
    mappers = [cls(sctx if i == 0 else None, dctx if i == len(path) - 1 else None) for i, cls in enumerate(path)]
    return MemoryMapperChain(mappers, sctx, dctx)


@functools.cache
def _best(src: MemoryType, dst: MemoryType) -> tuple[Path | None, Path | None]:
    return search(tuple(registered().values()), src, dst)


# ---- by type ---------------------------------------------------------------------------------------------------


def route(src: object, dst: object, *, allow_copy: bool = False, mode: AccessMode = AccessMode.READ) -> MemoryMapperChain:
    """The chain of mappers from ``src`` to ``dst`` (MemoryType or Context).

    ``src`` may also be an object (a Tensor, Frame, or anything interop.wrap() takes): the route is then chosen by
    what each route does with that object in ``mode`` (see route_object). By type, a route that always copies is
    refused with CopyRequiredError unless ``allow_copy=True``; a route whose steps copy only for some inputs is
    returned, with ``zero_copy`` False and its steps marked "may copy".
    Chains hold no state but their contexts, so one chain serves every call with the same ends.
    """
    if not isinstance(allow_copy, bool):
        raise UnsupportedTypeError(f"allow_copy must be True or False, not {allow_copy!r}")
    if type(src) is MemoryType and type(dst) is MemoryType:
        return _cached_route(src, dst, allow_copy)
    if not isinstance(src, (MemoryType, Context, str, int, float)) and src is not None:
        return route_object(src, dst, allow_copy=allow_copy, mode=mode)
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


def _no_route(s: MemoryType, d: MemoryType) -> NoRouteError:
    can = reachable(s)
    names = ", ".join(sorted(m.name for m in can)) or "nothing"
    return NoRouteError(f"no route from {s.name} to {d.name}; from {s.name} interop can reach: {names}",
                        src=s, dst=d, reachable=can)


def _same_type(s: MemoryType, sctx: Context | None, dctx: Context | None) -> MemoryMapperChain:
    if sctx is None or dctx is None or sctx == dctx:
        return MemoryMapperChain([], sctx, dctx)
    raise NoRouteError(f"no mapper moves {s.name} memory between two different contexts ({sctx!r} -> {dctx!r}); "
                       f"map through MemoryType.CPU with allow_copy=True", src=s, dst=s, reachable=reachable(s))


def _route(src: object, dst: object, allow_copy: object) -> MemoryMapperChain:
    if not isinstance(allow_copy, bool):
        raise UnsupportedTypeError(f"allow_copy must be True or False, not {allow_copy!r}")
    s, sctx = _endpoint(src, "route source")
    d, dctx = _endpoint(dst, "route destination")
    if s is d:
        return _same_type(s, sctx, dctx)
    free, best = _best(s, d)
    path = free if free is not None else best
    if path is None:
        raise _no_route(s, d)
    if free is None and not allow_copy:
        step = next(c for c in path if _always(c))
        raise CopyRequiredError(
            f"every route from {s.name} to {d.name} copies; the cheapest copies at step {step.name} "
            f"({step.src.name} -> {step.dst.name}): pass allow_copy=True to accept it",
            step=step, src=s, dst=d, reachable=reachable(s))
    return _instantiate(path, sctx, dctx)


# ---- by object -------------------------------------------------------------------------------------------------


class _Option:
    """One route for (source, destination, contexts, mode): its chain and what its later steps copy."""

    __slots__ = ("chain", "first", "tail", "rank")

    def __init__(self, chain: MemoryMapperChain, tail: int):
        self.chain = chain
        self.first = chain._mappers[0]
        self.tail = tail
        self.rank = (len(chain._mappers), tuple(m.name for m in chain._mappers))


def _tail(chain: MemoryMapperChain, mode: AccessMode) -> int | None:
    """Copies of the steps after the first for an input a previous step makes; None: a step refuses such input."""
    n = 0
    for m in chain._mappers[1:]:
        try:
            c = m.cost(None, mode)
        except BackendUnavailableError:
            c = Cost.ZERO_COPY if m.zero_copy else Cost.COPY  # map() says why it cannot run, and tries another
        except InteropError:
            return None
        n += c is Cost.COPY
    return n


def _all_options(s: MemoryType, d: MemoryType, sctx: Context | None, dctx: Context | None,
                 mode: AccessMode) -> list[_Option]:
    out = []
    for path in _ranked(s, d):
        chain = _instantiate(path, sctx, dctx)
        tail = _tail(chain, mode)
        if tail is not None:
            out.append(_Option(chain, tail))
    out.sort(key=lambda o: (o.rank[0], o.tail, o.rank[1]))
    return out


def _options(s: MemoryType, d: MemoryType, sctx: Context | None, dctx: Context | None,
             mode: AccessMode) -> list[_Option]:
    """The cheapest route of each first step, cheapest tail first (a route's first step decides by the object)."""
    key = (s, d, id(sctx), id(dctx), mode)
    hit = _by_object.get(key)
    if hit is not None and hit[0] is sctx and hit[1] is dctx:
        return hit[2]
    seen: set[type[MemoryMapper]] = set()
    groups = []
    for o in _all_options(s, d, sctx, dctx, mode):
        if type(o.first) not in seen:
            seen.add(type(o.first))
            groups.append(o)
    if len(_by_object) >= 256:
        _by_object.clear()
    _by_object[key] = (sctx, dctx, groups)
    return groups


_by_object: dict[tuple[Any, ...], tuple[Any, Any, list[_Option]]] = {}


def _first_cost(o: _Option, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
    try:
        return o.first.cost(obj, mode)
    except BackendUnavailableError:
        return Cost.ZERO_COPY if o.first.zero_copy else Cost.COPY  # map() says why it cannot run here


def _choose(options: Sequence[_Option], obj: Tensor | Frame | None, mode: AccessMode) -> tuple[
        tuple[int, _Option] | None, InteropError | None]:
    """((predicted copies, cheapest option), the first refusal) for ``obj``.

    A later step of a route cannot see its input in advance (its layout, its kind), so for ranking it counts as a
    copy: a route whose every step has seen the input wins, so the direct edge, when it takes the input, is taken
    over a longer route that only might be zero-copy. Copies predicted: the first step's for ``obj``, later steps'
    worst case for ``mode``.
    """
    best: tuple[Any, _Option, int] | None = None
    error: InteropError | None = None
    for o in options:  # sorted by (steps, tail, names): lower bounds only grow
        n = len(o.chain._mappers)
        if best is not None and best[0] <= (n - 1, n, o.tail, o.rank[1]):
            break
        try:
            c = _first_cost(o, obj, mode)
        except WrongMemoryError as e:
            error = error or e
            continue
        except InteropError as e:
            if n == 1:
                raise  # the direct edge refuses this input as bad: no other route makes it good
            error = error or e
            continue
        copy = c is Cost.COPY
        key = (copy + n - 1, n, o.tail + copy, o.rank[1])
        if best is None or key < best[0]:
            best = (key, o, o.tail + copy)
    return ((best[2], best[1]) if best is not None else None), error


def route_object(obj: Any, dst: object, *, allow_copy: bool = False,
                 mode: AccessMode = AccessMode.READ) -> MemoryMapperChain:
    """The cheapest chain for this very object (a Tensor, Frame, or anything interop.wrap() takes) in ``mode``.

    Each route's first step reports its cost for ``obj`` (an edge that cannot take it raises WrongMemoryError and
    the route is left out); later steps count their worst case for ``mode``. Without ``allow_copy`` a chain that
    copies for this object is refused with CopyRequiredError; when no route can take the object, the first
    refusal is raised (the error ``interop.map()`` would raise).
    """
    if type(mode) is not AccessMode:
        mode = check_mode(mode)
    if not isinstance(obj, (Tensor, Frame)):
        obj = wrap_native(obj)
    s, sctx = obj.memory_type, obj.context
    d, dctx = _endpoint(dst, "route destination")
    if s is d:
        return _same_type(s, sctx, dctx)
    options = _options(s, d, sctx, dctx, mode)
    if not options:
        if not _ranked(s, d):
            raise _no_route(s, d)
    found, error = _choose(options, obj, mode)
    if found is None:
        if error is not None:
            raise error
        raise _no_route(s, d)
    copies, best = found
    if copies and not allow_copy:
        costs = best.chain.step_costs(obj, mode)
        step = best.chain._mappers[costs.index(Cost.COPY)]
        raise CopyRequiredError(
            f"the route for this {s.name} {'frame' if isinstance(obj, Frame) else 'tensor'} to {d.name} copies "
            f"in mode {mode.name}; it copies at step {step.name} ({step.src.name} -> {step.dst.name}): "
            f"pass allow_copy=True to accept it", step=type(step), src=s, dst=d, reachable=reachable(s))
    return best.chain


def alternatives(chain: MemoryMapperChain, allow_copy: bool, limit: int | None = 8, *, obj: Any = None,
                 mode: AccessMode = AccessMode.READ) -> list[MemoryMapperChain]:
    """Chains to try after ``chain`` when one of its steps cannot run here or cannot take the input, cheapest first
    (for ``obj`` when given: by what each costs for it); ``limit=None``: all of them.

    The graph is static (a route through Level Zero exists everywhere); map() falls back along these when a step
    raises BackendUnavailableError or WrongMemoryError, so a machine without that backend still gets the next route.
    """
    if not chain.mappers:
        return []
    s, d = chain.mappers[0].src, chain.mappers[-1].dst
    sctx, dctx = chain.input_context, chain.output_context
    first = tuple(type(m) for m in chain.mappers)
    ranked: list[tuple[Any, MemoryMapperChain]] = []
    for o in _all_options(s, d, sctx, dctx, mode):
        if tuple(type(m) for m in o.chain._mappers) == first:
            continue
        if obj is None:
            c = o.tail + (not o.first.zero_copy)
        else:
            try:
                c = o.tail + (_first_cost(o, obj, mode) is Cost.COPY)
            except InteropError:
                continue
        if c and not allow_copy:
            continue
        ranked.append(((c, o.rank), o.chain))
    ranked.sort(key=lambda r: r[0])
    return [c for _, c in ranked[:limit]]


def forget_cached_routes() -> None:
    """Drop cached chains (they hold contexts): used at exit so frameworks can shut down in order."""
    _cached_route.cache_clear()
    _by_identity.clear()
    _by_object.clear()
