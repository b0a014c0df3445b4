"""NPU tensors and context: handle conversion, device-side plane layouts, the doctor rows (order 70)."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop.info import TensorInfo
from interop.tensors.npu import NPUContext, device_layout, handle_value, parse_handle
from tests import ze_fake
from tests.ov_remote_double import OVAnyPointer, RemoteContextDouble


def test_handles_round_trip() -> None:
    assert handle_value(7) == "0x7"
    assert parse_handle(7) == 7 and parse_handle(np.int64(9)) == 9
    assert parse_handle("0x7f00aa") == 0x7F00AA and parse_handle(OVAnyPointer(0xABC)) == 0xABC
    assert parse_handle("(nil)") == 0
    with pytest.raises(interop.InvalidTensorError):
        parse_handle(object())
    with pytest.raises(interop.InvalidTensorError):
        parse_handle(True)


@pytest.mark.parametrize("info, image, want", [
    (TensorInfo((40, 60), np.uint8, (64, 1)), True, ((1, 40, 64, 1), 40 * 64)),
    (TensorInfo((20, 30, 2), np.uint8, (64, 2, 1)), True, ((1, 20, 32, 2), 20 * 64)),
    (TensorInfo((40, 64), np.uint8), True, ((1, 40, 64, 1), 40 * 64)),
    (TensorInfo((20, 30), np.uint16, (128, 2)), True, ((1, 20, 64, 1), 20 * 128)),
    (TensorInfo((2, 3, 4), np.float32), False, ((2, 3, 4), 96)),
    (TensorInfo((8, 8), np.uint8, (16, 1)), False, ((1, 8, 16, 1), 128)),
])
def test_device_layout(info: TensorInfo, image: bool, want: tuple) -> None:
    assert device_layout(info, image) == want


def test_device_layout_refuses_other_strides() -> None:
    with pytest.raises(interop.InvalidTensorError, match="contiguous"):
        device_layout(TensorInfo((8, 8), np.uint8, (1, 8)), True)  # column-major
    with pytest.raises(interop.InvalidTensorError):
        device_layout(TensorInfo((2, 2, 2, 2), np.uint8, (32, 8, 4, 1)), False)  # padded 4-D


def test_context_checks() -> None:
    rc = RemoteContextDouble(0x1234)
    ctx = NPUContext(rc)
    assert ctx.memory_type is interop.MemoryType.NPU and ctx.native is rc and ctx.device == "NPU"
    assert ctx.ze_context == 0x1234 == ctx.handle("ze_context")
    assert NPUContext(RemoteContextDouble(0x1234)) == ctx  # the same plugin Level Zero context
    assert NPUContext(RemoteContextDouble(0x5678)) != ctx
    with pytest.raises(interop.InvalidTensorError, match="strategy"):
        NPUContext(rc, strategy="copy")
    with pytest.raises(interop.InvalidTensorError, match="RemoteContext"):
        NPUContext(object())

    class NoL0(RemoteContextDouble):
        def get_params(self):  # type: ignore[no-untyped-def]
            return {}

    with pytest.raises(interop.BackendUnavailableError, match="L0_CONTEXT"):
        _ = NPUContext(NoL0()).ze_context


def test_doctor_rows_say_why_not() -> None:
    from interop.tensors.npu import _probe

    rows = {r.name: r for r in _probe()}
    lz, npu = rows["Level Zero"], rows["NPU (OpenVINO)"]
    assert lz.tier == npu.tier == "C"
    if not lz.devices:
        assert lz.reason  # no loader / no driver, said so
    if not npu.devices:
        assert npu.reason and "NPU" in npu.reason


def case_doctor_lists_the_fake_npu() -> None:
    from interop.tensors.npu import _probe

    lz = {r.name: r for r in _probe()}["Level Zero"]
    assert lz.installed and lz.reason is None
    assert lz.devices == ["NPU: interop fake Level Zero NPU (API 1.4)"]


globals().update(ze_fake.tests_for(globals()))
