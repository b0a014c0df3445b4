"""OpenVINO tensors: host ov.Tensor over numpy memory (shared, zero-copy), contexts and the shared core."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import MemoryType
from tests.support.requirements import need_module

ov = need_module("openvino")

from interop.tensors.openvino import OpenVINOContext, OpenVINOTensor, get_core  # noqa: E402


def test_from_numpy_shares_memory_both_ways() -> None:
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = OpenVINOTensor.from_numpy(arr, parent=None)
    assert t.memory_type is MemoryType.OPENVINO and t.shape == (2, 3, 4) and t.dtype == np.float32
    assert t.native.data.ctypes.data == arr.ctypes.data == np.asarray(t).ctypes.data == t.data_ptr
    arr[1, 2, 3] = -5
    assert t.native.data[1, 2, 3] == -5  # a write through numpy is seen by OpenVINO
    t.native.data[0, 0, 0] = 9
    assert arr[0, 0, 0] == 9  # and the other way


def test_from_numpy_refuses_what_openvino_would_copy_or_reject() -> None:
    padded = np.zeros((4, 8), np.uint8)[:, :6]
    with pytest.raises(interop.InvalidTensorError, match="C-contiguous"):
        OpenVINOTensor.from_numpy(padded, parent=None)
    ro = np.zeros((4, 4), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(interop.InvalidTensorError, match="writeable"):
        OpenVINOTensor.from_numpy(ro, parent=None)
    with pytest.raises(interop.InvalidTensorError):
        OpenVINOTensor.from_numpy([1, 2, 3], parent=None)  # type: ignore[arg-type]


def test_read_only_flag_protects_the_users_view() -> None:
    arr = np.zeros((4, 4), np.uint8)
    t = OpenVINOTensor.from_numpy(arr, parent=None, writable=False)
    view = np.asarray(t)
    assert view.ctypes.data == arr.ctypes.data and not view.flags.writeable


def test_wrap_recognises_ov_tensors_and_keeps_them_alive() -> None:
    host = ov.Tensor(np.ones((2, 5), np.int32))
    t = interop.wrap(host)
    assert isinstance(t, OpenVINOTensor) and t.native is host and t.shape == (2, 5) and t.dtype == np.int32
    assert np.asarray(t).ctypes.data == host.data.ctypes.data
    assert not t.is_remote
    with pytest.raises(interop.UnsupportedTypeError):
        interop.wrap(host, info=interop.TensorInfo((10,), np.int32))
    with pytest.raises(interop.UnsupportedTypeError):
        OpenVINOTensor(np.zeros(3))


def test_default_context_is_the_cpu_device_of_one_shared_core() -> None:
    ctx = interop.Context.default(MemoryType.OPENVINO)
    assert isinstance(ctx, OpenVINOContext) and ctx.device == "CPU" and ctx.memory_type is MemoryType.OPENVINO
    assert ctx.native is get_core() is get_core()
    assert OpenVINOContext("cpu") == ctx and OpenVINOContext("NPU") != ctx
    with pytest.raises(interop.UnsupportedTypeError):
        OpenVINOContext("")


def test_regions_are_refused_with_advice() -> None:
    t = OpenVINOTensor.from_numpy(np.zeros((8, 8), np.uint8), parent=None)
    with pytest.raises(interop.InvalidTensorError, match="crop"):
        t.region(0, 0, 4, 4)


def test_released_tensor_refuses_use() -> None:
    arr = np.zeros((2, 2), np.uint8)
    t = OpenVINOTensor.from_numpy(arr, parent=None)
    view = np.asarray(t)
    t.release()
    with pytest.raises(interop.InvalidTensorError):
        _ = t.native
    view[0, 0] = 3  # views taken before release keep the memory alive
    assert arr[0, 0] == 3


def test_doctor_lists_the_cpu_device() -> None:
    from interop.backends import run_probes

    rows = [r for r in run_probes() if r.name == "OpenVINO"]
    assert rows and rows[0].installed and any(d.startswith("CPU") for d in rows[0].devices)
