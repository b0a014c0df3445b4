"""Enumerations shared by every backend: memory types, access modes, frame formats, colour metadata."""

from __future__ import annotations

import enum

import numpy as np

from .errors import InvalidTensorError, UnsupportedTypeError


class MemoryType(enum.Enum):
    """Where a tensor's bytes live and which framework owns the handle."""

    __hash__ = object.__hash__  # members are singletons compared by identity: routing's dicts hash them per frame

    CPU = "cpu"
    FFMPEG = "ffmpeg"
    GST = "gst"
    OPENCV = "opencv"
    OPENCV_UMAT = "opencv_umat"
    OPENCL = "opencl"
    USM = "usm"
    DMA = "dma"
    VAAPI = "vaapi"
    OPENVINO = "openvino"
    NPU = "npu"
    CUDA = "cuda"

    @classmethod
    def parse(cls, name: str) -> MemoryType:
        """Parse a user-typed name (CLI): 'cpu', 'FFMPEG', 'opencv-umat', 'va'…; a MemoryType is returned as it is."""
        if isinstance(name, MemoryType):
            return name
        if not isinstance(name, str):
            raise UnsupportedTypeError(
                f"MemoryType.parse() takes a name such as 'cpu' or 'dma', not {type(name).__name__} {name!r}; "
                f"choose one of: {', '.join(m.value for m in cls)}")
        key = name.strip().lower().replace("-", "_")
        aliases = {"umat": "opencv_umat", "va": "vaapi", "va_api": "vaapi", "ov": "openvino", "dmabuf": "dma",
                   "dma_buf": "dma", "sycl": "usm", "level_zero": "usm", "ze": "usm", "cl": "opencl"}
        key = aliases.get(key, key)
        for m in cls:
            if m.value == key:
                return m
        raise UnsupportedTypeError(f"unknown memory type {name!r}; choose one of: {', '.join(m.value for m in cls)}")

    def __str__(self) -> str:
        return self.name


def check_memory_type(value: object, what: str = "memory type") -> MemoryType:
    """Refuse strings and other look-alikes where a MemoryType belongs."""
    if isinstance(value, MemoryType):
        return value
    if isinstance(value, str):
        raise UnsupportedTypeError(
            f"{what} must be an interop.MemoryType, not the string {value!r}: use MemoryType.{value.upper()} "
            f"or MemoryType.parse({value!r})")
    raise UnsupportedTypeError(f"{what} must be an interop.MemoryType or an interop.Context, not {type(value).__name__}")


class AccessMode(enum.Enum):
    """How a mapping will be used. WRITE and READ_WRITE mappings write back at release."""

    READ = 1
    WRITE = 2
    READ_WRITE = 3

    @property
    def reads(self) -> bool:
        return bool(self.value & 1)

    @property
    def writes(self) -> bool:
        return bool(self.value & 2)


def check_mode(value: object) -> AccessMode:
    if isinstance(value, AccessMode):
        return value
    raise UnsupportedTypeError(f"mode must be an interop.AccessMode (READ, WRITE, READ_WRITE), not {value!r}")


def check_bool(value: object, what: str) -> bool:
    """A flag argument: True or False only (numpy booleans included); 1, "yes" or None are mistakes, refused."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise UnsupportedTypeError(f"{what} must be True or False, not {value!r}")


class FrameFormat(enum.Enum):
    """Pixel formats. Plane layouts are in interop.info.plane_layout()."""

    NV12 = "NV12"
    NV21 = "NV21"
    I420 = "I420"
    YV12 = "YV12"
    I422 = "I422"  # Y, then U and V at half width, full height (yuv422p)
    I444 = "I444"  # Y, U, V, all full size (yuv444p)
    I420_10 = "I420_10"  # I420 with uint16 planes, 10 bits in the low bits (yuv420p10le)
    I422_10 = "I422_10"  # yuv422p10le
    I444_10 = "I444_10"  # yuv444p10le
    I420_12 = "I420_12"  # I420 with uint16 planes, 12 bits in the low bits (yuv420p12le)
    P010 = "P010"
    RGB = "RGB"
    BGR = "BGR"
    RGBX = "RGBX"
    BGRX = "BGRX"
    RGBA = "RGBA"
    BGRA = "BGRA"
    GRAY8 = "GRAY8"
    GRAY10 = "GRAY10"  # one uint16 plane, 10 bits in the low bits (gray10le)
    GRAY16 = "GRAY16"


class ColorSpace(enum.Enum):
    """Matrix coefficients of a YUV frame."""

    BT601 = "bt601"
    BT709 = "bt709"
    BT2020 = "bt2020"
    SRGB = "srgb"


class ColorRange(enum.Enum):
    LIMITED = "limited"  # 16..235 (MPEG / TV)
    FULL = "full"  # 0..255 (JPEG / PC)


# dtypes a TensorInfo accepts; bf16 only where ml_dtypes provides it.
_DTYPE_NAMES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                "float16", "float32", "float64", "bool")


def _supported_dtypes() -> dict[str, np.dtype]:
    out = {n: np.dtype(n) for n in _DTYPE_NAMES}
    try:  # bfloat16 is not a numpy dtype; ml_dtypes adds it when installed
        import ml_dtypes  # type: ignore[import-not-found]

        out["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return out


SUPPORTED_DTYPES = _supported_dtypes()


def as_dtype(value: object) -> np.dtype:
    """Normalise a dtype-like to a supported numpy dtype, or raise InvalidTensorError."""
    if value is None:  # numpy would read None as float64; a missing dtype is a mistake here
        raise InvalidTensorError(f"a dtype is required: use one of {', '.join(SUPPORTED_DTYPES)}")
    if isinstance(value, (np.generic, np.ndarray)):  # numpy reads a value's own dtype; here it is a misplaced argument
        raise InvalidTensorError(f"dtype must be a dtype or its name, not the value {value!r}: use value.dtype, or one of "
                                 f"{', '.join(SUPPORTED_DTYPES)}")
    try:
        dt = np.dtype(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, SyntaxError) as e:  # numpy parses strings such as "0" or "(" with these
        raise InvalidTensorError(f"unknown dtype {value!r}: use one of {', '.join(SUPPORTED_DTYPES)}") from e
    dt = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") and dt.isnative else dt
    if not dt.isnative:
        raise InvalidTensorError(f"dtype {dt} is not in native byte order: convert with .astype(dtype.newbyteorder('='))")
    for d in SUPPORTED_DTYPES.values():
        if d == dt:
            return d
    raise InvalidTensorError(f"unsupported dtype {dt}: use one of {', '.join(SUPPORTED_DTYPES)}")
