"""wrap() and map(): the two calls most users need."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, overload

from .context import Context
from .errors import BackendUnavailableError, ContextMismatchError, InteropError, UnsupportedTypeError
from .frame import Frame
from .info import TensorInfo
from .mapper import MemoryMapper, wrap_native
from .routing import alternatives, direct_map, map_object, route_object
from .tensor import Tensor
from .types import AccessMode, FrameFormat, MemoryType, check_bool, check_memory_type, check_mode

if TYPE_CHECKING:
    import numpy as np


class _VideoFrame(Protocol):
    """What a type checker knows of a decoded video frame (PyAV's VideoFrame): its planes and picture type. A
    structural type, not PyAV's own, so that the overloads below hold where PyAV or its types are missing (an import
    of its class would then be Any, and match every argument)."""

    @property
    def planes(self) -> Any: ...
    @property
    def pict_type(self) -> Any: ...

log = logging.getLogger("interop")

# exact class -> its Tensor constructor, for the objects wrap() gets once per frame (numpy arrays): registered by
# the backend that owns the class, so core names no backend. A class not here takes the wrapper registry's path.
_exact: dict[type, Callable[[Any], Tensor | Frame]] = {}


def register_exact_wrap(cls: type, make: Callable[[Any], Tensor | Frame]) -> None:
    """wrap(obj) with no other argument, for ``type(obj) is cls``, is ``make(obj)`` (which must give what the
    registered Wrapper gives): a backend's fast path for the objects that arrive once per frame."""
    _exact[cls] = make


# What comes back, for a type checker: a Frame stays a Frame and a Tensor a Tensor; a PyAV frame, or anything given
# a ``format``, becomes a Frame; a numpy array, or memory described by an ``info``, a Tensor; anything else one or
# the other.
@overload
def wrap(native: Frame, *, info: None = None, format: None = None, context: Context | None = None) -> Frame: ...
@overload
def wrap(native: Tensor, *, info: None = None, format: None = None, context: Context | None = None) -> Tensor: ...
@overload
def wrap(native: np.ndarray, *, info: TensorInfo | None = None, format: None = None,
         context: Context | None = None) -> Tensor: ...
@overload
def wrap(native: _VideoFrame, *, info: None = None, format: None = None, context: Context | None = None) -> Frame: ...
@overload
def wrap(native: Any, *, info: TensorInfo, format: None = None, context: Context | None = None) -> Tensor: ...
@overload
def wrap(native: Any, *, info: TensorInfo | None = None, format: FrameFormat,
         context: Context | None = None) -> Frame: ...
@overload
def wrap(native: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
         context: Context | None = None) -> Tensor | Frame: ...
def wrap(native: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
         context: Context | None = None) -> Tensor | Frame:
    """Wrap a framework's object as a Tensor (or a Frame, for video frames and for ``format=``), without copying.

    ``info`` describes shapeless memory (a raw cl.Buffer, USM memory, a buffer object); ``format`` turns a
    packed image buffer into a Frame of planes. A Tensor or Frame is returned as it is.
    """
    if info is None and format is None and context is None:
        make = _exact.get(type(native))
        if make is not None:  # the common case (a numpy array), kept cheap: it runs once per frame
            return make(native)
        if isinstance(native, (Tensor, Frame)):
            return native
    if info is not None and not isinstance(info, TensorInfo):
        raise UnsupportedTypeError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
    if format is not None and not isinstance(format, FrameFormat):
        raise UnsupportedTypeError(f"format must be an interop.FrameFormat, not {format!r}")
    if context is not None and not isinstance(context, Context):
        raise UnsupportedTypeError(f"context must be an interop.Context, not {type(context).__name__}")
    return wrap_native(native, info=info, format=format, context=context)


# As wrap(): a Frame (or a PyAV frame) maps to a Frame, a Tensor (or a numpy array) to a Tensor.
@overload
def map(obj: Tensor | np.ndarray, to: MemoryType | Context, *, mode: AccessMode = AccessMode.READ,
        context: Context | None = None, allow_copy: bool = False) -> Tensor: ...
@overload
def map(obj: Frame | _VideoFrame, to: MemoryType | Context, *, mode: AccessMode = AccessMode.READ,
        context: Context | None = None, allow_copy: bool = False) -> Frame: ...
@overload
def map(obj: Any, to: MemoryType | Context, *, mode: AccessMode = AccessMode.READ, context: Context | None = None,
        allow_copy: bool = False) -> Tensor | Frame: ...
def map(obj: Any, to: MemoryType | Context, *, mode: AccessMode = AccessMode.READ, context: Context | None = None,
        allow_copy: bool = False) -> Tensor | Frame:
    """Map ``obj`` (a Tensor, Frame, or anything wrap() takes) into memory type or context ``to``.

    The route is chosen by what each route does with this object in ``mode`` (interop.route(obj, to, mode=...)
    names the same chain); one that copies is refused unless ``allow_copy=True``, and every copy is counted by
    copy_meter(). A step that cannot run here or cannot take the input (WrongMemoryError) makes map() try the next
    route. Mapping to the object's own type and context returns it unchanged.
    """
    if allow_copy is not False and allow_copy is not True:
        allow_copy = check_bool(allow_copy, "allow_copy")
    if type(to) is MemoryType and context is None:  # a decoded frame, mapped in one step: this runs per frame
        one_step = _one_step.get((type(obj), to))
        if one_step is not None:
            out = one_step(obj, mode, allow_copy)  # None (e.g. not READ, a hardware frame): the general path
            if out is not None:
                return out  # type: ignore[no-any-return]
    if type(mode) is not AccessMode:
        mode = check_mode(mode)
    dst_ctx: Context | None
    if type(to) is MemoryType and context is None:  # the common case, first: this runs once per frame
        dst_type, dst_ctx = to, None
    elif isinstance(to, Context):
        if context is not None:
            raise UnsupportedTypeError("give the destination Context either as `to` or as `context=`, not both")
        dst_type, dst_ctx = to.memory_type, to
    else:
        dst_type, dst_ctx = check_memory_type(to, "to"), context
        if dst_ctx is not None and not isinstance(dst_ctx, Context):
            raise UnsupportedTypeError(f"context must be an interop.Context, not {type(dst_ctx).__name__}")
        if dst_ctx is not None and dst_ctx.memory_type is not dst_type:
            raise UnsupportedTypeError(f"context {dst_ctx!r} is a {dst_ctx.memory_type.name} context, not {dst_type.name}")
    native = None
    if not isinstance(obj, (Tensor, Frame)):
        native = obj
        obj = wrap(obj)
    src_ctx = obj.context
    if obj.memory_type is dst_type and (dst_ctx is None or src_ctx is None or src_ctx == dst_ctx):
        return obj
    if dst_ctx is None and native is None:
        out = direct_map(obj, src_ctx, dst_type, mode, allow_copy)
        if out is not None:
            return out
    try:
        out, chain = map_object(obj, dst_type, dst_ctx, mode, allow_copy)
    except (BackendUnavailableError, ContextMismatchError) as first:
        # Only a step after a copying one can refuse here (routing maps the steps that are zero-copy for their
        # input while choosing the route, so their refusals never get this far): try the routes after it.
        if dst_ctx is not None:
            raise  # the caller named the destination context: never swap it for another route silently
        chain = route_object(obj, dst_type, allow_copy=allow_copy, mode=mode)
        for alt in alternatives(chain, allow_copy, None, obj=obj, mode=mode):
            try:
                out = alt.map(obj, mode, allow_copy=allow_copy)
            except InteropError:
                continue
            log.info("route %r cannot run here (%s); used %r", chain, first, alt)
            return out
        raise
    if native is not None and dst_ctx is None:
        _learn(type(native), dst_type, chain, src_ctx)
    return out


# (native class, destination) -> a mapper's map_native: interop.map() of a framework's object in one step, for
# the objects that arrive once per frame (decoded av.VideoFrames). Learned from the general path: where the
# route is one mapper with a map_native and no destination context, that gives the same result in one step.
# map_native returns None for any input whose wrapped context would not be this route's source (a hardware
# frame beside software ones), which then takes the general path.
_one_step: dict[tuple[type, MemoryType], Any] = {}


def _learn(cls: type, dst: MemoryType, chain: Any, src_ctx: Context | None) -> None:
    mappers = chain.mappers
    if len(mappers) == 1:
        m = mappers[0]
        if type(m).map_native is not MemoryMapper.map_native and m.output_context is None and \
                m.input_context in (None, src_ctx):
            _one_step[(cls, dst)] = m.map_native
