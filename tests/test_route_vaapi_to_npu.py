"""The mission's last hop on the fakes: a VA surface (VA-API fake driver under the real libva) -> DMA -> NPU
(OpenVINO remote-context double; the chroma plane imported into "the plugin's" Level Zero context through the
real Level Zero loader and its fake driver). No copy; the NPU side reads the surface's own bytes."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from tests import ze_fake


def case_vaapi_frame_reaches_the_npu_without_a_copy() -> None:
    from interop.tensors.level_zero import LevelZeroContext
    from interop.tensors.npu import NPUContext
    from interop.tensors.vaapi import VAContext
    from tests import va_fake
    from tests.ov_remote_double import RemoteContextDouble, as_void_ptr

    why = va_fake.build()
    if why:
        pytest.skip(why)
    fake = va_fake.FakeVA()
    fake.start()
    try:
        va = VAContext(fake.open())
        vf = va.new_frame(FrameFormat.NV12, 64, 32)
        sid = vf[0].surface_id
        info = fake.info(sid)
        py, puv = info["pitch"][0], info["pitch"][1]
        y = fake.plane(sid, 0, py * 32)
        uv = fake.plane(sid, 1, puv * 16)
        y[:] = np.arange(y.size, dtype=np.uint8)  # the "decoder" writes the surface
        uv[:] = 128
        chain = interop.route(MemoryType.VAAPI, MemoryType.NPU)
        assert chain.zero_copy and [m.name for m in chain.mappers] == ["vaapi_to_dma", "dma_to_npu"]

        plugin = LevelZeroContext.create()  # stands for the NPU plugin's own Level Zero context
        rc = RemoteContextDouble(plugin.ze_context)
        with interop.copy_meter() as m:
            n = interop.map(vf, NPUContext(rc))
        assert m.copies == 0 and n.memory_type is MemoryType.NPU and (n.width, n.height) == (64, 32)
        # Y went to the plugin as the exported fd; it maps to the surface's bytes
        (typ, shape, props), = rc.calls
        assert shape == [1, 32, py, 1] and props["MEM_TYPE"] == "SHARED_BUF"
        assert as_void_ptr(props["MEM_HANDLE"]) == n[0].mem_handle
        assert bytes(rc.tensors[0].mapping[: py * 32]) == bytes(y)
        # UV went through our import into the plugin's context, at its offset in the exported buffer
        assert n[1].mem_type == "L0_HOST" and list(n[1].native.shape) == [1, 16, puv // 2, 2]
        assert (n[1].native.data == 128).all()
        uv[5] = 7  # a later write by the "decoder" is what the NPU reads: same memory
        assert n[1].native.data.reshape(-1)[5] == 7
        n.release()
    finally:
        fake.stop()


globals().update(ze_fake.tests_for(globals()))
