"""CPU stand-ins for CUDA pieces, so the CUDA backend's logic is tested on machines without a GPU.

FakeDevice: a producer with ``__cuda_array_interface__`` whose "device pointer" is host memory (a numpy array).
FakeDriver: the driver calls interop makes, recorded; 2-D copies are memmoves (host memory stands in for device).
fake_driver_installed: a FakeDriver set as interop's CUDA driver, with empty staging pools, for one test.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest


class FakeDevice:
    """Memory that claims to be on cuda:``device``; ``stream`` is the producer stream it reports."""

    def __init__(self, array: np.ndarray, *, stream: Any = 1, device: int = 0, readonly: bool = False):
        self.array = array
        self.stream = stream
        self.device = device
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        a = self.array
        return {"version": 3, "shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, self.readonly),
                "strides": a.strides, "stream": self.stream}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)


class FakeDriver:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.blocks: list[Any] = []

    def order(self, device: int, producer: int, consumer: int) -> None:
        self.calls.append(("order", device, producer, consumer))

    def copy2d(self, device: int, stream: int, *, dst: int, dst_pitch: int, dst_host: bool, src: int, src_pitch: int,
               src_host: bool, width: int, height: int, sync: bool) -> None:
        self.calls.append(("copy2d", device, stream, dst_host, src_host, width, height, sync))
        for r in range(height):
            ctypes.memmove(dst + r * dst_pitch, src + r * src_pitch, width)

    def host_alloc(self, device: int, nbytes: int) -> int:
        buf = ctypes.create_string_buffer(nbytes)
        self.blocks.append(buf)
        self.calls.append(("host_alloc", device, nbytes))
        return ctypes.addressof(buf)

    def host_free(self, ptr: int) -> None:
        self.calls.append(("host_free", ptr))

    primary = (0, False)  # (flags, active) of the primary context

    def primary_state(self, device: int) -> tuple[int, bool]:
        return self.primary

    def push(self, device: int) -> None:
        self.calls.append(("push", device))

    def pop(self) -> None:
        self.calls.append(("pop",))

    def count(self, name: str) -> int:
        return sum(1 for c in self.calls if c[0] == name)


@contextmanager
def fake_driver_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    """A new FakeDriver as interop's CUDA driver and empty staging pools (so no block of another test's driver is
    reused) until the block ends; the driver in place before is put back."""
    from interop.native import cuda_driver as cd
    from interop.tensors import cuda as cu

    d = FakeDriver()
    old = cd._driver
    cd.set_driver(d)
    monkeypatch.setattr(cu, "_pools", {})
    try:
        yield d
    finally:
        cd.set_driver(old)
