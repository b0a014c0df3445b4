"""The dpctl <-> OpenCL context derivations (ABI trick) and the fallback to a separate context."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import MemoryType, TensorInfo
from interop.errors import CopyRequiredError
from tests.support.ocl_support import need, opencl_context, sycl_context

dpctl = need("dpctl", "dpctl")
cl = need("pyopencl", "pyopencl")


def test_round_trip_gives_the_same_cl_context():
    from interop.native import sycl_context as sc

    ocl = opencl_context()
    sctx = sc.sycl_context_from_cl(ocl.cl_context)
    assert sc.peek_cl_context(sctx) == ocl.cl_context
    assert sc.sycl_context_from_cl(ocl.cl_context) is sctx  # cached: one adoption per cl_context
    h = sc.native_cl_context(sctx)  # retained for us
    assert h == ocl.cl_context
    before = cl.Context.from_int_ptr(h, retain=False).reference_count  # takes over our reference
    assert before >= 2


def test_dpctl_allocations_are_usm_of_the_opencl_context():
    from interop.native.opencl_usm import usm_functions

    ctx = sycl_context()
    ocl = opencl_context()
    usm = usm_functions(ocl.device.platform.int_ptr)
    for kind, cls in (("shared", "MemoryUSMShared"), ("host", "MemoryUSMHost"), ("device", "MemoryUSMDevice")):
        m = getattr(dpctl.memory, cls)(64, queue=ctx.queue)
        assert usm.alloc_type(ocl.cl_context, m._pointer) == kind
    assert usm.alloc_type(ocl.cl_context, np.zeros(4).ctypes.data) == "unknown"


def test_a_broken_abi_is_refused_not_crashed(monkeypatch):
    from interop.native import sycl_context as sc

    ocl = opencl_context()
    own = cl.Context(ocl.native.devices)  # a cl_context not adopted yet
    monkeypatch.setattr(sc, "_MAKE_CONTEXT", "_ZN4sycl3_V16detail12no_such_symbolEv")
    with pytest.raises(sc.SyclABIError):
        sc.sycl_context_from_cl(own.int_ptr)


def test_fallback_is_a_separate_context_with_counted_copies(monkeypatch):
    from interop.native import sycl_context as sc
    from interop.tensors import usm

    ocl = opencl_context()
    sycl_context()

    def broken(_h):
        raise sc.SyclABIError("simulated: this DPC++ has another ABI")

    monkeypatch.setattr(sc, "sycl_context_from_cl", broken)
    sep = usm._default_context()
    assert sep.cl_context != ocl.cl_context and not sep.shared_with_opencl
    t = usm.allocate(TensorInfo((4, 8), np.float32), "shared", sep)
    np.asarray(t)[:] = 2.5
    # The direct edge cannot hand a USM pointer of another context to OpenCL: it copies, counted, only if allowed.
    from interop.mappers.usm_to_opencl import USMToOpenCL

    with pytest.raises(CopyRequiredError):
        USMToOpenCL().map(t, interop.AccessMode.READ)
    with interop.copy_meter() as m:
        o = USMToOpenCL().map(t, interop.AccessMode.READ, allow_copy=True)
    assert m.copies == 1 and m.bytes == 4 * 8 * 4 and m.records[0].mapper == "usm_to_opencl"
    assert o.context == ocl and o.usm_pointer is None
    with interop.map(o, MemoryType.CPU) as h:
        assert (h.numpy() == 2.5).all()
    # Shared USM is host memory, which OpenCL's CPU device uses in place: routed by the object, USM -> CPU -> OPENCL
    # shares it with no copy (the router finds what the direct edge cannot do).
    with interop.copy_meter() as m:
        z = interop.map(t, MemoryType.OPENCL)
        with interop.map(z, MemoryType.CPU) as h:
            assert (h.numpy() == 2.5).all() and h.data_ptr == t.pointer
    assert m.copies == 0
