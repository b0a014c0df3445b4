"""MemoryMapper (one hop between memory types) and MemoryMapperChain (several hops).

Writing a mapper (one module ``mappers/<src>_to_<dst>.py``, one ``@register``ed class): declare

- ``src``, ``dst``: the memory types of the edge;
- ``inputs``: the tensor class(es) of ``src`` the mapper takes (each plane of a frame is checked; another class is
  a WrongMemoryError, so routing tries another edge);
- ``output_contexts``: the Context class(es) the output may live in (a given output context of another class is a
  ContextMismatchError; no output context means ``default_output_context()``, the registered default of ``dst``);
- ``zero_copy`` (the edge's worst case over every input kind and access mode) and ``may_copy`` (True when it is
  zero-copy for some inputs and a copy for others); such an edge overrides ``input_cost(obj, mode)``;
- ``requires``, ``extra``, ``tier`` only when it needs more than its two backends' descriptors say (they are derived
  from them, ``backends.edge_needs``; ``missing()`` says why it cannot run here, without importing);

and implement ``map_tensor`` and/or ``map_frame`` (``map_planes`` for planes mapped together). The base class does
the rest before those run: the memory type and input class check, the input context check, the read-only refusal
(``mode.writes`` of a read-only input is an InvalidTensorError, unless ``refuse_read_only = False``: the mapper
copies such input itself) and, after, READ outputs are made read-only. A mapper that copies calls
``copying(nbytes, allow_copy, why)`` first (refused without ``allow_copy``, counted otherwise). An edge that cannot
take an input it sees only while mapping raises WrongMemoryError, and ``interop.map()`` tries the next route. A
mapper never runs another mapper: a chain is the router's job.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .backends import (
    backend_of,
    edge_needs,
    find_wrapper,
    install_hint,
    load_all,
    module_available,
    require,
    wrapper_names,
)
from .errors import (
    BackendUnavailableError,
    ContextMismatchError,
    CopyRequiredError,
    InteropError,
    InvalidTensorError,
    UnsupportedTypeError,
    WrongMemoryError,
)
from .frame import Frame
from .meter import record_copy
from .tensor import Tensor
from .types import AccessMode, MemoryType, check_mode

if TYPE_CHECKING:
    from .context import Context

_registry: dict[tuple[MemoryType, MemoryType], type[MemoryMapper]] = {}


class Cost(enum.Enum):
    """What one edge does with one input in one access mode."""

    ZERO_COPY = "zero-copy"
    COPY = "copy"


def cost_label(m: Any) -> str:
    """'zero-copy', 'may copy' or 'copy': an edge's (class or instance) static worst case, as routes show it."""
    return "zero-copy" if m.zero_copy else "may copy" if m.may_copy else "copy"


def wrap_native(native: Any, *, info: Any = None, format: Any = None, context: Any = None) -> Tensor | Frame:
    """A framework's object as a Tensor or Frame through the wrapper registered for its class (interop.wrap()'s
    general path; a Tensor or Frame is returned as it is when nothing else is asked)."""
    if info is None and format is None and context is None and isinstance(native, (Tensor, Frame)):
        return native
    load_all()
    w = find_wrapper(native)
    if w is None:
        raise UnsupportedTypeError(
            f"interop cannot wrap a {type(native).__module__}.{type(native).__qualname__}; it wraps: "
            f"{', '.join(wrapper_names())} (and anything with the buffer protocol or __dlpack__, given info= when shapeless)")
    return w.wrap(native, info=info, format=format, context=context)  # type: ignore[no-any-return]


class _FromBackends:
    """A mapper attribute (``requires``, ``extra``, ``tier``) derived from its two backends' descriptors
    (``backends.edge_needs(src, dst)``) unless the class sets its own."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, cls: Any) -> Any:
        return getattr(edge_needs(cls.src, cls.dst), self.name)


def _backend_name(mt: MemoryType) -> str:
    """The declared backend's name (BackendUnavailableError.backend), else the memory type's value."""
    try:
        return backend_of(mt).name
    except UnsupportedTypeError:  # a memory type whose tensors module declares no Backend yet
        return mt.value


def _read_only(out: Any) -> None:
    """A READ mapping's output is read-only, whatever the mapper built (writes to it would be lost or corrupt)."""
    if type(out) is Frame or isinstance(out, Frame):
        for t in out._tensors:
            if t._writable:
                t._writable = False
    elif out._writable:
        out._writable = False


class MemoryMapper:
    """Maps a Tensor or Frame of memory type ``src`` into ``dst``; the output's ``parent`` is the input.

    ``zero_copy`` is the edge's worst case (routing by type uses it); ``may_copy`` marks an edge that is zero-copy
    for some inputs and copies for others; ``cost(obj, mode)`` is what it does with one input (routing by object
    uses it). A mapper counts only what it really copies.
    """

    src: ClassVar[MemoryType]
    dst: ClassVar[MemoryType]
    #: the edge's worst case over every input kind and access mode
    zero_copy: ClassVar[bool] = True
    #: zero-copy for some inputs or modes, a copy for others (``zero_copy`` is then False): ``input_cost`` says which
    may_copy: ClassVar[bool] = False
    #: the tensor classes this mapper takes (every plane of a frame is checked); () takes any Tensor of ``src``
    inputs: ClassVar[tuple[type, ...]] = ()
    #: the Context classes an output context may be; () takes any
    output_contexts: ClassVar[tuple[type, ...]] = ()
    #: False for a mapper that handles WRITE of read-only input itself (by copying it, counted)
    refuse_read_only: ClassVar[bool] = True
    #: Python modules the mapper needs, the pip extra that installs them, and the tier of the hardware it needs
    #: ("A" every machine, "B" CUDA, "C" VA-API / Level Zero / NPU): derived from the descriptors of ``src`` and
    #: ``dst`` (``backends.edge_needs``); a mapper that needs more sets them on its class
    requires: ClassVar[tuple[str, ...]] = _FromBackends()  # type: ignore[assignment]
    extra: ClassVar[str | None] = _FromBackends()  # type: ignore[assignment]
    tier: ClassVar[str] = _FromBackends()  # type: ignore[assignment]
    name: ClassVar[str] = "mapper"
    #: True for an edge that only suits inputs produced as such (exportable CUDA allocations for CUDA -> OPENCL):
    #: routing uses it as the first step of a route, never after another mapper made the input.
    first_only: ClassVar[bool] = False
    _ready: ClassVar[bool] = False

    def __init__(self, input_context: Context | None = None, output_context: Context | None = None):
        self._input_context = input_context
        self._output_context = output_context

    @property
    def input_context(self) -> Context | None:
        return self._input_context

    @property
    def output_context(self) -> Context | None:
        return self._output_context

    # -- availability ---------------------------------------------------------------------------------
    @classmethod
    def missing(cls) -> str | None:
        """Why this mapper cannot run here (a missing module), or None. Does not import anything."""
        for mod in cls.requires:
            if not module_available(mod):
                return f"needs the Python module '{mod}': {install_hint(mod, cls.extra)}"
        return None

    def _require(self) -> None:
        cls = type(self)
        why = self.missing()
        backend = _backend_name(self.dst)
        if why is not None:
            raise BackendUnavailableError(f"step {self.name} ({self.src.name} -> {self.dst.name}) cannot run here: {why}",
                                          backend=backend, extra=self.extra)
        for mod in self.requires:
            require(mod, backend, self.extra)
        cls._ready = True  # imported once; later maps skip the checks

    # -- contexts ---------------------------------------------------------------------------------------
    def out_context(self) -> Any:
        """The context outputs live in: the mapper's output context (checked against ``output_contexts``), else
        ``default_output_context()``."""
        ctx = self._output_context
        if ctx is None:
            return self.default_output_context()
        want = self.output_contexts
        if want and not isinstance(ctx, want):
            raise ContextMismatchError(f"{self.name} needs a {' or '.join(c.__name__ for c in want)} as output "
                                       f"context, not {ctx!r}")
        return ctx

    def default_output_context(self) -> Any:
        """The output context when none was given: the registered default of ``dst`` (override for another)."""
        from .context import Context

        return Context.default(self.dst)

    def _check_context(self, obj: Tensor | Frame) -> None:
        """Refuse input from another context than the one this mapper was made for."""
        ctx = obj.context
        if self._input_context is not None and ctx is not None and ctx != self._input_context:
            raise ContextMismatchError(
                f"{self.name} was made for input context {self._input_context!r}, the input belongs to {ctx!r}; "
                f"map it through interop.map(obj, to) so the route starts from its own context")

    # -- input checks and costs -------------------------------------------------------------------------
    def _check(self, obj: Any, mode: AccessMode) -> bool:
        """The checks every input gets; True for a Frame."""
        is_frame = type(obj) is Frame or isinstance(obj, Frame)
        if not is_frame and not isinstance(obj, Tensor):
            raise WrongMemoryError(
                f"{self.name} maps interop Tensors and Frames, not a {type(obj).__module__}.{type(obj).__qualname__}; "
                f"use interop.map() to find a route (interop.map(obj, to) wraps framework objects), or wrap it "
                f"first with interop.wrap()")
        if obj.memory_type is not self.src:
            raise InvalidTensorError(f"{self.name} maps {self.src.name} memory, got a {obj.memory_type.name} "
                                     f"{'frame' if is_frame else 'tensor'}; use interop.map() to find a route")
        if self._input_context is not None:
            self._check_context(obj)
        planes = obj._tensors if is_frame else (obj,)
        want = self.inputs
        if want:
            for t in planes:
                if not isinstance(t, want):
                    raise WrongMemoryError(f"{self.name} maps {' or '.join(c.__name__ for c in want)}s, not "
                                           f"{type(t).__name__}")
        if mode.writes and self.refuse_read_only:
            for t in planes:
                if not t.writable:
                    raise InvalidTensorError(
                        f"{self.name}: this {self.src.name} {'frame' if is_frame else 'tensor'} is read-only (e.g. a "
                        f"decoder's reference frame, or a read-only mapping): map it with AccessMode.READ, or map a "
                        f"writeable copy")
        return is_frame

    def cost(self, obj: Tensor | Frame | None, mode: AccessMode = AccessMode.READ) -> Cost:
        """What mapping ``obj`` in ``mode`` does here: Cost.ZERO_COPY or Cost.COPY; raises WrongMemoryError for an
        input this edge cannot take (and the error map() would raise for one it refuses). ``obj=None``: an input a
        previous step of a route makes (its kind unknown): the worst case for ``mode``."""
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
        if obj is not None:
            if self._check(obj, mode) is False and type(self).map_tensor is MemoryMapper.map_tensor:
                # a mapper of frames only: routing must not plan a tensor through it (map() would refuse it)
                raise WrongMemoryError(f"{self.name} maps frames only, not a single {self.src.name} tensor")
        if self.output_contexts and self._output_context is not None:
            self.out_context()  # a given output context of the wrong class is refused before routing picks this
        return self.input_cost(obj, mode)

    def input_cost(self, obj: Tensor | Frame | None, mode: AccessMode) -> Cost:
        """Hook: the cost of an input that passed the common checks (None: an input of unknown kind, give the worst
        case for ``mode``); raise WrongMemoryError for an input this edge cannot take. The default is the static
        worst case. An edge that declares ``may_copy``, or takes only some kinds of its inputs, overrides it with
        the rule its ``map_tensor`` / ``map_frame`` follow."""
        return Cost.ZERO_COPY if self.zero_copy else Cost.COPY

    # -- mapping --------------------------------------------------------------------------------------
    def map_native(self, native: Any, mode: AccessMode, allow_copy: bool) -> Frame | None:
        """Optional hook: interop.map() of a framework's object (a decoded av.VideoFrame) in one step, used by
        interop.map() for one-step routes of a mapper that overrides it. Return None for any input not mapped
        exactly as the general path would (which then runs). It skips every check: it must do its own."""
        return None

    def map(self, obj: Tensor | Frame, mode: AccessMode = AccessMode.READ, *, allow_copy: bool = False) -> Any:
        """Map a Tensor or Frame of ``src`` (interop.map() and route chains wrap framework objects; this does not)."""
        # This runs once per frame per step: the checks are ordered so the common case costs little.
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
        is_frame = self._check(obj, mode)
        if not type(self).__dict__.get("_ready"):
            self._require()
        out: Tensor | Frame
        if is_frame:
            out = self.map_frame(obj, mode, allow_copy)  # type: ignore[arg-type]
        else:
            out = self.map_tensor(obj, mode, allow_copy)  # type: ignore[arg-type]
        if not mode.writes:
            _read_only(out)
        return out

    def map_tensor(self, t: Tensor, mode: AccessMode, allow_copy: bool) -> Tensor:
        raise UnsupportedTypeError(f"{self.name} maps frames only")

    def map_planes(self, tensors: list[Tensor], mode: AccessMode, allow_copy: bool) -> list[Tensor]:
        """A frame's planes mapped, in order: one by one through ``map_tensor`` unless a mapper whose planes must
        be mapped together (one buffer, one import, one sync) overrides this."""
        return [self.map_tensor(t, mode, allow_copy) for t in tensors]

    def map_frame(self, f: Frame, mode: AccessMode, allow_copy: bool) -> Frame:
        planes = self.map_planes(f.tensors, mode, allow_copy)
        return f.derive(planes, context=planes[0].context)

    def copying(self, nbytes: int, allow_copy: bool, why: str = "") -> None:
        """Call before a copy: refuses it unless allowed (CopyRequiredError, with what is reachable from ``src``),
        then counts it in every open copy meter."""
        if not allow_copy:
            raise CopyRequiredError(
                f"{self.name} would copy {nbytes} bytes{': ' + why if why else ''}; pass allow_copy=True to accept the copy",
                step=type(self), src=self.src, dst=self.dst, reachable=reachable(self.src))
        record_copy(self.name, nbytes)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.src.name}->{self.dst.name} {cost_label(self)}>"

    def __str__(self) -> str:
        return f"{self.name} ({cost_label(self)})"


class MemoryMapperChain(MemoryMapper):
    """A mapper made of mappers, applied in order. The empty chain is the identity. Framework objects given to
    ``map`` are wrapped first."""

    name = "chain"

    def __init__(self, mappers: Sequence[MemoryMapper], input_context: Context | None = None,
                 output_context: Context | None = None):
        self._mappers = list(mappers)
        super().__init__(input_context if input_context is not None else (self._mappers[0].input_context if self._mappers else None),
                         output_context if output_context is not None else (self._mappers[-1].output_context if self._mappers else None))

    @property
    def mappers(self) -> list[MemoryMapper]:
        return list(self._mappers)

    @property
    def zero_copy(self) -> bool:  # type: ignore[override]
        """The worst case: True when no step can copy, for any input."""
        return all(m.zero_copy for m in self._mappers)

    @property
    def may_copy(self) -> bool:  # type: ignore[override]
        """True when no step always copies but some step may (by input kind or mode)."""
        return not self.zero_copy and all(m.zero_copy or m.may_copy for m in self._mappers)

    @property
    def copies(self) -> int:
        """Steps that may copy (the worst case)."""
        return sum(not m.zero_copy for m in self._mappers)

    def cost(self, obj: Tensor | Frame | None, mode: AccessMode = AccessMode.READ) -> Cost:
        """The chain's cost for ``obj``: what ``map(obj, mode)`` does (see ``step_costs``)."""
        return Cost.COPY if self.step_costs(obj, mode).count(Cost.COPY) else Cost.ZERO_COPY

    def step_costs(self, obj: Any, mode: AccessMode = AccessMode.READ) -> list[Cost]:
        """Each step's cost for ``obj`` (a native is wrapped first), each step costed for the input it would really
        get (``walk``); raises what the first refusing step raises. ``obj=None``: every step's worst case."""
        if obj is not None and not isinstance(obj, (Tensor, Frame)):
            obj = wrap_native(obj)
        costs, held = self.walk(obj, mode)
        release_outputs(obj, held)
        return costs

    def walk(self, obj: Tensor | Frame | None, mode: AccessMode,
             first: Cost | None = None) -> tuple[list[Cost], list[Any]]:
        """Cost every step for the input it would really get, as ``map(obj, mode)`` runs them.

        A step that is zero-copy for its input is mapped (``allow_copy=False``), so the next step is costed for the
        very object it gets and a step that refuses its input only at map time (WrongMemoryError,
        ContextMismatchError, BackendUnavailableError) refuses here. A step that copies is not mapped, and neither
        is one that raises another error at map time (it is mapped again, with the caller's ``allow_copy``, when the
        route runs): the steps after it count their worst case for ``mode``. Returns (each step's cost, the outputs
        mapped, in order, from the first step on: the caller keeps or releases them, see ``release_outputs``).
        Raises what the first refusing step raises, having released what it mapped. ``first``: the first step's
        cost for ``obj`` when the caller has it already."""
        costs: list[Cost] = []
        held: list[Any] = []
        cur: Any = obj
        try:
            for m in self._mappers:
                c = first if first is not None and not costs else m.cost(cur, mode)
                costs.append(c)
                if cur is None or c is not Cost.ZERO_COPY:
                    cur = None
                    continue
                try:
                    cur = m.map(cur, mode, allow_copy=False)
                except (ContextMismatchError, BackendUnavailableError) as e:  # WrongMemoryError is one of the first
                    e.at_map = True  # type: ignore[union-attr]  # routing tells refusals at map time from costs
                    raise
                except InteropError:
                    cur = None  # not a refusal of this input: the route maps the step again when it runs
                    continue
                held.append(cur)
        except BaseException:
            release_outputs(obj, held)
            raise
        return costs, held

    def map(self, obj: Any, mode: AccessMode = AccessMode.READ, *, allow_copy: bool = False) -> Any:
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
        if not isinstance(obj, (Tensor, Frame)):
            obj = wrap_native(obj)
        mappers = self._mappers
        if len(mappers) == 1:
            return mappers[0].map(obj, mode, allow_copy=allow_copy)
        out = obj
        for m in mappers:
            out = m.map(out, mode, allow_copy=allow_copy)
        return out

    def __len__(self) -> int:
        return len(self._mappers)

    def __str__(self) -> str:
        if not self._mappers:
            return "identity"
        return " -> ".join(f"{m.name} ({cost_label(m)})" for m in self._mappers)

    def __repr__(self) -> str:
        if not self._mappers:
            return "<MemoryMapperChain identity>"
        steps = " -> ".join([self._mappers[0].src.name] + [m.dst.name for m in self._mappers])
        if self.zero_copy:
            kind = "zero-copy"
        else:
            n = self.copies
            kind = f"{'may copy: ' if self.may_copy else ''}{n} cop{'y' if n == 1 else 'ies'}"
        return f"<MemoryMapperChain {steps} {kind}>"


def _planes(x: Any) -> list[Any]:
    return list(x._tensors) if isinstance(x, Frame) else [x]


def _shares(out: Any, inp: Any) -> bool:
    """True when ``out`` is ``inp`` or holds one of its plane objects (releasing it would release the input)."""
    if out is inp:
        return True
    mine = {id(t) for t in _planes(inp)}
    return any(id(t) in mine for t in _planes(out))


def release_outputs(obj: Any, outputs: list[Any]) -> None:
    """Release the outputs ``walk`` mapped from ``obj`` and nobody will use, the last first; an output over its
    input's own plane objects is left to the garbage collector (releasing it would release that input)."""
    prev = obj
    mine = []
    for out in outputs:
        if not _shares(out, prev):
            mine.append(out)
        prev = out
    for out in reversed(mine):
        out.release()


def register(cls: type[MemoryMapper]) -> type[MemoryMapper]:
    """Class decorator: add a mapper to the static routing graph (whether or not its framework is installed)."""
    if "name" not in cls.__dict__:
        cls.name = f"{cls.src.value}_to_{cls.dst.value}"
    if cls.zero_copy and cls.may_copy:
        raise RuntimeError(f"{cls.__name__}: may_copy=True needs zero_copy=False (zero_copy is the worst case)")
    key = (cls.src, cls.dst)
    if key in _registry and _registry[key] is not cls:
        raise RuntimeError(f"two mappers for {key}: {_registry[key].__name__} and {cls.__name__}")
    _registry[key] = cls
    return cls


def registered() -> dict[tuple[MemoryType, MemoryType], type[MemoryMapper]]:
    load_all()
    return dict(_registry)


def reachable(src: MemoryType) -> frozenset[MemoryType]:
    """Every memory type some route from ``src`` reaches."""
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
