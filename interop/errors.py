"""The exception hierarchy. Every error the library raises on bad input is an InteropError."""

from __future__ import annotations

from typing import Any


class InteropError(Exception):
    """Base class of every error raised by interop."""


class NoRouteError(InteropError):
    """No chain of mappers leads from the source memory type to the destination.

    ``reachable`` holds the memory types that *can* be reached from the source (with copies allowed),
    so the caller can pick an intermediate stop.
    """

    def __init__(self, message: str, *, src: Any = None, dst: Any = None, reachable: frozenset[Any] = frozenset()):
        super().__init__(message)
        self.src = src
        self.dst = dst
        self.reachable = reachable


class CopyRequiredError(NoRouteError):
    """A route exists but needs a copy, and ``allow_copy`` was not given.

    ``step`` is the mapper (a MemoryMapper class) that would copy.
    """

    def __init__(self, message: str, *, step: Any = None, **kw: Any):
        super().__init__(message, **kw)
        self.step = step


class BackendUnavailableError(InteropError, ImportError):
    """A framework needed for this step is not installed or has no device here."""

    def __init__(self, message: str, *, backend: str = "", extra: str | None = None):
        super().__init__(message)
        self.backend = backend
        self.extra = extra


class InvalidTensorError(InteropError, ValueError):
    """A tensor's layout or state is not valid: bad shape/dtype/strides, a buffer too small, a released tensor."""


class ModelFileError(InvalidTensorError):
    """A model path that is missing, a directory, or a file OpenVINO cannot read as a model."""


class UnsupportedTypeError(InteropError, TypeError):
    """An argument of a type interop does not know (an unknown object handed to wrap, a string for a MemoryType)."""


class ContextMismatchError(InteropError, ValueError):
    """A tensor belongs to another context than the mapper or consumer expects."""


class WrongMemoryError(ContextMismatchError, InvalidTensorError):
    """The input is of the right memory type but lives elsewhere (a hardware frame's planes are GPU memory):
    another route may take it, so map() tries the next one before raising this."""


class ResourceError(InteropError, OSError):
    """The process ran out of a resource interop needs (file descriptors, mappable memory).

    Also an OSError, with the original errno, so handlers written for the system call still catch it:
    raise it as ``ResourceError(errno.EMFILE, "what to do")``; ``.errno`` and ``.strerror`` are set as OSError sets them.
    """


class InteropTimeoutError(InteropError, TimeoutError):
    """A blocking call (a pool's acquire, a transport's send/recv, waiting for inference) ran out of time.

    Also a TimeoutError, so ``except TimeoutError`` written for the standard library catches it."""


class InteropBufferError(InteropError, BufferError):
    """A buffer cannot be exported or imported as asked (no DLPack export for this memory, a stream or device
    the export cannot honour, a buffer-protocol object whose memory is not one contiguous block).

    Also a BufferError, as numpy raises for the same requests."""


class UnsupportedFormatError(InteropError, ValueError):
    """A pixel format (or DRM fourcc) that interop cannot describe as planes."""


class CompileError(InteropError, ValueError):
    """OpenVINO refused the model with the arguments given: a device name, a ``config`` key or value, or an
    ``input_size`` the model cannot be reshaped to. Also a ValueError (the arguments are wrong, not the call);
    the message carries OpenVINO's own text, and ``__cause__`` its exception."""


class CallbackReentryError(InteropError, RuntimeError):
    """A call that waits for an Inference's requests (``infer``, ``wait_all``, ``close``) was made from one of
    its own completion callbacks, where it could only wait for itself. ``infer_async`` is allowed there."""


class StateError(InteropError, RuntimeError):
    """A call the object's state does not allow (a copy meter entered twice): also a RuntimeError."""


class RequestFailedError(InteropError, RuntimeError):
    """An inference request failed inside OpenVINO while it ran (not its arguments: those are refused before a
    request starts). The message carries OpenVINO's text, ``__cause__`` its exception when there is one."""


def missing_backend(backend: str, module: str, extra: str | None) -> BackendUnavailableError:
    """The standard error for a framework that cannot be imported. ``backend`` is the backend's declared name
    (``interop.backends.Backend.name``); ``extra`` its pip extra, named with this project's distribution."""
    from ._dist import pip_hint

    hint = pip_hint(extra) if extra else f"install the Python module '{module}'"
    return BackendUnavailableError(
        f"the {backend} backend needs the Python module '{module}', which is not installed: {hint}",
        backend=backend,
        extra=extra,
    )
