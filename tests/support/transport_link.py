"""A producer and a consumer of frames over one socket pair, for the transport's tests.

A pytest plugin (tests/conftest.py lists it in ``pytest_plugins``): the ``link`` fixture; tests import
``capture_sent`` from here. PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from interop import FrameFormat
from interop.tensors.dma import FramePool
from interop.transport import FrameReceiver, FrameSender, seqpacket_pair


@pytest.fixture
def link() -> Iterator[tuple[FramePool, FrameSender, FrameReceiver]]:
    """(a 2-frame NV12 64x32 pool, a sender, the receiver at the other end); all closed afterwards."""
    pool = FramePool(FrameFormat.NV12, 64, 32, 2)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    yield pool, tx, rx
    tx.close()
    rx.close()
    pool.close()


class _SendObserved:
    """A socket whose send() is observed (socket.socket's methods cannot be patched on the instance)."""

    def __init__(self, sock: Any, send: Any):
        self._sock = sock
        self.send = send

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def capture_sent(tx: FrameSender) -> list[bytes]:
    """From now on, every message ``tx`` sends is also appended (as bytes) to the returned list; the real socket
    stays at ``tx._sock._sock`` (to send hand-made messages to the receiver)."""
    sent: list[bytes] = []
    real = tx._sock.send

    def send(data: Any, flags: int = 0) -> Any:
        sent.append(bytes(data))
        return real(data, flags)

    tx._sock = _SendObserved(tx._sock, send)
    return sent
