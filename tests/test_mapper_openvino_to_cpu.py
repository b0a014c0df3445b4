"""OPENVINO -> CPU: numpy views of host ov.Tensors, zero-copy; frame planes come back as (H, W[, C])."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from tests.support.requirements import need_module

ov = need_module("openvino")

from interop.mappers.openvino_to_cpu import OpenVINOToCPU  # noqa: E402
from interop.tensors.openvino import OpenVINOTensor  # noqa: E402


def test_route_is_one_zero_copy_step() -> None:
    chain = interop.route(MemoryType.OPENVINO, MemoryType.CPU)
    assert chain.zero_copy and [type(m) for m in chain.mappers] == [OpenVINOToCPU]


def test_host_tensor_maps_to_a_shared_view() -> None:
    host = ov.Tensor(np.zeros((2, 3, 4), np.float32))
    with interop.copy_meter() as m:
        c = interop.map(host, MemoryType.CPU, mode=AccessMode.READ_WRITE)
    assert m.copies == 0 and c.memory_type is MemoryType.CPU
    arr = c.native
    assert arr.ctypes.data == host.data.ctypes.data and arr.flags.writeable
    arr[1, 2, 3] = 7
    assert host.data[1, 2, 3] == 7  # a CPU write is seen by OpenVINO
    host.data[0, 0, 0] = -1
    assert arr[0, 0, 0] == -1


def test_read_only_tensors_give_read_only_views() -> None:
    arr = np.zeros((4, 4), np.uint8)
    t = OpenVINOTensor.from_numpy(arr, parent=None, writable=False)
    c = interop.map(t, MemoryType.CPU)
    assert not c.native.flags.writeable and c.data_ptr == arr.ctypes.data
    with pytest.raises(interop.InvalidTensorError, match="read-only"):
        interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE)


def test_ffmpeg_frame_round_trip_gives_standard_planes() -> None:
    av = need_module("av")
    vf = av.VideoFrame(854, 480, "nv12")
    vf.pict_type = 1  # stands in for a decoder's frame, trusted for its full pitch (user frames are not)
    o = interop.map(vf, MemoryType.OPENVINO)
    c = interop.map(o, MemoryType.CPU)
    assert c.format is FrameFormat.NV12 and (c.width, c.height) == (854, 480)
    assert c[0].shape == (480, 854) and c[1].shape == (240, 427, 2)
    assert c[0].strides[0] == vf.planes[0].line_size and c[1].strides[0] == vf.planes[1].line_size
    assert [t.data_ptr for t in c.tensors] == [p.buffer_ptr for p in vf.planes]
    assert not c[0].native.flags.writeable  # still the decoder's read-only memory


class RemoteTensor:  # the class name and module OpenVINO's remote tensors have; no device here
    __module__ = "openvino._pyopenvino"

    def get_shape(self) -> list[int]:
        return [1, 4]

    def get_element_type(self) -> object:
        return ov.Type.u8


def test_remote_tensors_are_refused() -> None:
    t = OpenVINOTensor(RemoteTensor())
    assert t.is_remote and t.shape == (1, 4)
    with pytest.raises(interop.InvalidTensorError, match="device memory") as e:
        interop.map(t, MemoryType.CPU)
    assert type(e.value) is interop.InvalidTensorError


def test_remote_tensors_are_refused_by_numpy() -> None:
    with pytest.raises(interop.InteropError, match=r"OPENVINO tensor is not reachable from the CPU: interop\.map") as e:
        np.asarray(OpenVINOTensor(RemoteTensor()))
    assert type(e.value) is interop.InvalidTensorError


def test_other_tensors_are_refused() -> None:
    with pytest.raises(interop.InvalidTensorError):
        OpenVINOToCPU().map(np.zeros(3))
