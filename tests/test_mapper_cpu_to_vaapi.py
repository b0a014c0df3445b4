"""CPU -> VAAPI: upload into a new surface, a copy counted by the copy meter (fake driver, real libva)."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.errors import CopyRequiredError, UnsupportedFormatError
from interop.tensors.vaapi import VAContext
from tests.support.va_fake import FakeVA


def test_upload_is_a_counted_copy(fake_va: FakeVA, va_ctx: VAContext) -> None:
    W, H = 90, 60
    src = np.random.default_rng(1).integers(0, 255, (H * 3 // 2, W), np.uint8)
    cf = interop.wrap(src, format=FrameFormat.NV12)
    with pytest.raises(CopyRequiredError):
        interop.map(cf, MemoryType.VAAPI)
    with interop.copy_meter() as m:
        vf = interop.map(cf, MemoryType.VAAPI, allow_copy=True)
    assert m.copies == 1 and m.bytes == W * H * 3 // 2 and m.records[0].mapper == "cpu_to_vaapi"
    assert vf.memory_type is MemoryType.VAAPI and vf.parent is cf
    sid = vf[0].surface_id
    p = fake_va.info(sid)["pitch"]
    y = fake_va.plane(sid, 0, p[0] * H).reshape(H, p[0])[:, :W]
    uv = fake_va.plane(sid, 1, p[1] * (H // 2)).reshape(H // 2, p[1])[:, :W]
    assert np.array_equal(y, src[:H]) and np.array_equal(uv, src[H:])
    assert fake_va.info(sid)["images"] == 0, "the upload mapping is closed"


def test_upload_refuses_formats_va_cannot_hold(va_ctx: VAContext) -> None:
    rgb = interop.wrap(np.zeros((4, 4, 3), np.uint8), format=FrameFormat.RGB)
    with pytest.raises(UnsupportedFormatError, match="VA surfaces cannot hold RGB") as e:
        interop.map(rgb, MemoryType.VAAPI, allow_copy=True)
    assert type(e.value) is UnsupportedFormatError
