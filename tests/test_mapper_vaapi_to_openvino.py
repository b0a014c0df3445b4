"""VAAPI -> OPENVINO: the GPU path against a test double of OpenVINO's VAContext (what the mapper asks of it),
the CPU path end to end through the fake VA driver, the real libva and the real OpenVINO CPU plugin."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InvalidTensorError, UnsupportedFormatError
from interop.tensors.vaapi import VAContext
from tests.support.requirements import need_module
from tests.support.va_fake import FakeVA

ov = need_module("openvino")


def _capsule_pointer(cap: Any) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(cap, None))


def _mapping_of(addr: int) -> str:
    for line in open("/proc/self/maps"):
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= addr < hi:
            return parts[5].strip() if len(parts) > 5 else ""
    return ""


class RemoteTensor:
    """Stands in for openvino.VASurfaceTensor (class_in() recognises it by module and name)."""

    def __init__(self, shape: tuple[int, ...], surface: int, plane: int):
        self.shape, self.surface_id, self.plane_id = shape, surface, plane

    def get_shape(self) -> list[int]:
        return list(self.shape)

    def get_element_type(self) -> Any:
        return ov.Type.u8


RemoteTensor.__module__ = "openvino._test_double"


class FakeVAContext:
    made: list[dict[str, Any]] = []

    def __init__(self, core: Any, display: Any, tile: int = -1):
        self.calls: list[tuple[Any, ...]] = []
        FakeVAContext.made.append({"core": core, "display": _capsule_pointer(display), "tile": tile, "ctx": self})

    def create_tensor_nv12(self, height: int, width: int, surface: int) -> tuple[RemoteTensor, RemoteTensor]:
        self.calls.append(("nv12", height, width, surface))
        return RemoteTensor((1, height, width, 1), surface, 0), RemoteTensor((1, height // 2, width // 2, 2), surface, 1)

    def create_tensor(self, type: Any, shape: Any, surface: int, plane: int = 0) -> RemoteTensor:
        self.calls.append(("plane", type, tuple(shape), surface, plane))
        return RemoteTensor(tuple(shape), surface, plane)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    from interop.mappers import vaapi_to_openvino as m
    from interop.tensors.openvino import OpenVINOContext

    FakeVAContext.made.clear()
    monkeypatch.setattr(m, "_va_context_class", lambda: FakeVAContext)
    monkeypatch.setattr(m, "_remote", {})
    return OpenVINOContext("GPU")


def test_gpu_path_asks_for_nv12_remote_tensors_of_the_surface(fake_va: FakeVA, va_ctx: VAContext, gpu: Any) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 96, 64)
    sid = vf[0].surface_id
    with interop.copy_meter() as m:
        of = interop.map(vf, gpu)
    assert m.copies == 0 and of.memory_type is MemoryType.OPENVINO and of.context == gpu and of.parent is vf
    (made,) = FakeVAContext.made
    assert made["display"] == va_ctx.display.handle, "the VADisplay pointer itself, as a capsule"
    assert made["core"] is gpu.core and made["tile"] == -1
    assert made["ctx"].calls == [("nv12", 64, 96, sid)], "height, width, then the surface id (not a pointer)"
    assert [t.native.get_shape() for t in of] == [[1, 64, 96, 1], [1, 32, 48, 2]]
    assert fake_va.info(sid)["syncs"] == 1
    interop.map(va_ctx.new_frame(FrameFormat.NV12, 32, 32), gpu)
    assert len(FakeVAContext.made) == 1, "one remote context per display and core"


def test_gpu_path_single_plane(fake_va: FakeVA, va_ctx: VAContext, gpu: Any) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 96, 64)
    t = interop.map(vf[1], gpu)
    assert FakeVAContext.made[0]["ctx"].calls == [("plane", ov.Type.u8, (1, 32, 48, 2), vf[0].surface_id, 1)]
    assert t.native.plane_id == 1


def test_gpu_path_refusals(fake_va: FakeVA, va_ctx: VAContext, gpu: Any) -> None:
    with pytest.raises(UnsupportedFormatError, match="NV12"):
        interop.map(va_ctx.new_frame(FrameFormat.I420, 32, 32), gpu)
    with pytest.raises(InvalidTensorError, match="crop"):
        interop.map(va_ctx.new_frame(FrameFormat.NV12, 64, 64).crop(8, 8, 16, 16), gpu)


def test_cpu_path_shares_the_surface_memory(fake_va: FakeVA, va_ctx: VAContext) -> None:
    W, H = 96, 64
    vf = va_ctx.new_frame(FrameFormat.NV12, W, H)
    sid = vf[0].surface_id
    p = fake_va.info(sid)["pitch"]
    fake_va.plane(sid, 0, p[0] * H)[5 * p[0] + 7] = 123
    with interop.copy_meter() as m:
        of = interop.map(vf, MemoryType.OPENVINO)
    assert m.copies == 0 and of.memory_type is MemoryType.OPENVINO
    y = of[0].native
    assert isinstance(y, ov.Tensor) and list(y.shape) == [1, H, p[0], 1], "full-pitch rows"
    # the OpenVINO tensor lies in a mapping of the surface's own memfd (exported as DMA, mapped by dma_to_openvino)
    addr = y.data.__array_interface__["data"][0]
    assert "memfd:interopfake-va-surface" in _mapping_of(addr)
    assert y.data[0, 5, 7, 0] == 123
    assert [m.name for m in interop.route(MemoryType.VAAPI, MemoryType.OPENVINO).mappers] == ["vaapi_to_openvino"]


def test_cpu_path_write_mode(fake_va: FakeVA, va_ctx: VAContext) -> None:
    vf = va_ctx.new_frame(FrameFormat.NV12, 64, 32)
    sid = vf[0].surface_id
    of = interop.map(vf, MemoryType.OPENVINO, mode=AccessMode.WRITE)
    of[1].native.data[0, 3, 4, 1] = 9  # row 3, UV pair 4, V
    p = fake_va.info(sid)["pitch"][1]
    assert fake_va.plane(sid, 1, p * 16)[3 * p + 4 * 2 + 1] == 9
    assert np.asarray(of[1]).flags.writeable
