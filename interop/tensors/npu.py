"""NPU tensors: OpenVINO remote tensors of the NPU plugin's context, made over a frame's own memory.

``NPUContext`` wraps the NPU plugin's ``RemoteContext`` (``core.get_default_context("NPU")``); its
``get_params()["L0_CONTEXT"]`` is the plugin's Level Zero context. A DMA-BUF plane becomes an NPU tensor in
one of two ways, both zero-copy (docs/npu.md says why and what was verified how):

- ``"fd"``: hand the fd to the plugin, ``create_tensor(type, shape, {"MEM_TYPE": "SHARED_BUF",
  "MEM_HANDLE": "0x<fd>"})``; the plugin imports it with ze_external_memory_import_fd_t. The plugin imports
  from the buffer's start, so this serves planes at offset 0.
- ``"import"``: import the buffer into the plugin's own Level Zero context ourselves (zeMemAllocHost with the
  fd chained, interop.native.level_zero) and give OpenVINO an ``ov.Tensor`` over ``pointer + offset``: memory
  of the plugin's context, which the NPU binds without copying. This serves any offset (the chroma plane of
  an NV12 buffer).

MEM_HANDLE travels as a hex string: OpenVINO's Python binding turns an int into an int64 ``ov::Any``, which
the plugin's ``as<void*>()`` refuses ("Bad as from: l to: Pv"), while a string is parsed by
``operator>>(void*&)`` into the pointer. So no C helper is needed.

Device-side plane shape: (1, rows, pitch / itemsize / C, C), the layout OpenVINO gets from FFmpeg frames
(the model crops the padding); a C-contiguous tensor keeps its shape. ``native`` is the RemoteTensor (or
the ov.Tensor of the import path); the CPU cannot read NPU tensors through interop.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..backends import BackendReport, module_available, register_probe
from ..context import Context, register_default_context
from ..errors import BackendUnavailableError, ContextMismatchError, InvalidTensorError
from ..info import TensorInfo
from ..tensor import Tensor, _ArrayExport
from ..types import MemoryType

STRATEGIES = ("auto", "fd", "import")


def handle_value(handle: int) -> str:
    """A native handle (fd or pointer) as OpenVINO's plugins can read it into a ``void*``: a hex string."""
    return f"0x{int(handle):x}"


def parse_handle(value: Any) -> int:
    """An int from a handle in ``get_params()``: an int, a string, or an OVAny holding a ``void*``
    (``astype(str)`` prints it as hex)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if not isinstance(value, str) and hasattr(value, "astype"):
        value = value.astype(str)
    if isinstance(value, str):
        try:
            return int(value.strip(), 0) if value.strip() not in ("", "0", "(nil)") else 0
        except ValueError:
            pass
    raise InvalidTensorError(f"cannot read a native handle from {value!r}")


class NPUContext(Context):
    """The OpenVINO NPU plugin's remote context (``native``). ``ze_context`` is its Level Zero context handle.

    ``strategy``: "auto" (fd hand-off for planes at offset 0, our own import otherwise), "fd" or "import".
    """

    memory_type = MemoryType.NPU

    def __init__(self, remote_context: Any, *, core: Any = None, strategy: str = "auto"):
        if strategy not in STRATEGIES:
            raise InvalidTensorError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        for m in ("create_tensor", "get_params"):
            if not hasattr(remote_context, m):
                raise InvalidTensorError(f"NPUContext wraps an openvino.RemoteContext, not {type(remote_context).__name__}")
        super().__init__(native=remote_context, device="NPU")
        self.core = core
        self.strategy = strategy
        self._ze_context: int | None = None

    @classmethod
    def create(cls, core: Any = None, *, strategy: str = "auto") -> NPUContext:
        """The NPU plugin's default context; BackendUnavailableError (with OpenVINO's reason) where there is none."""
        from .openvino import get_core

        core = core if core is not None else get_core()
        try:
            rc = core.get_default_context("NPU")
        except Exception as e:  # OpenVINO raises RuntimeError with the plugin's reason
            raise BackendUnavailableError(f"OpenVINO has no NPU context here: {str(e).strip().splitlines()[-1]}",
                                          backend="npu") from e
        return cls(rc, core=core, strategy=strategy)

    @property
    def remote_context(self) -> Any:
        return self._native

    @property
    def ze_context(self) -> int:
        """The plugin's Level Zero context handle (``get_params()["L0_CONTEXT"]``)."""
        if self._ze_context is None:
            params = self._native.get_params()
            if "L0_CONTEXT" not in params:
                raise BackendUnavailableError(f"the NPU remote context publishes no L0_CONTEXT (params: {sorted(params)})",
                                              backend="npu")
            self._ze_context = parse_handle(params["L0_CONTEXT"])
        return self._ze_context

    def handle(self, key: str) -> int:
        if key != "ze_context":
            raise InvalidTensorError(f"NPUContext has one handle, 'ze_context', not {key!r}")
        return self.ze_context

    def key(self) -> Any:
        """The plugin's Level Zero context (two wrappers of one plugin context are the same scope)."""
        try:
            return ("npu", self.ze_context, self.strategy)
        except Exception:  # a context without L0_CONTEXT: only itself
            return ("npu", id(self._native), self.strategy)

    def __repr__(self) -> str:
        return f"<NPUContext {self._native!r} strategy={self.strategy}>"


register_default_context(MemoryType.NPU, NPUContext.create)


def npu_output_context(given: Context | None, who: str) -> NPUContext:
    """The NPUContext a mapper makes its tensors in: ``given`` (the mapper's output context), else the default
    one; ContextMismatchError naming ``who`` (the mapper) when ``given`` is another kind of context."""
    ctx = given if given is not None else Context.default(MemoryType.NPU)
    if not isinstance(ctx, NPUContext):
        raise ContextMismatchError(f"{who} makes tensors of an NPUContext, not of {ctx!r}")
    return ctx


class NPUTensor(Tensor):
    """An NPU input: ``native`` is the openvino RemoteTensor (fd hand-off) or ov.Tensor over memory of the
    plugin's Level Zero context (import). ``info`` is the device-side shape. Handles: ``mem_handle`` (the fd
    or the pointer handed over), ``offset``; ``mem_type`` is "SHARED_BUF" or "L0_HOST"."""

    memory_type = MemoryType.NPU
    HANDLE_KEYS = {"mem_handle": "mem_handle", "offset": "offset"}

    def __init__(self, native: Any, info: TensorInfo, *, mem_type: str, mem_handle: int, offset: int = 0,
                 context: Context | None = None, parent: Any = None, writable: bool = True):
        super().__init__(native, info, context=context, parent=parent, writable=writable)
        self.mem_type = mem_type
        self.mem_handle = int(mem_handle)
        self.offset = int(offset)

    @property
    def ov_tensor(self) -> Any:
        """What to give ``InferRequest.set_tensor``/``set_input_tensor``."""
        return self.native

    def __repr__(self) -> str:
        if self.released:
            return "<NPUTensor released>"
        return f"<NPUTensor {self.mem_type} shape={self._info.shape} dtype={self._info.dtype} handle={self.mem_handle:#x}>"


def device_layout(info: TensorInfo, image: bool) -> tuple[tuple[int, ...], int]:
    """(shape OpenVINO gets, bytes it spans). Frame planes (``image``) and padded (H, W[, C]) tensors: (1, rows,
    pitch/itemsize/C, C), the layout OpenVINO gets from FFmpeg frames (the model crops the padding). A dense
    tensor that is not a frame plane keeps its shape. Other layouts: InvalidTensorError."""
    isz = info.dtype.itemsize
    if info.is_contiguous and not image:
        return tuple(info.shape), info.nbytes
    if info.ndim in (2, 3):
        h, w = info.shape[:2]
        c = info.shape[2] if info.ndim == 3 else 1
        pitch = info.strides[0]
        inner_ok = info.strides[1] == c * isz and (info.ndim == 2 or info.strides[2] == isz)
        if inner_ok and pitch % (c * isz) == 0 and pitch >= w * c * isz:
            return (1, h, pitch // (c * isz), c), h * pitch
    raise InvalidTensorError(f"the NPU takes dense tensors or image planes with padded rows; {info} is neither: "
                             f"make it contiguous first")


def ov_type(dtype: np.dtype) -> Any:
    from .openvino import ov_module

    return ov_module().Type(dtype)


class _Imports:
    """One import per DMA buffer into the plugin's context, shared by the planes of that buffer."""

    def __init__(self, ctx: NPUContext):
        self.ctx = ctx
        self.allocs: dict[int, Any] = {}

    def of(self, buf: Any) -> Any:
        from ..native import level_zero as ze

        a = self.allocs.get(id(buf))
        if a is None:
            zctx = ze.ZeContext.borrow(self.ctx.ze_context)
            a = ze.allocate(zctx, buf.size, "host", import_fd=buf.fd, keepalive=buf)
            self.allocs[id(buf)] = a
        return a


def npu_planes(planes: list[Tensor], ctx: NPUContext, *, image: bool, parents: list[Any] | None = None) -> list[NPUTensor]:
    """NPU tensors over DMA planes (``parents`` overrides each output's parent, e.g. the USM tensor a DMA
    plane was exported from). Zero-copy: the plugin reads the planes' own memory."""
    from ..native import dmabuf as nd
    from ..tensors.dma import DMATensor

    imports = _Imports(ctx)
    out: list[NPUTensor] = []
    for i, t in enumerate(planes):
        if not isinstance(t, DMATensor):
            raise InvalidTensorError(f"expected DMA planes, got {type(t).__name__}")
        if t.drm_modifier not in (nd.DRM_FORMAT_MOD_LINEAR, nd.DRM_FORMAT_MOD_INVALID):
            raise InvalidTensorError(f"DRM modifier {t.drm_modifier:#018x} is tiled; the NPU reads linear memory: ask the "
                                     f"producer for DRM_FORMAT_MOD_LINEAR")
        shape, span = device_layout(t.info, image)
        if t.offset + span > t.size:
            raise InvalidTensorError(f"the plane's padded rows ({span} bytes at offset {t.offset}) run past the end of "
                                     f"its {t.size}-byte buffer; the NPU needs whole rows: allocate the buffer with full pitch")
        strategy = ctx.strategy
        if strategy == "auto":
            strategy = "fd" if t.offset == 0 else "import"
        parent = parents[i] if parents is not None else t
        if strategy == "fd":
            if t.offset:
                raise InvalidTensorError(f"the NPU plugin imports an fd from its start; this plane is at offset "
                                         f"{t.offset}: use NPUContext(strategy='auto' or 'import')")
            props = {"MEM_TYPE": "SHARED_BUF", "MEM_HANDLE": handle_value(t.fd)}
            native = ctx.remote_context.create_tensor(ov_type(t.info.dtype), list(shape), props)
            out.append(NPUTensor(native, TensorInfo(shape, t.info.dtype), mem_type="SHARED_BUF", mem_handle=t.fd,
                                 context=ctx, parent=parent, writable=t.writable))
        else:
            alloc = imports.of(t.buffer)
            addr = alloc.pointer + t.offset
            out.append(_host_tensor(alloc, addr, shape, t.info.dtype, ctx, parent, t.writable, "L0_HOST"))
    return out


def _host_tensor(owner: Any, addr: int, shape: tuple[int, ...], dtype: np.dtype, ctx: NPUContext, parent: Any,
                 writable: bool, mem_type: str) -> NPUTensor:
    """An ov.Tensor over ``addr`` (memory of the plugin's Level Zero context); the array keeps ``owner`` alive."""
    from .openvino import ov_module

    info = TensorInfo(shape, dtype)
    iface = {"version": 3, "shape": shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (addr, False), "strides": None}
    arr = np.asarray(_ArrayExport(iface, owner))  # OpenVINO wants writeable memory; it only reads inputs
    native = ov_module().Tensor(arr, shared_memory=True)
    return NPUTensor(native, info, mem_type=mem_type, mem_handle=addr, context=ctx, parent=parent, writable=writable)


# ---- doctor ---------------------------------------------------------------------------------------------
_probe_lock = threading.Lock()


def _probe() -> list[BackendReport]:
    import glob

    rows = []
    from ..native import level_zero as ze

    lz = BackendReport(name="Level Zero", installed=False, tier="C")
    try:
        ze.loader()
        lz.installed = True
        lz.version = ze.loader_name()
        for drv in ze.drivers():
            major, minor = ze.driver_api_version(drv)
            for dev in ze.devices(drv):
                p = ze.device_properties(dev)
                lz.devices.append(f"{'NPU' if p.is_npu else p.type}: {p.name} (API {major}.{minor})")
        if not lz.devices:
            lz.reason = "the Level Zero drivers report no device"
    except Exception as e:
        lz.reason = str(e)
    rows.append(lz)

    npu = BackendReport(name="NPU (OpenVINO)", installed=module_available("openvino"), tier="C")
    accel = glob.glob("/dev/accel/accel*")
    npu.details["accel_nodes"] = accel
    if not npu.installed:
        npu.reason = "OpenVINO is not installed: pip install 'interop[openvino]'"
    else:
        try:
            from .openvino import get_core

            core = get_core()
            if "NPU" in core.available_devices:
                npu.devices.append(str(core.get_property("NPU", "FULL_DEVICE_NAME")))
            else:
                why = "no /dev/accel node (no NPU or no intel_vpu kernel driver)" if not accel else "an accel node exists"
                try:
                    core.get_default_context("NPU")
                except Exception as e:
                    why += f"; OpenVINO: {str(e).strip().splitlines()[-1]}"
                npu.reason = f"OpenVINO lists no NPU: {why}"
        except Exception as e:
            npu.reason = f"OpenVINO failed: {e}"
    rows.append(npu)
    return rows


def _pin_level_zero() -> list[BackendReport]:
    # Runs before the OpenCL (30) and SYCL (40) probes, which initialise Level Zero with GPU_ONLY through dpctl: see
    # native.level_zero.init_early. It adds no row.
    from ..native import level_zero as ze

    ze.init_early()
    return []


register_probe(1, _pin_level_zero)
register_probe(70, _probe)
