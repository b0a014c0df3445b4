"""OpenVINO tensors: ``openvino.Tensor`` (host memory) and ``RemoteTensor`` (device memory) as interop Tensors.

A host ``ov.Tensor`` made with ``shared_memory=True`` aliases the numpy memory it was built over: no copy.
OpenVINO requires that memory to be C-contiguous and writeable (its shared-memory constructor refuses anything
else) even for inputs, which it never writes; the ``writable`` flag of an OpenVINOTensor is what *interop's users*
may do with it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    lazy_module,
    register_backend,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import InvalidTensorError, UnsupportedTypeError
from ..frame import Frame
from ..info import TensorInfo
from ..tensor import Tensor
from ..types import FrameFormat, MemoryType
from ._fastpath import trusted

_core: Any = None
_core_lock = threading.Lock()


ov_module = lazy_module("openvino", "openvino")


def get_core() -> Any:
    """The one ``openvino.Core`` shared by interop (made on first use)."""
    global _core
    if _core is None:
        with _core_lock:
            if _core is None:
                _core = ov_module().Core()
    return _core


def drop_core() -> None:
    """Forget the shared Core (at exit: OpenVINO's plugin threads must stop before the interpreter tears down)."""
    global _core
    with _core_lock:
        _core = None


class OpenVINOContext(Context):
    """An OpenVINO core and device name (``"CPU"``, ``"GPU"``, ``"NPU"`` …). ``Context.default(OPENVINO)`` is CPU."""

    memory_type = MemoryType.OPENVINO

    def __init__(self, device: str = "CPU", core: Any = None):
        if not isinstance(device, str) or not device:
            raise UnsupportedTypeError(f"an OpenVINO device is a name such as 'CPU' or 'NPU', not {device!r}")
        super().__init__(native=core, device=device.upper())

    @property
    def native(self) -> Any:
        """The ov.Core (the shared one unless another was given)."""
        if self._native is None:
            self._native = get_core()
        return self._native

    @property
    def core(self) -> Any:
        return self.native

    def key(self) -> Any:
        return (id(self.native), self._device)


_default_ctx: OpenVINOContext | None = None


def default_context() -> OpenVINOContext:
    """The default OpenVINO context (CPU device, shared core)."""
    global _default_ctx
    if _default_ctx is None:
        _default_ctx = OpenVINOContext("CPU")
    return _default_ctx


register_default_context(MemoryType.OPENVINO, default_context)


def _is_remote(ov_tensor: Any) -> bool:
    return class_in(type(ov_tensor), "openvino", "RemoteTensor")


class OpenVINOTensor(Tensor):
    """An ``openvino.Tensor`` (``native``). Host tensors are CPU-reachable (numpy/DLPack export, zero-copy);
    ``RemoteTensor``s are not.

    ``writable=False`` makes numpy views of it read-only (for inputs aliasing a decoder's reference frame, and
    every READ mapping). The ``ov.Tensor`` in ``native`` cannot be made read-only: OpenVINO shares only
    writeable memory, so ``native.data`` of a READ mapping is writeable and a write through it lands in the
    source. Read it, hand it to OpenVINO, but write only through a WRITE/READ_WRITE mapping.
    """

    memory_type = MemoryType.OPENVINO
    HANDLE_KEYS = {}

    def __init__(self, ov_tensor: Any, *, context: Context | None = None, parent: Any = None, writable: bool = True,
                 info: TensorInfo | None = None):
        cls = type(ov_tensor)
        if not class_in(cls, "openvino", "Tensor", "RemoteTensor"):
            raise UnsupportedTypeError(f"OpenVINOTensor wraps an openvino.Tensor or RemoteTensor, not {cls.__name__}")
        remote = _is_remote(ov_tensor)
        if info is None:
            if remote:
                info = TensorInfo(tuple(int(d) for d in ov_tensor.get_shape()), ov_tensor.get_element_type().to_dtype())
            else:
                data = ov_tensor.data
                info = TensorInfo(data.shape, data.dtype, data.strides)
        super().__init__(ov_tensor, info, context=context or default_context(), parent=parent, writable=writable)
        self._remote = remote
        self._addr: int | None = None
        self._array: np.ndarray | None = None

    @classmethod
    def _trusted(cls, ov_tensor: Any, info: TensorInfo, address: int | None, array: np.ndarray, context: Context,
                 parent: Any, writable: bool) -> OpenVINOTensor:
        t = trusted(cls, ov_tensor, info, context, parent, writable)
        t._remote = False
        t._addr = address
        t._array = array
        return t

    @classmethod
    def from_numpy(cls, arr: np.ndarray, *, parent: Any, context: Context | None = None,
                   writable: bool = True) -> OpenVINOTensor:
        """``ov.Tensor(arr, shared_memory=True)`` over a C-contiguous, writeable host array: zero-copy.

        The tensor keeps ``arr`` (and ``parent``) alive. Anything else is refused with InvalidTensorError:
        OpenVINO would silently copy it or reject it.
        """
        if not isinstance(arr, np.ndarray):
            raise InvalidTensorError(f"from_numpy takes a numpy.ndarray, not {type(arr).__name__}")
        if not arr.flags.c_contiguous:
            raise InvalidTensorError(
                f"OpenVINO shares only C-contiguous memory; this array (shape {arr.shape}, strides {arr.strides}) is not: "
                f"expose the full padded rows (rows, pitch) or copy with numpy.ascontiguousarray")
        if not arr.flags.writeable:
            raise InvalidTensorError("OpenVINO shares only writeable memory (it refuses read-only arrays); "
                                     "give it a writeable alias or a copy")
        ov = ov_module()
        t = ov.Tensor(arr, shared_memory=True)
        info = TensorInfo(arr.shape, arr.dtype, arr.strides)
        return cls._trusted(t, info, int(arr.__array_interface__["data"][0]), arr,
                            context or default_context(), parent, writable)

    @property
    def is_remote(self) -> bool:
        return self._remote

    @property
    def ov_tensor(self) -> Any:
        return self.native

    def _host_address(self) -> int | None:
        if self._remote:
            return None
        if self._addr is None:
            self._addr = int(self._native.data.__array_interface__["data"][0])
        return self._addr

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        raise InvalidTensorError("OpenVINO tensors have no regions: crop inside the model (PrePostProcessor.crop) or "
                                 "take the region before mapping to OpenVINO")


def _wrap(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
          context: Context | None = None) -> Tensor | Frame:
    if info is not None or format is not None:
        raise UnsupportedTypeError("an openvino.Tensor carries its own shape and type: do not pass info= or format=")
    if context is not None and context.memory_type is not MemoryType.OPENVINO:
        raise UnsupportedTypeError(f"an openvino.Tensor is OpenVINO memory; it cannot belong to {context!r}")
    return OpenVINOTensor(obj, context=context)


register_wrapper(Wrapper("openvino.Tensor", lambda c: class_in(c, "openvino", "Tensor", "RemoteTensor"), _wrap,
                         priority=50))


def _probe() -> list[BackendReport]:
    why = BACKEND.missing()
    if why is not None:
        return [BackendReport(BACKEND.title, False, reason=f"openvino {why}")]
    try:
        ov = ov_module()
        core = get_core()
        devs = [f"{d}: {core.get_property(d, 'FULL_DEVICE_NAME')}" for d in core.available_devices]
        return [BackendReport(BACKEND.title, True, f"openvino {ov.get_version()}", devs, "A")]
    except Exception as e:  # a broken install is a row that says so
        return [BackendReport(BACKEND.title, False, reason=f"OpenVINO failed: {e}")]


BACKEND = register_backend(Backend("openvino", "OpenVINO", (MemoryType.OPENVINO,), tier="A", extra="openvino",
                                   requires=("openvino",), probe=_probe))
