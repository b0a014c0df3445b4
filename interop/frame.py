"""Frame: an ordered list of plane tensors plus format, size, colour and timing metadata."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from types import TracebackType
from typing import Any

from .context import Context
from .errors import InvalidTensorError, UnsupportedTypeError
from .info import PlaneSpec, as_int, plane_layout
from .tensor import Tensor
from .types import ColorRange, ColorSpace, FrameFormat, MemoryType


class Frame:
    """A video frame as plane tensors of one memory type.

    Plane shapes on the CPU: Y (H, W); U and V (ceil(H/2), ceil(W/2)); UV (ceil(H/2), ceil(W/2), 2); packed
    (H, W, C). A device-side mapper may document another plane shape; ``width``/``height`` stay the visible size.
    """

    def __init__(self, tensors: Sequence[Tensor], format: FrameFormat, width: int | None = None,
                 height: int | None = None, *, context: Context | None = None, native: Any = None,
                 colorspace: ColorSpace | None = None, color_range: ColorRange | None = None,
                 pts: int | None = None, time_base: Fraction | None = None,
                 metadata: dict[str, Any] | None = None, parent: Any = None):
        if isinstance(tensors, Tensor):
            raise UnsupportedTypeError("tensors must be a list of interop.Tensor planes: pass [tensor], not the tensor")
        if not isinstance(tensors, (list, tuple)):
            raise UnsupportedTypeError(
                f"tensors must be a list of interop.Tensor planes, not {type(tensors).__name__}; wrap arrays with "
                f"interop.wrap(array) first, or use interop.wrap(buffer, format=...) for one packed buffer")
        tensors = list(tensors)
        if not isinstance(format, FrameFormat):
            raise UnsupportedTypeError(f"format must be an interop.FrameFormat, not {format!r}")
        if not tensors or not all(isinstance(t, Tensor) for t in tensors):
            raise InvalidTensorError("a Frame needs a non-empty list of interop.Tensor planes")
        if context is not None and not isinstance(context, Context):
            raise UnsupportedTypeError(f"context must be an interop.Context or None, not {type(context).__name__}")
        if metadata is not None and not isinstance(metadata, dict):
            raise UnsupportedTypeError(f"metadata must be a dict (or None), not {type(metadata).__name__}")
        colorspace, color_range = _colorspace(colorspace), _color_range(color_range)
        pts, time_base = _pts(pts), _time_base(time_base)
        kinds = {t.memory_type for t in tensors}
        if len(kinds) != 1:
            raise InvalidTensorError(f"all planes of a Frame must share one memory type, got {sorted(k.name for k in kinds)}")
        n = len(plane_layout(format))
        if len(tensors) != n:
            raise InvalidTensorError(f"a {format.name} frame has {n} planes, {len(tensors)} tensors were given")
        if width is None or height is None:
            shape = tensors[0].info.shape
            if len(shape) not in (2, 3):
                raise InvalidTensorError(
                    f"give width and height: the first plane is shaped {shape}, not (H, W[, C])")
            height, width = (shape[0], shape[1]) if height is None or width is None else (height, width)
        width, height = as_int(width, "width"), as_int(height, "height")
        if width <= 0 or height <= 0:
            raise InvalidTensorError(f"frame size {width}x{height} must be positive")
        for i, (spec, t) in enumerate(zip(plane_layout(format), tensors)):
            _check_plane(format, i, spec, t.info.shape, width, height)
        self._tensors = tensors
        self._format = format
        self._width = int(width)
        self._height = int(height)
        self._context = context if context is not None else tensors[0].context
        self._native = native
        self._attr_src: tuple[Callable[..., tuple[Any, Any, Any, Any]], Any] | None = None
        self._colorspace = colorspace
        self._color_range = color_range
        self._pts = pts
        self._time_base = time_base
        self.metadata: dict[str, Any] = {} if metadata is None else metadata
        self._parent = parent
        self._released = False

    # The state a frame starts in unless told otherwise, as class attributes: _unchecked() stores only the rest.
    _native: Any = None
    _attr_src: tuple[Callable[..., tuple[Any, Any, Any, Any]], Any] | None = None
    _colorspace: ColorSpace | None = None
    _color_range: ColorRange | None = None
    _pts: int | None = None
    _time_base: Fraction | None = None
    _released = False
    #: set by FramePool.acquire on the frames it makes: (the pool's layout token, the planes it made), so a sender
    #: can recognise an unaltered pool frame by identity instead of comparing its layout field by field
    _pool_token: tuple[Any, tuple[Tensor, ...]] | None = None
    #: True for a subclass that makes ``metadata`` on first use (_unchecked then leaves it unset)
    _metadata_on_demand = False

    @classmethod
    def _unchecked(cls, tensors: list[Tensor], format: FrameFormat, width: int, height: int, context: Context | None,
                 parent: Any, metadata: dict[str, Any] | None = None) -> Any:
        """A ``cls`` in the state ``__init__`` gives, without its checks: the one unchecked constructor of the
        per-frame paths (planes built by a mapper, consistent by construction; ``tensors`` a list the frame keeps).
        ``native`` and the colour / timing attributes start as the class defaults above: set them after."""
        f = object.__new__(cls)
        f._tensors = tensors
        f._format = format
        f._width = width
        f._height = height
        f._context = context
        f._parent = parent
        if not cls._metadata_on_demand:
            f.metadata = {} if metadata is None else metadata
        return f

    def derive(self, tensors: Sequence[Tensor], *, native: Any = None, context: Context | None = None,
               width: int | None = None, height: int | None = None, format: FrameFormat | None = None) -> Frame:
        """A frame mapped from this one: same format, size and metadata, new planes; this frame is its parent."""
        f = Frame(tensors, format or self._format, width or self._width, height or self._height,
                  context=context, native=native, metadata=dict(self.metadata), parent=self)
        f._copy_attrs(self)
        return f

    # -- colour and timing ----------------------------------------------------------------------------
    # A decoder's frame knows these, but reading them on every frame is not free (PyAV makes a new Fraction each
    # time), so a backend may give (fn, source) instead: fn(source) -> (colorspace, color_range, pts, time_base)
    # runs on first access, and mapped frames inherit the pending source rather than forcing it.
    def set_attr_source(self, fn: Callable[..., tuple[Any, Any, Any, Any]], source: Any) -> None:
        self._attr_src = (fn, source)

    def _copy_attrs(self, other: Frame) -> None:
        if other._attr_src is not None:
            self._attr_src = other._attr_src
        else:
            self._colorspace, self._color_range = other._colorspace, other._color_range
            self._pts, self._time_base = other._pts, other._time_base

    def _resolve(self) -> None:
        src = self._attr_src
        if src is not None:
            self._attr_src = None
            self._colorspace, self._color_range, self._pts, self._time_base = src[0](src[1])

    @property
    def colorspace(self) -> ColorSpace | None:
        self._resolve()
        return self._colorspace

    @colorspace.setter
    def colorspace(self, value: ColorSpace | None) -> None:
        self._resolve()
        self._colorspace = _colorspace(value)

    @property
    def color_range(self) -> ColorRange | None:
        self._resolve()
        return self._color_range

    @color_range.setter
    def color_range(self, value: ColorRange | None) -> None:
        self._resolve()
        self._color_range = _color_range(value)

    @property
    def pts(self) -> int | None:
        self._resolve()
        return self._pts

    @pts.setter
    def pts(self, value: int | None) -> None:
        self._resolve()
        self._pts = _pts(value)

    @property
    def time_base(self) -> Fraction | None:
        self._resolve()
        return self._time_base

    @time_base.setter
    def time_base(self, value: Fraction | None) -> None:
        self._resolve()
        self._time_base = _time_base(value)

    # -- container ------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._released:
            raise InvalidTensorError("this frame was released; decode, wrap or map it again")

    @property
    def tensors(self) -> list[Tensor]:
        self._check()
        return list(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __getitem__(self, i: int) -> Tensor:
        self._check()
        return self._tensors[i]

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.tensors)

    @property
    def format(self) -> FrameFormat:
        return self._format

    @property
    def width(self) -> int:
        return self._width

    @property
    def height(self) -> int:
        return self._height

    @property
    def memory_type(self) -> MemoryType:
        return self._tensors[0].memory_type

    @property
    def context(self) -> Context | None:
        return self._context

    @property
    def native(self) -> Any:
        self._check()
        return self._native

    @property
    def parent(self) -> Any:
        return self._parent

    # -- regions --------------------------------------------------------------------------------------
    def crop(self, x: int, y: int, w: int, h: int) -> Frame:
        """A zero-copy region: each plane is a view at an offset into the same memory."""
        self._check()
        x, y, w, h = (as_int(v, n) for v, n in ((x, "x"), (y, "y"), (w, "w"), (h, "h")))
        if min(x, y) < 0 or w <= 0 or h <= 0 or x + w > self._width or y + h > self._height:
            raise InvalidTensorError(f"crop x={x} y={y} w={w} h={h} is not inside the {self._width}x{self._height} frame")
        planes = []
        for spec, t in zip(plane_layout(self._format), self._tensors):
            if x % spec.sub_x or y % spec.sub_y or (w % spec.sub_x and x + w != self._width) or \
                    (h % spec.sub_y and y + h != self._height):
                raise InvalidTensorError(
                    f"{self._format.name} planes are subsampled {spec.sub_x}x{spec.sub_y}: crop on even coordinates and sizes")
            pw = -(-w // spec.sub_x)
            ph = -(-h // spec.sub_y)
            planes.append(t.region(x // spec.sub_x, y // spec.sub_y, pw, ph))
        f = self.derive(planes, native=None, width=w, height=h)
        return f

    # -- lifetime -------------------------------------------------------------------------------------
    def release(self) -> None:
        if self._released:
            return
        self._released = True
        for t in self._tensors:
            t.release()

    def __enter__(self) -> Frame:
        self._check()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        # Never raises (repr runs in tracebacks): a released frame, or one with a released plane, says so.
        head = f"<Frame {self._format.name} {self._width}x{self._height} {self.memory_type.name}"
        if self._released:
            return f"{head} released>"
        if any(t.released for t in self._tensors):
            return f"{head} planes released>"
        return f"{head} planes={[t._info.shape for t in self._tensors]}>"


def _check_plane(fmt: FrameFormat, i: int, spec: PlaneSpec, shape: tuple[int, ...], width: int, height: int) -> None:
    """Refuse a plane whose shape disagrees with a ``width`` x ``height`` frame of ``fmt``.

    Accepted: the documented CPU shapes, (rows, cols) or (rows, cols, C), with chroma rounded up; and the device-side
    (1, rows, pitch, C) of OpenVINO planes, whose third dimension is the row pitch in pixels (at least cols).
    Other ranks are device-specific layouts that the mapper making them documents; they are not checked here.
    """
    rows, cols = -(-height // spec.sub_y), -(-width // spec.sub_x)
    ch = max(spec.channels, 1)
    n = len(shape)
    if n == 2:
        ok = shape == (rows, cols) and spec.channels in (0, 1)
    elif n == 3:
        ok = shape == (rows, cols, ch)
    elif n == 4 and shape[0] == 1:
        ok = shape[1] == rows and shape[2] >= cols and shape[3] == ch
    else:
        return
    if not ok:
        want = (rows, cols) if spec.channels == 0 else (rows, cols, ch)
        raise InvalidTensorError(
            f"plane {i} ({spec.name}) of a {width}x{height} {fmt.name} frame must be shaped {want}, got {shape}: "
            f"give the frame's visible width and height (chroma planes are rounded up), or crop the planes to match")


def _colorspace(v: object) -> ColorSpace | None:
    if v is None or isinstance(v, ColorSpace):
        return v
    raise UnsupportedTypeError(f"colorspace must be an interop.ColorSpace or None, not {v!r}")


def _color_range(v: object) -> ColorRange | None:
    if v is None or isinstance(v, ColorRange):
        return v
    raise UnsupportedTypeError(f"color_range must be an interop.ColorRange or None, not {v!r}")


def _pts(v: object) -> int | None:
    return None if v is None else as_int(v, "pts")


def _time_base(v: object) -> Fraction | None:
    if v is None or isinstance(v, Fraction):
        return v
    raise UnsupportedTypeError(f"time_base must be a fractions.Fraction or None, not {v!r}: use Fraction(1, 25)")
