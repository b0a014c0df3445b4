"""Route search over the static mapper graph.

By type (``route(MemoryType | Context, ...)``): each edge counts at its worst case; a chain with a step that always
copies is refused without ``allow_copy``, and steps that copy only for some inputs are marked "may copy". Routes are
ranked by steps that always copy, then steps, then steps that may copy, then by name.

By object (``route(obj, ...)``, and ``interop.map()``): every step is costed for the input it would really get
(``MemoryMapperChain.walk``): the first step sees the object, and each step that is zero-copy for its input is
mapped while choosing, so the next step is costed for the very object it gets and a step that refuses its input
only when mapping refuses it here. A step after a copying step counts its worst case for the mode (it is not
mapped: routing never copies). Routes rank by copies, then steps, then names; they are tried in the order of what
no input can beat (their steps that always copy, steps, names) until none can beat the best found, so the direct
edge, when it takes the input without a copy, is the only one tried. ``route(obj, dst)`` releases what it mapped;
``interop.map()`` keeps the chosen route's outputs and maps the rest: it names and runs the same chain.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .context import Context
from .errors import (
    BackendUnavailableError,
    ContextMismatchError,
    CopyRequiredError,
    InteropError,
    NoRouteError,
    UnsupportedTypeError,
)
from .frame import Frame
from .mapper import Cost, MemoryMapper, MemoryMapperChain, reachable, registered, release_outputs, wrap_native
from .mapper import _registry as _registry_of_mappers
from .tensor import Tensor
from .types import AccessMode, MemoryType, check_memory_type, check_mode

__all__ = ["all_paths", "alternatives", "forget_cached_routes", "map_object", "reachable", "route", "route_object",
           "search"]

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
    """One route for (source, destination, contexts, mode): its chain, its static floor and tail."""

    __slots__ = ("chain", "first", "tail", "rank", "floor")

    def __init__(self, chain: MemoryMapperChain, tail: int | None):
        self.chain = chain
        self.first = chain._mappers[0]
        self.tail = tail  # copies of the later steps at their worst case for the mode (None: one refuses unknown input)
        names = tuple(m.name for m in chain._mappers)
        self.rank = (len(chain._mappers), names)
        # no input makes this route cheaper: its steps that always copy, its length, its names
        self.floor = (sum(_always(m) for m in chain._mappers), len(chain._mappers), names)


def _tail(chain: MemoryMapperChain, mode: AccessMode) -> int | None:
    """Copies of the steps after the first for an input of unknown kind; None: a step refuses such input."""
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
    """Every route, the ones no input can make cheaper than another's floor first (cached per ends and mode)."""
    key = (s, d, id(sctx), id(dctx), mode)
    hit = _by_object.get(key)
    if hit is not None and hit[0] is sctx and hit[1] is dctx:
        return hit[2]
    out = [_Option(chain, _tail(chain, mode)) for chain in (_instantiate(p, sctx, dctx) for p in _ranked(s, d))]
    out.sort(key=lambda o: o.floor)
    if len(_by_object) >= 256:
        _by_object.clear()
    _by_object[key] = (sctx, dctx, out)
    return out


_by_object: dict[tuple[Any, ...], tuple[Any, Any, list[_Option]]] = {}

# what a step may raise for an input it cannot take (or cannot run here): routing then tries the next route
_REFUSALS = (ContextMismatchError, BackendUnavailableError)  # WrongMemoryError is a ContextMismatchError


def _first_cost(o: _Option, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
    try:
        return o.first.cost(obj, mode)
    except BackendUnavailableError:
        return Cost.ZERO_COPY if o.first.zero_copy else Cost.COPY  # map() says why it cannot run here


def _runs_here(chain: MemoryMapperChain) -> None:
    """Raise the BackendUnavailableError map() would raise for a step whose modules are not installed (a step
    after a copy is not mapped while routing, so this is how routing knows it cannot run)."""
    for m in chain._mappers:
        if not type(m)._ready and m.missing() is not None:
            try:
                m._require()
            except BackendUnavailableError as e:
                e.at_map = True  # type: ignore[attr-defined]
                raise


class _Plan:
    """The route chosen for one object: its option, each step's cost, the outputs mapped while choosing it."""

    __slots__ = ("option", "costs", "held", "copies")

    def __init__(self, option: _Option, costs: list[Cost], held: list[Any]):
        self.option, self.costs, self.held = option, costs, held
        self.copies = costs.count(Cost.COPY)


def _plan(obj: Tensor | Frame, s: MemoryType, d: MemoryType, dctx: Context | None, mode: AccessMode,
          allow_copy: bool) -> _Plan:
    """The cheapest route for ``obj``, each step costed for the input it really gets (``MemoryMapperChain.walk``:
    the steps that are zero-copy for their input are mapped while choosing, so a later step sees the object the
    step before makes, and a step that refuses its input at map time shows here). Routes are tried in the order
    of what no input can beat (steps that always copy, steps, names) until none can beat the best found: the
    direct edge, when it takes the input without a copy, is the only one tried. route() releases what was mapped;
    map() keeps the chosen route's outputs and maps its remaining steps. Raises CopyRequiredError when the cheapest
    route copies and ``allow_copy`` is False, else the first refusal when no route takes the object."""
    best: _Plan | None = None
    best_key: tuple[Any, ...] | None = None
    error: InteropError | None = None
    refused: tuple[InteropError, int] | None = None  # the shortest route refusing the input at map time, its steps
    try:
        for o in _all_options(s, d, obj.context, dctx, mode):
            if best_key is not None and best_key <= o.floor:
                break
            n = o.rank[0]
            try:
                c0 = _first_cost(o, obj, mode)
                if best_key is not None and (c0 is Cost.COPY) + o.floor[0] > best_key[0]:
                    continue  # cannot beat the best: not mapped
                costs, held = o.chain.walk(obj, mode, c0) if c0 is Cost.ZERO_COPY else ([c0], [])
            except _REFUSALS as e:
                error = error or e
                if getattr(e, "at_map", False) and (refused is None or n < refused[1]):
                    refused = (e, n)
                continue
            except InteropError as e:
                if n == 1:
                    raise  # the direct edge refuses this input as bad: no other route makes it good
                error = error or e
                continue
            try:
                if len(costs) < n:  # the first step copies: the steps after it count their worst case
                    costs += [m.cost(None, mode) for m in o.chain._mappers[1:]]
                if allow_copy or Cost.COPY not in costs:  # a copy refused anyway is reported as such
                    _runs_here(o.chain)
            except InteropError as e:
                release_outputs(obj, held)
                error = error or e
                if getattr(e, "at_map", False) and (refused is None or n < refused[1]):
                    refused = (e, n)
                continue
            plan = _Plan(o, costs, held)
            key = (plan.copies, n, o.rank[1])
            if best_key is None or key < best_key:
                if best is not None:
                    release_outputs(obj, best.held)
                best, best_key = plan, key
            else:
                release_outputs(obj, held)
    except BaseException:
        if best is not None:
            release_outputs(obj, best.held)
        raise
    if best is None:
        if error is not None:
            raise error
        raise _no_route(s, d)
    if best.copies and not allow_copy:
        release_outputs(obj, best.held)
        step = best.option.chain._mappers[best.costs.index(Cost.COPY)]
        if refused is not None and refused[1] <= best.option.rank[0]:
            # a route no longer than the copying one took the input by its cost but refused it when mapped (or
            # cannot run here): that is the news, the copying route the way out
            error = refused[0]
            hint = f"; the next route, {best.option.chain!r}, copies at step {step.name}: pass allow_copy=True to try it"
            if isinstance(error, BackendUnavailableError):
                raise BackendUnavailableError(f"{error}{hint}", backend=error.backend, extra=error.extra) from error
            raise type(error)(f"{error}{hint}") from error
        raise CopyRequiredError(
            f"the route for this {s.name} {'frame' if isinstance(obj, Frame) else 'tensor'} to {d.name} copies "
            f"in mode {mode.name}; it copies at step {step.name} ({step.src.name} -> {step.dst.name}): "
            f"pass allow_copy=True to accept it", step=type(step), src=s, dst=d, reachable=reachable(s))
    return best


def route_object(obj: Any, dst: object, *, allow_copy: bool = False,
                 mode: AccessMode = AccessMode.READ) -> MemoryMapperChain:
    """The cheapest chain for this very object (a Tensor, Frame, or anything interop.wrap() takes) in ``mode``:
    the chain ``interop.map(obj, dst, mode=mode)`` runs.

    Each step is costed for the input it would really get (steps that are zero-copy for their input are mapped to
    find out, then released; see ``_plan``). Without ``allow_copy`` a chain that copies for this object is refused
    with CopyRequiredError; when no route can take the object, the first refusal is raised (the error
    ``interop.map()`` would raise).
    """
    if type(mode) is not AccessMode:
        mode = check_mode(mode)
    if not isinstance(obj, (Tensor, Frame)):
        obj = wrap_native(obj)
    s, sctx = obj.memory_type, obj.context
    d, dctx = _endpoint(dst, "route destination")
    if s is d:
        return _same_type(s, sctx, dctx)
    plan = _plan(obj, s, d, dctx, mode, allow_copy)
    release_outputs(obj, plan.held)
    return plan.option.chain


def map_object(obj: Tensor | Frame, d: MemoryType, dctx: Context | None, mode: AccessMode,
               allow_copy: bool) -> tuple[Any, MemoryMapperChain]:
    """interop.map()'s general path: the route ``route_object`` names, mapped (the steps mapped while choosing it
    are kept, the rest mapped now), and the chain."""
    s, sctx = obj.memory_type, obj.context
    plan = _plan(obj, s, d, dctx, mode, allow_copy)
    mappers = plan.option.chain._mappers
    out: Any = plan.held[-1] if plan.held else obj
    for m in mappers[len(plan.held):]:
        out = m.map(out, mode, allow_copy=allow_copy)
    if dctx is None and len(mappers) == 1 and len(plan.held) == 1 and plan.costs[0] is Cost.ZERO_COPY:
        options = _all_options(s, d, sctx, None, mode)
        if options and options[0] is plan.option:
            _remember_direct(obj, d, mode, allow_copy, sctx, mappers[0])
    return out, plan.option.chain


# (input class, source type, id(source context), destination, mode, allow_copy) -> (source context, mapper, size of
# the mapper registry): interop.map()'s one-step path for inputs whose route was planned before (a received frame,
# a decoded frame, once per frame). Only the first route of the ranked options is remembered, and only when it took
# its input in one zero-copy step: for any input that this step takes without a copy again, _plan would choose the
# same step (no other route can beat it), so ``direct_map`` gives what the general path gives. An input the step
# would copy or refuses takes the general path.
_direct: dict[tuple[Any, ...], tuple[Context | None, MemoryMapper, int]] = {}
_REGISTRY = _registry_of_mappers


def _remember_direct(obj: Any, d: MemoryType, mode: AccessMode, allow_copy: bool, sctx: Context | None,
                     m: MemoryMapper) -> None:
    if len(_direct) >= 256:
        _direct.clear()
    # holds the context, so its id cannot be reused while the entry lives
    _direct[(type(obj), obj.memory_type, id(sctx), d, mode, allow_copy)] = (sctx, m, len(_REGISTRY))


def direct_map(obj: Tensor | Frame, sctx: Context | None, d: MemoryType, mode: AccessMode, allow_copy: bool) -> Any:
    """``obj`` (whose context is ``sctx``) mapped to ``d`` (no destination context) by the one step planned before
    for its kind, or None when there is none (or the step would not take this very input without a copy): then
    map_object() decides."""
    hit = _direct.get((type(obj), obj.memory_type, id(sctx), d, mode, allow_copy))
    if hit is None or hit[0] is not sctx or hit[2] != len(_REGISTRY):  # a mapper registered since: plan again
        return None
    m = hit[1]
    try:
        if m.cost(obj, mode) is not Cost.ZERO_COPY:
            return None
        return m.map(obj, mode, allow_copy=False)  # as _plan maps a zero-copy first step
    except InteropError:
        return None  # the general path raises what it raises for this input (or finds another route)


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
        if o.tail is None or tuple(type(m) for m in o.chain._mappers) == first:
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
    _direct.clear()
