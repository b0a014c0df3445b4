"""MemoryMapper (one hop between memory types) and MemoryMapperChain (several hops)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .backends import module_available, require
from .errors import (
    BackendUnavailableError,
    ContextMismatchError,
    CopyRequiredError,
    InvalidTensorError,
    UnsupportedTypeError,
)
from .frame import Frame
from .meter import record_copy
from .tensor import Tensor
from .types import AccessMode, MemoryType, check_mode

if TYPE_CHECKING:
    from .context import Context

_registry: dict[tuple[MemoryType, MemoryType], type[MemoryMapper]] = {}


class MemoryMapper:
    """Maps a Tensor or Frame of memory type ``src`` into ``dst``.

    ``zero_copy`` is the edge's worst case (routing uses it); a mapper that copies only for some inputs or modes
    declares False and counts only what it really copies. The output's ``parent`` is the input.
    """

    src: ClassVar[MemoryType]
    dst: ClassVar[MemoryType]
    zero_copy: ClassVar[bool] = True
    #: Python modules the mapper needs, and the pip extra that installs them
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None
    #: tier of the hardware it needs: "A" (every machine), "B" (CUDA), "C" (VA-API / Level Zero / NPU)
    tier: ClassVar[str] = "A"
    name: ClassVar[str] = "mapper"
    #: True for an edge that only suits inputs produced as such (NVDEC frames for FFMPEG -> CUDA): routing uses
    #: it as the first step of a route, never after another mapper made the input.
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
                hint = f"pip install 'interop[{cls.extra}]'" if cls.extra else f"install '{mod}'"
                return f"needs the Python module '{mod}': {hint}"
        return None

    def _require(self) -> None:
        cls = type(self)
        why = self.missing()
        if why is not None:
            raise BackendUnavailableError(f"step {self.name} ({self.src.name} -> {self.dst.name}) cannot run here: {why}",
                                          backend=self.dst.value, extra=self.extra)
        for mod in self.requires:
            require(mod, self.dst.value, self.extra)
        cls._ready = True  # imported once; later maps skip the checks

    # -- mapping --------------------------------------------------------------------------------------
    def map(self, obj: Tensor | Frame, mode: AccessMode = AccessMode.READ, *, allow_copy: bool = False) -> Any:
        # This runs once per frame per step: the checks are ordered so the common case costs little.
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
        is_frame = type(obj) is Frame or isinstance(obj, Frame)
        if not is_frame and not isinstance(obj, Tensor):
            from .api import wrap

            obj = wrap(obj)
            is_frame = isinstance(obj, Frame)
        if obj.memory_type is not self.src:
            raise InvalidTensorError(f"{self.name} maps {self.src.name} memory, got a {obj.memory_type.name} "
                                     f"{'frame' if is_frame else 'tensor'}; use interop.map() to find a route")
        if not type(self).__dict__.get("_ready"):
            self._require()
        if self._input_context is not None:
            self.check_context(obj)
        if is_frame:
            return self.map_frame(obj, mode, allow_copy)  # type: ignore[arg-type]
        return self.map_tensor(obj, mode, allow_copy)  # type: ignore[arg-type]

    def check_context(self, obj: Tensor | Frame) -> None:
        """Refuse input from another context than the one this mapper was made for."""
        ctx = obj.context
        if self._input_context is not None and ctx is not None and ctx != self._input_context:
            raise ContextMismatchError(
                f"{self.name} was made for input context {self._input_context!r}, the input belongs to {ctx!r}; "
                f"map it through interop.map(obj, to) so the route starts from its own context")

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
        """Call before a copy: refuses it unless allowed, then counts it in every open copy meter."""
        if not allow_copy:
            raise CopyRequiredError(
                f"{self.name} would copy {nbytes} bytes{': ' + why if why else ''}; pass allow_copy=True to accept the copy",
                step=type(self), src=self.src, dst=self.dst)
        record_copy(self.name, nbytes)

    def __repr__(self) -> str:
        kind = "zero-copy" if self.zero_copy else "copy"
        return f"<{type(self).__name__} {self.src.name}->{self.dst.name} {kind}>"

    def __str__(self) -> str:
        return f"{self.name} ({'zero-copy' if self.zero_copy else 'copy'})"


class MemoryMapperChain(MemoryMapper):
    """A mapper made of mappers, applied in order. The empty chain is the identity."""

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
        return all(m.zero_copy for m in self._mappers)

    @property
    def copies(self) -> int:
        return sum(not m.zero_copy for m in self._mappers)

    def map(self, obj: Tensor | Frame, mode: AccessMode = AccessMode.READ, *, allow_copy: bool = False) -> Any:
        if type(mode) is not AccessMode:
            mode = check_mode(mode)
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
        return " -> ".join(f"{m.name} ({'zero-copy' if m.zero_copy else 'copy'})" for m in self._mappers)

    def __repr__(self) -> str:
        if not self._mappers:
            return "<MemoryMapperChain identity>"
        steps = " -> ".join([self._mappers[0].src.name] + [m.dst.name for m in self._mappers])
        return f"<MemoryMapperChain {steps} {'zero-copy' if self.zero_copy else f'{self.copies} copies'}>"


def register(cls: type[MemoryMapper]) -> type[MemoryMapper]:
    """Class decorator: add a mapper to the static routing graph (whether or not its framework is installed)."""
    if "name" not in cls.__dict__:
        cls.name = f"{cls.src.value}_to_{cls.dst.value}"
    key = (cls.src, cls.dst)
    if key in _registry and _registry[key] is not cls:
        raise RuntimeError(f"two mappers for {key}: {_registry[key].__name__} and {cls.__name__}")
    _registry[key] = cls
    return cls


def registered() -> dict[tuple[MemoryType, MemoryType], type[MemoryMapper]]:
    from .backends import load_all

    load_all()
    return dict(_registry)
