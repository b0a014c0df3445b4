"""Malformed peer headers (colorspace, color range, dtype bytes, time base) raise ProtocolError, leak no fd, and the
receiver keeps working."""

from __future__ import annotations

import array
import gc
import os
import socket

import pytest

from interop import FrameFormat
from interop.tensors.dma import DMAContext
from interop.transport import (
    _FRAME,
    _HEAD,
    FrameReceiver,
    FrameSender,
    ProtocolError,
    _encode_frame,
    seqpacket_pair,
)

FRAME_AT = _HEAD.size
PLANE_AT = _HEAD.size + _FRAME.size


def _send_raw(sock: socket.socket, msg: bytes, fds: list[int]) -> None:
    sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def _fd_count() -> int:
    gc.collect()  # an earlier test's frames, collected mid-test, would close their fds and change the count
    return len(os.listdir("/proc/self/fd"))


def _good():
    f = DMAContext().alloc_frame(FrameFormat.NV12, 16, 16)
    bufs = [f.tensors[0].buffer]
    return f, bytearray(_encode_frame(1, f, bufs, 1, 2**64 - 1)), [b.fd for b in bufs]


def _patch(msg: bytearray, at: int, data: bytes) -> bytes:
    msg[at:at + len(data)] = data
    return bytes(msg)


@pytest.mark.parametrize("what, at, data, match", [
    ("colorspace", FRAME_AT + 22, bytes([200]), "colorspace"),
    ("color range", FRAME_AT + 23, bytes([77]), "color range"),
    ("dtype bytes", PLANE_AT + 2, b"\xff\xfe\x80\x81", "dtype"),
    ("time base", FRAME_AT + 40, (0).to_bytes(8, "little") + bytes([2]), "zero denominator"),
])
def test_malformed_header_is_a_protocol_error(what, at, data, match):
    f, msg, fds = _good()
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    n = _fd_count()
    _send_raw(a, _patch(msg, at, data), fds)
    with pytest.raises(ProtocolError, match=match):
        rx.recv(timeout=5)
    assert _fd_count() == n, "the received fds are closed"
    # the receiver goes on: a good frame after the bad one
    tx = FrameSender(a)
    tx.send(DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16))
    g = rx.recv(timeout=5)
    assert g is not None and g.format is FrameFormat.GRAY8
    g.release()
    tx.close()
    rx.close()
    f.release()


def test_unmodified_header_still_builds():
    f, msg, fds = _good()
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    _send_raw(a, bytes(msg), fds)
    g = rx.recv(timeout=5)
    assert g.format is FrameFormat.NV12 and [t.info for t in g] == [t.info for t in f]
    g.release()
    a.close()
    rx.close()
    f.release()
