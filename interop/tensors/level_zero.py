"""Level Zero USM: a ``LevelZeroContext`` (memory type USM: a ze context + device) and USM tensors backed by
Level Zero allocations (``interop.native.level_zero.Allocation``).

The tensors are ``USMTensor``s (interop/tensors/usm.py) whose ``native`` is the Allocation and whose
``context`` is the LevelZeroContext, so mappers can tell Level Zero memory from SYCL/OpenCL USM: a pointer
of one context is never handed to another's importer (ContextMismatchError).
"""

from __future__ import annotations

import glob
import threading
from typing import Any

from ..backends import Backend, BackendReport, register_backend
from ..context import Context
from ..errors import BackendUnavailableError, ContextMismatchError, InvalidTensorError
from ..info import TensorInfo
from ..types import MemoryType

_KINDS = ("host", "device", "shared")


class LevelZeroContext(Context):
    """A Level Zero context and device. ``native`` is the ``ZeContext``; ``device`` the ze device handle (int).

    ``import_as`` is the kind of memory a DMA-BUF import makes ("device", like DL Streamer, or "host", which
    the CPU can also read). Handles: ``ze_context``, ``ze_device``, ``ze_driver``.
    """

    memory_type = MemoryType.USM

    def __init__(self, ze_context: Any, device: int, driver: int | None = None, *, import_as: str = "device"):
        from ..native.level_zero import ZeContext

        if not isinstance(ze_context, ZeContext):
            raise InvalidTensorError(f"LevelZeroContext needs a native.level_zero.ZeContext, not {type(ze_context).__name__}")
        if import_as not in _KINDS:
            raise InvalidTensorError(f"import_as must be one of {', '.join(_KINDS)}, not {import_as!r}")
        super().__init__(native=ze_context, device=int(device))
        self.driver = driver if driver is not None else ze_context.driver
        self.import_as = import_as

    @classmethod
    def create(cls, *, device_type: str | None = None, import_as: str = "device") -> LevelZeroContext:
        """A new context on the first device (of ``device_type`` "GPU"/"VPU" if given) of the first driver
        that has one. BackendUnavailableError without a loader, a driver or such a device."""
        from ..native import level_zero as ze

        for drv in ze.drivers():
            for dev in ze.devices(drv):
                if device_type is None or ze.device_properties(dev).type == device_type.upper():
                    return cls(ze.ZeContext.create(drv), dev, drv, import_as=import_as)
        raise BackendUnavailableError(f"no Level Zero {device_type or ''} device found (drivers: {len(ze.drivers())})".replace("  ", " "),
                                      backend=BACKEND.name)

    @classmethod
    def default(cls, memory_type: MemoryType = MemoryType.USM) -> Context:  # type: ignore[override]
        """With no argument: the process-wide LevelZeroContext (made on first use). With a memory type: the
        generic Context.default (the USM default is SYCL's; Level Zero's is asked for by this class)."""
        if memory_type is not MemoryType.USM or cls is not LevelZeroContext:
            return Context.default(memory_type)
        global _default
        with _lock:
            if _default is None:
                _default = cls.create()
            return _default

    @property
    def ze_context(self) -> int:
        return int(self._native.handle)

    @property
    def ze_device(self) -> int:
        return int(self._device)

    def handle(self, key: str) -> int:
        """DL Streamer's context keys: ze_context, ze_device, ze_driver."""
        keys = {"ze_context": self.ze_context, "ze_device": self.ze_device, "ze_driver": self.driver or 0}
        if key not in keys:
            raise InvalidTensorError(f"LevelZeroContext has no handle {key!r}; its handles are {', '.join(keys)}")
        return int(keys[key])

    def key(self) -> Any:
        return ("level_zero", self.ze_context)

    # -- allocation -----------------------------------------------------------------------------------
    def allocate(self, size: int, kind: str = "device", *, import_fd: int | None = None, keepalive: Any = None) -> Any:
        from ..native import level_zero as ze

        return ze.allocate(self._native, size, kind, device=self.ze_device, import_fd=import_fd, keepalive=keepalive)

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        """Synchronous copy between host and USM memory of this context (what usm_to_cpu/cpu_to_usm call for
        device allocations; they count the copy)."""
        from ..native import level_zero as ze

        ze.memcpy(self._native, self.ze_device, dst, src, nbytes)

    def alloc_tensor(self, info: TensorInfo, kind: str = "shared") -> Any:
        """A new USM tensor of ``info`` in fresh Level Zero memory (zeMemFree at release)."""
        alloc = self.allocate(max(info.extent, 1), kind)
        return usm_tensor(alloc, info, context=self)

    def __repr__(self) -> str:
        return f"<LevelZeroContext ze_context=0x{self.ze_context:x} device=0x{self.ze_device:x}>"


_lock = threading.Lock()
_default: LevelZeroContext | None = None


class SharedRelease:
    """Frees one Allocation when the last of several tensors over it is released (planes of one frame)."""

    def __init__(self, alloc: Any, users: int):
        self._alloc = alloc
        self._users = users
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self._alloc.release()


def usm_tensor(alloc: Any, info: TensorInfo, *, context: LevelZeroContext, offset: int = 0, parent: Any = None,
               writable: bool = True, release: Any = None) -> Any:
    """A USMTensor over ``alloc`` at ``offset``; the allocation is freed at the tensor's release (or by
    ``release``, a SharedRelease, when several tensors share it)."""
    from .usm import USMTensor

    if offset < 0 or offset + info.extent > alloc.size:
        raise InvalidTensorError(f"layout {info} at offset {offset} does not fit the {alloc.size}-byte Level Zero allocation")
    t = USMTensor(alloc, info, pointer=alloc.pointer, usm_type=alloc.kind, context=context, parent=parent,
                  offset=offset, writable=writable)
    t.on_release(release if release is not None else alloc.release)
    return t


def level_zero_context_of(t: Any, what: str) -> LevelZeroContext:
    """The LevelZeroContext of a USM tensor; ContextMismatchError for USM of another framework (SYCL/OpenCL)."""
    ctx = t.context
    if not isinstance(ctx, LevelZeroContext):
        raise ContextMismatchError(
            f"{what} needs USM memory of a Level Zero context, but this USM tensor belongs to {ctx!r}: a USM pointer "
            f"of a SYCL/OpenCL context means nothing to Level Zero. Allocate it with a LevelZeroContext (or a SYCL queue "
            f"on the level_zero backend, wrapped as LevelZeroContext), or map it through MemoryType.CPU with allow_copy=True")
    return ctx


def allocation_of(t: Any) -> Any:
    """The Level Zero Allocation behind a USM tensor (its ``native``), checked."""
    from ..native.level_zero import Allocation

    alloc = t.native
    if not isinstance(alloc, Allocation):
        raise ContextMismatchError(f"this USM tensor's memory is a {type(alloc).__name__}, not a Level Zero allocation")
    return alloc


def usm_address(t: Any) -> int:
    """Address of element 0 of a USM tensor (``USMTensor.pointer``: base + offset)."""
    return int(t.pointer)


# ---- doctor ----------------------------------------------------------------------------------------------------


def _detect() -> str | None:
    if glob.glob("/dev/dri/renderD*") or glob.glob("/dev/accel/accel*"):
        return None
    return "no GPU render node (/dev/dri/renderD*) or NPU accel node (/dev/accel/accel*) on this machine"


def _probe() -> list[BackendReport]:
    from ..native import level_zero as ze

    # The loader keeps the outcome of the first zeInit of the process, and SYCL's is GPU-only (an NPU driver refuses
    # it): initialising for every driver first keeps the NPU visible. Hence ``early`` below: this probe runs before
    # any probe that may initialise SYCL or OpenCL.
    ze.init_early()
    row = BackendReport(name=BACKEND.title, installed=False, tier=BACKEND.tier)
    try:
        ze.loader()
        row.installed = True
        row.version = ze.loader_name()
        for drv in ze.drivers():
            major, minor = ze.driver_api_version(drv)
            for dev in ze.devices(drv):
                p = ze.device_properties(dev)
                row.devices.append(f"{'NPU' if p.is_npu else p.type}: {p.name} (API {major}.{minor})")
        if not row.devices:
            row.reason = "the Level Zero drivers report no device"
    except Exception as e:
        row.reason = str(e)
    return [row]


# The driver under Level Zero USM contexts and the NPU's memory: it owns no memory type of its own (USM is SYCL's
# by default), and its native library is loaded with ctypes (no pip extra).
BACKEND = register_backend(Backend("level_zero", "Level Zero", (), tier="C", probe=_probe, detect=_detect,
                                   hardware="a Level Zero driver (Intel GPU or NPU)", early=True))
