"""interop: zero-copy memory interop for video and AI pipelines.

Importing interop imports no framework (av, cv2, pyopencl, dpctl, openvino, torch, cupy): each is imported on
first real use. The runtime set-up below runs first, so frameworks imported afterwards load in any order.
"""

from . import _runtime

_runtime.setup()

from .api import map, wrap  # noqa: E402
from .context import Context  # noqa: E402
from .errors import (  # noqa: E402
    BackendUnavailableError,
    CallbackReentryError,
    CompileError,
    ContextMismatchError,
    CopyRequiredError,
    InteropBufferError,
    InteropError,
    InteropTimeoutError,
    InvalidTensorError,
    ModelFileError,
    NoRouteError,
    RequestFailedError,
    ResourceError,
    StateError,
    UnsupportedFormatError,
    UnsupportedTypeError,
    WrongMemoryError,
)
from .frame import Frame  # noqa: E402
from .info import TensorInfo  # noqa: E402
from .mapper import Cost, MemoryMapper, MemoryMapperChain  # noqa: E402
from .meter import copy_meter  # noqa: E402
from .routing import route  # noqa: E402
from .tensor import Tensor  # noqa: E402
from .types import AccessMode, ColorRange, ColorSpace, FrameFormat, MemoryType  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name: str):  # Inference pulls in nothing heavy at import, but keep the top level lean
    if name == "Inference":
        from .inference import Inference

        return Inference
    if name in ("empty", "empty_frame"):  # page-aligned allocations (interop.alloc), named lazily
        from . import alloc

        return getattr(alloc, name)
    raise AttributeError(f"module 'interop' has no attribute {name!r}")


__all__ = [
    "__version__", "MemoryType", "AccessMode", "FrameFormat", "ColorSpace", "ColorRange", "TensorInfo",
    "Tensor", "Frame", "Context", "MemoryMapper", "MemoryMapperChain", "Cost", "wrap", "map", "route", "copy_meter",
    "Inference", "InteropError", "NoRouteError", "CopyRequiredError", "BackendUnavailableError",
    "InvalidTensorError", "UnsupportedTypeError", "ContextMismatchError", "UnsupportedFormatError", "WrongMemoryError",
    "ResourceError", "InteropTimeoutError", "InteropBufferError", "empty", "empty_frame", "CompileError", "CallbackReentryError",
    "RequestFailedError", "StateError", "ModelFileError",
]
