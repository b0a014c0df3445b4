"""TensorInfo (shape, dtype, byte strides) and the plane layout of every FrameFormat."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from ._cache import IdentityCache
from .errors import InvalidTensorError, UnsupportedFormatError
from .types import FrameFormat, as_dtype


def as_int(v: object, what: str) -> int:
    """An integer argument (numpy integers included), or InvalidTensorError naming it.

    Booleans are refused: ``True`` where a size belongs is a mistake (an argument in the wrong place), not a 1."""
    if type(v) is int:  # the common case, first
        return v
    if isinstance(v, (bool, np.bool_)):
        raise InvalidTensorError(f"{what} must be an integer, got the boolean {v!r}")
    try:
        return operator.index(v)  # type: ignore[arg-type]
    except TypeError as e:
        raise InvalidTensorError(f"{what} must be an integer, got {v!r}") from e


def _exact_ints(seq: tuple[object, ...]) -> bool:
    """True when every item is an int or a numpy integer: the values whose equality means equal validation."""
    for d in seq:
        if type(d) is not int and not isinstance(d, np.integer):
            return False
    return True


_INFO_CACHE: IdentityCache[tuple[object, ...], TensorInfo] = IdentityCache(4096)
_info_hit = _INFO_CACHE.get  # bound once: read on every TensorInfo(...) call


class TensorInfo:
    """Shape, dtype and strides **in bytes** of a tensor; ``strides=None`` means C-contiguous.

    Padded rows are normal (an 854-wide plane with an 896-byte pitch has strides (896, 1)).
    Refused with InvalidTensorError: negative dims or strides, strides that are not a multiple of
    the item size, strides that make elements overlap, unknown dtypes. Instances are immutable and
    interned: a video stream builds the same few layouts every frame, so they are validated once.
    """

    __slots__ = ("shape", "dtype", "strides", "__weakref__")
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...]

    def __new__(cls, shape: object, dtype: object = np.uint8, strides: object = None) -> TensorInfo:
        # Only tuples of integers are looked up: 4.0 == 4 and True == 1 hash alike, so a float or bool shape
        # would otherwise find the entry of a valid one and skip the validation that refuses it.
        # type(dtype) is in the key for the same reason (a dtype compares equal to some strings).
        key: tuple[object, ...] | None = None
        if type(shape) is tuple and (strides is None or (type(strides) is tuple and _exact_ints(strides))) \
                and _exact_ints(shape):
            key = (shape, type(dtype), dtype, strides)
            try:
                hit = _info_hit(key)
            except TypeError:  # an unhashable dtype-like: validate below, never cached
                key = None
            else:
                if hit is not None:
                    return hit
        self = object.__new__(cls)
        dims, dt, st = _validate(shape, dtype, strides)
        object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", dt)
        object.__setattr__(self, "strides", st)
        if key is not None:
            _INFO_CACHE.put(key, self)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TensorInfo is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorInfo):
            return NotImplemented
        return self is other or (self.shape == other.shape and self.dtype == other.dtype and self.strides == other.strides)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.str, self.strides))

    def __reduce__(self) -> tuple[object, ...]:
        return (TensorInfo, (self.shape, self.dtype.str, self.strides))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Logical size in bytes, padding excluded."""
        return self.size * self.itemsize

    @property
    def extent(self) -> int:
        """Bytes spanned from the first element to the end of the last one, padding included."""
        if self.size == 0:
            return 0
        return sum(s * (d - 1) for d, s in zip(self.shape, self.strides)) + self.itemsize

    @property
    def is_contiguous(self) -> bool:
        if self.size == 0:
            return True
        want = contiguous_strides(self.shape, self.itemsize)
        return all(d == 1 or s == w for d, s, w in zip(self.shape, self.strides, want))

    @classmethod
    def of(cls, array: np.ndarray) -> TensorInfo:
        """The TensorInfo of a numpy array (which is always valid)."""
        return cls(array.shape, array.dtype, array.strides)

    def with_shape(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> TensorInfo:
        return TensorInfo(shape, self.dtype, strides)

    def __repr__(self) -> str:
        return f"TensorInfo(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"


def _validate(shape: object, dtype: object, strides: object) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...]]:
    for what, v in (("shape", shape), ("strides", strides)):
        # iterable, but not an ordered sequence of numbers: a set or dict would give dimensions in hash order
        if isinstance(v, (str, bytes, bytearray, set, frozenset, dict)):
            raise InvalidTensorError(f"{what} must be a tuple of integers, got {v!r}")
    try:
        dims = tuple(as_int(d, "a dimension") for d in shape)  # type: ignore[attr-defined]
    except TypeError as e:
        raise InvalidTensorError(f"shape must be a sequence of integers, got {shape!r}") from e
    if any(d < 0 for d in dims):
        raise InvalidTensorError(f"shape {dims} has a negative dimension")
    dt = as_dtype(dtype)
    item = dt.itemsize
    if strides is None:
        return dims, dt, contiguous_strides(dims, item)
    try:
        st = tuple(as_int(s, "a stride") for s in strides)  # type: ignore[attr-defined]
    except TypeError as e:
        raise InvalidTensorError(f"strides must be a sequence of integers (bytes), got {strides!r}") from e
    if len(st) != len(dims):
        raise InvalidTensorError(f"strides {st} do not match shape {dims}: need one stride (in bytes) per dimension")
    if any(s < 0 for s in st):
        raise InvalidTensorError(f"strides {st} have a negative stride; flip the data instead (negative strides are not supported)")
    if any(s % item for s in st):
        raise InvalidTensorError(f"strides {st} are not multiples of the item size {item} of {dt}; strides are in bytes")
    _check_no_overlap(dims, st, item)
    return dims, dt, st


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out = []
    acc = itemsize
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def _check_no_overlap(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> None:
    if math.prod(shape) == 0:
        return
    # Sort the dimensions that matter by stride; each must step over everything spanned by the ones inside it.
    dims = sorted((s, d) for d, s in zip(shape, strides) if d > 1)
    span = itemsize
    for s, d in dims:
        if s < span:
            raise InvalidTensorError(
                f"strides {strides} for shape {shape} make elements overlap (a stride of {s} bytes is smaller than the "
                f"{span} bytes spanned by the inner dimensions); give each row at least its width in bytes")
        span = s * (d - 1) + span


# ----------------------------------------------------------------------------------------------------------
# Plane layouts


@dataclass(frozen=True)
class PlaneSpec:
    """One plane of a FrameFormat: name, channels per pixel, subsampling and element type."""

    name: str
    channels: int  # 0 means a 2-D plane (H, W); otherwise (H, W, channels)
    sub_x: int = 1
    sub_y: int = 1
    dtype: np.dtype = np.dtype(np.uint8)

    def shape(self, width: int, height: int) -> tuple[int, ...]:
        h = -(-height // self.sub_y)
        w = -(-width // self.sub_x)
        return (h, w) if self.channels == 0 else (h, w, self.channels)

    def row_bytes(self, width: int) -> int:
        return -(-width // self.sub_x) * max(self.channels, 1) * self.dtype.itemsize


_U8 = np.dtype(np.uint8)
_U16 = np.dtype(np.uint16)

PLANE_LAYOUTS: dict[FrameFormat, tuple[PlaneSpec, ...]] = {
    FrameFormat.NV12: (PlaneSpec("Y", 0), PlaneSpec("UV", 2, 2, 2)),
    FrameFormat.NV21: (PlaneSpec("Y", 0), PlaneSpec("VU", 2, 2, 2)),
    FrameFormat.I420: (PlaneSpec("Y", 0), PlaneSpec("U", 0, 2, 2), PlaneSpec("V", 0, 2, 2)),
    FrameFormat.YV12: (PlaneSpec("Y", 0), PlaneSpec("V", 0, 2, 2), PlaneSpec("U", 0, 2, 2)),
    FrameFormat.I422: (PlaneSpec("Y", 0), PlaneSpec("U", 0, 2, 1), PlaneSpec("V", 0, 2, 1)),
    FrameFormat.I444: (PlaneSpec("Y", 0), PlaneSpec("U", 0), PlaneSpec("V", 0)),
    FrameFormat.I420_10: (PlaneSpec("Y", 0, dtype=_U16), PlaneSpec("U", 0, 2, 2, dtype=_U16),
                          PlaneSpec("V", 0, 2, 2, dtype=_U16)),
    FrameFormat.I422_10: (PlaneSpec("Y", 0, dtype=_U16), PlaneSpec("U", 0, 2, 1, dtype=_U16),
                          PlaneSpec("V", 0, 2, 1, dtype=_U16)),
    FrameFormat.I444_10: (PlaneSpec("Y", 0, dtype=_U16), PlaneSpec("U", 0, dtype=_U16), PlaneSpec("V", 0, dtype=_U16)),
    FrameFormat.I420_12: (PlaneSpec("Y", 0, dtype=_U16), PlaneSpec("U", 0, 2, 2, dtype=_U16),
                          PlaneSpec("V", 0, 2, 2, dtype=_U16)),
    FrameFormat.P010: (PlaneSpec("Y", 0, dtype=_U16), PlaneSpec("UV", 2, 2, 2, dtype=_U16)),
    FrameFormat.RGB: (PlaneSpec("RGB", 3),),
    FrameFormat.BGR: (PlaneSpec("BGR", 3),),
    FrameFormat.RGBX: (PlaneSpec("RGBX", 4),),
    FrameFormat.BGRX: (PlaneSpec("BGRX", 4),),
    FrameFormat.RGBA: (PlaneSpec("RGBA", 4),),
    FrameFormat.BGRA: (PlaneSpec("BGRA", 4),),
    FrameFormat.GRAY8: (PlaneSpec("Y", 0),),
    FrameFormat.GRAY10: (PlaneSpec("Y", 0, dtype=_U16),),
    FrameFormat.GRAY16: (PlaneSpec("Y", 0, dtype=_U16),),
}


def plane_layout(fmt: FrameFormat) -> tuple[PlaneSpec, ...]:
    try:
        return PLANE_LAYOUTS[fmt]
    except KeyError:
        raise UnsupportedFormatError(f"no plane layout for {fmt!r}") from None


def plane_infos(fmt: FrameFormat, width: int, height: int, pitches: list[int] | None = None) -> list[TensorInfo]:
    """TensorInfo of each plane of a width x height frame; ``pitches`` (bytes per row) default to tight rows."""
    specs = plane_layout(fmt)
    if width <= 0 or height <= 0:
        raise InvalidTensorError(f"frame size {width}x{height} must be positive")
    if pitches is not None and len(pitches) != len(specs):
        raise InvalidTensorError(f"{fmt.name} has {len(specs)} planes but {len(pitches)} pitches were given")
    out = []
    for i, spec in enumerate(specs):
        shape = spec.shape(width, height)
        row = spec.row_bytes(width)
        pitch = row if pitches is None else int(pitches[i])
        if pitch < row:
            raise InvalidTensorError(
                f"plane {spec.name} of a {width}x{height} {fmt.name} frame needs a pitch of at least {row} bytes, got {pitch}")
        inner = contiguous_strides(shape, spec.dtype.itemsize)
        out.append(TensorInfo(shape, spec.dtype, (pitch,) + inner[1:]))
    return out


def stacked_height(fmt: FrameFormat, rows: int) -> int:
    """The frame height of a ``fmt`` buffer of ``rows`` rows whose planes follow each other at the buffer's pitch
    (planar chroma at the pitch divided by its horizontal subsampling): I420/NV12 are (H*3/2, W), I422 (H*2, W),
    I444 (H*3, W). InvalidTensorError when no frame height gives exactly ``rows`` (H even where chroma rows are halved)."""
    specs = plane_layout(fmt)
    # rows of the buffer's pitch each plane takes, per frame row, as a fraction num/den
    num, den = 0, 1
    for s in specs:
        d = s.sub_y * (s.sub_x if s.channels == 0 else 1)
        num, den = num * d + den, den * d
    g = math.gcd(num, den)
    num, den = num // g, den // g
    height, rem = divmod(rows * den, num)
    if rows <= 0 or rem or any(height % s.sub_y for s in specs):
        ratio = f"H*{num}/{den}" if den > 1 else (f"H*{num}" if num > 1 else "H")
        even = " and even" if any(sp.sub_y > 1 for sp in specs) else ""
        raise InvalidTensorError(f"a {fmt.name} buffer of {rows} rows is not ({ratio}, W) for a whole{even} height H: "
                                 f"give width and height")
    return height


def packed_offsets(fmt: FrameFormat, width: int, height: int, pitches: list[int] | None = None) -> tuple[list[int], int]:
    """Byte offsets of each plane when the planes follow each other in one buffer, and the total size."""
    infos = plane_infos(fmt, width, height, pitches)
    offsets, pos = [], 0
    for info in infos:
        offsets.append(pos)
        pos += info.strides[0] * info.shape[0]
    return offsets, pos
