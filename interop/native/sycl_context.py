"""dpctl <-> OpenCL context derivations (docs/opencl.md). The fragile part of the OpenCL/SYCL backends lives here.

dpctl 0.22 has no Python API for native handles, so both directions call DPC++ C++ symbols through ctypes:

* **SYCL -> OpenCL** (``native_cl_context``): the weak ``sycl::get_native<backend::opencl, context>``
  instantiation exported by ``libDPCTLSyclInterface.so``. Its result is retained for the caller.
* **OpenCL -> SYCL** (``sycl_context_from_cl``): ``sycl::_V1::detail::make_context`` exported by ``libsycl.so.9``,
  called with a hidden return slot, an empty ``std::function`` and an empty ``std::vector`` (zeroed libstdc++
  layouts), ``backend::opencl`` and ``keep_ownership=False`` after a ``clRetainContext``; the returned
  ``sycl::context`` is handed to dpctl in a ``"SyclContextRef"`` capsule, which dpctl copies. This is an ABI
  trick tied to DPC++ 2025/2026 on libstdc++: it is verified by a round trip (the new SYCL context's native
  handle must be the cl_context we gave) and refused with SyclABIError otherwise, so callers can fall back to
  a separate context and count the copies that follow.

The return slot of ``make_context`` is kept for the life of the process (one small block per adopted
context, cached): ``libsycl`` exports no destructor for it to be freed correctly.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any

from ..errors import InteropError
from . import opencl_usm

_GET_NATIVE_CTX = "_ZN4sycl3_V110get_nativeILNS0_7backendE1ENS0_7contextEEENS0_14backend_traitsIXT_EE11return_typeIT0_EERKS7_"
_MAKE_CONTEXT = ("_ZN4sycl3_V16detail12make_contextEmRKSt8functionIFvNS0_14exception_listEEENS0_7backendEbRKSt6vectorINS0_"
                 "6deviceESaISA_EE")
_BACKEND_OPENCL = 1

_lock = threading.Lock()
_adopted: dict[int, tuple[Any, ctypes.Array]] = {}  # cl_context -> (dpctl.SyclContext, kept return slot)


class SyclABIError(InteropError):
    """The DPC++ ABI trick that shares a context between dpctl and OpenCL does not work in this environment."""


def _loaded_library(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def _dpctl_interface() -> ctypes.CDLL:
    import dpctl

    path = os.path.join(os.path.dirname(dpctl.__file__), "libDPCTLSyclInterface.so")
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise SyclABIError(f"cannot open {path}: {e}") from e


def _libsycl() -> ctypes.CDLL:
    import dpctl  # noqa: F401  (loads libsycl)

    path = _loaded_library("libsycl.so.") or os.path.join(sys.prefix, "lib", "libsycl.so.9")
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise SyclABIError(f"cannot open {path}: {e}") from e


def native_cl_context(sycl_context: Any) -> int:
    """The cl_context (int) under a ``dpctl.SyclContext`` of the OpenCL backend, retained for the caller.

    Wrap it with ``pyopencl.Context.from_int_ptr(h, retain=False)`` or release it with
    ``opencl_usm.release_context``.
    """
    import dpctl

    devs = sycl_context.get_devices()
    if not devs or devs[0].backend != dpctl.backend_type.opencl:
        raise SyclABIError(f"the SYCL context is on the {devs[0].backend if devs else '?'} backend, not OpenCL")
    lib = _dpctl_interface()
    try:
        fn = getattr(lib, _GET_NATIVE_CTX)
    except AttributeError as e:
        raise SyclABIError("libDPCTLSyclInterface.so does not export sycl::get_native<opencl, context>") from e
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p]
    h = fn(sycl_context.addressof_ref())
    if not h:
        raise SyclABIError("sycl::get_native<opencl, context> returned NULL")
    return int(h)


def peek_cl_context(sycl_context: Any) -> int:
    """Like native_cl_context, without keeping the reference (for comparisons and display)."""
    h = native_cl_context(sycl_context)
    opencl_usm.release_context(h)
    return h


def sycl_context_from_cl(cl_context: int) -> Any:
    """A ``dpctl.SyclContext`` over an existing cl_context (the same native context, not a new one).

    Cached per cl_context. Raises SyclABIError when the trick is not safe here (missing symbols, or a round
    trip that does not give the same cl_context back).
    """
    import dpctl

    with _lock:
        got = _adopted.get(cl_context)
        if got is not None:
            return got[0]
        lib = _libsycl()
        try:
            mk = getattr(lib, _MAKE_CONTEXT)
        except AttributeError as e:
            raise SyclABIError("libsycl does not export sycl::detail::make_context with the expected signature") from e
        mk.restype = None
        mk.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_int, ctypes.c_bool, ctypes.c_void_p]
        ret = ctypes.create_string_buffer(64)  # sycl::context is one std::shared_ptr (16 bytes); room to spare
        empty_fn = ctypes.create_string_buffer(32)  # zeroed libstdc++ std::function: empty
        empty_vec = ctypes.create_string_buffer(24)  # zeroed std::vector: empty
        opencl_usm.retain_context(cl_context)  # SYCL takes this reference (keep_ownership=False)
        try:
            mk(ret, cl_context, empty_fn, _BACKEND_OPENCL, False, empty_vec)
        except Exception as e:  # ctypes reports a C++ exception escaping as OSError on some builds
            opencl_usm.release_context(cl_context)
            raise SyclABIError(f"sycl::detail::make_context failed: {e}") from e
        if not any(ret.raw[:16]):
            raise SyclABIError("sycl::detail::make_context returned an empty context")
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        cap = new(ctypes.addressof(ret), b"SyclContextRef", None)
        try:
            sctx = dpctl.SyclContext(cap)
        except Exception as e:
            raise SyclABIError(f"dpctl refused the adopted context: {e}") from e
        back = peek_cl_context(sctx)
        if back != cl_context:
            raise SyclABIError(f"round trip gave cl_context {back:#x}, not {cl_context:#x}: the ABI does not match")
        _adopted[cl_context] = (sctx, ret)
        return sctx
