"""The hand-off's per-frame fast paths give what the general paths give.

- interop.map() of a Tensor or Frame whose route was planned before (a received frame, mapped to the CPU once per
  frame) runs the planned step without a route search; a registered mapper, an input the step refuses, a released
  input or a destination context take the general path.
- FrameReceiver.recv() of a frame over buffers it holds, in a layout checked before, still checks the fields that
  change per frame (frame id, pts) and drops torn frames.
"""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType, routing
from interop.errors import InvalidTensorError
from interop.mapper import _registry
from interop.transport import _FID_AT, _PTS_AT, ProtocolError
from tests.support.transport_link import capture_sent


def _hand_over(pool, tx, rx, value: int):
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    assert g is not None
    return g


def _count_plans(monkeypatch) -> list[int]:
    calls = [0]
    plan = routing._plan

    def counting(*a, **k):
        calls[0] += 1
        return plan(*a, **k)

    monkeypatch.setattr(routing, "_plan", counting)
    return calls


def test_a_planned_route_maps_the_next_frame_without_a_search(link, monkeypatch):
    pool, tx, rx = link
    calls = _count_plans(monkeypatch)
    for k in range(4):
        g = _hand_over(pool, tx, rx, 10 + k)
        with interop.map(g, MemoryType.CPU) as c:
            assert c.memory_type is MemoryType.CPU and c.context is interop.Context.default(MemoryType.CPU)
            y = np.asarray(c[0])
            assert y.shape == (32, 64) and (y == 10 + k).all() and not y.flags.writeable  # READ: read-only
            del y
        g.release()
        assert tx.wait_returned(5)
        if k == 0:
            calls[0] = 0  # the first frame planned both routes (the pool's WRITE map, the received READ map)
    assert calls[0] == 0, "the routes planned for the first frame are not searched again"


def test_a_registered_mapper_drops_the_planned_routes(link, monkeypatch):
    pool, tx, rx = link
    calls = _count_plans(monkeypatch)
    g = _hand_over(pool, tx, rx, 1)
    interop.map(g, MemoryType.CPU).release()
    interop.map(g, MemoryType.CPU).release()
    before = calls[0]
    monkeypatch.setitem(_registry, ("test-only", "edge"), object)  # the graph changed: plan again
    interop.map(g, MemoryType.CPU).release()
    assert calls[0] == before + 1
    g.release()


def test_the_planned_step_keeps_the_general_paths_answers(link):
    pool, tx, rx = link
    g = _hand_over(pool, tx, rx, 7)
    interop.map(g, MemoryType.CPU).release()  # planned
    w = interop.map(g, MemoryType.CPU, mode=AccessMode.WRITE)  # another mode: planned on its own
    assert np.asarray(w[0]).flags.writeable
    w.release()
    c = interop.map(g, MemoryType.CPU, context=interop.Context.default(MemoryType.CPU))  # a destination context
    assert (np.asarray(c[0]) == 7).all()
    c.release()
    g.release()
    with pytest.raises(InvalidTensorError):  # a released frame is refused as before
        interop.map(g, MemoryType.CPU)
    t = _hand_over(pool, tx, rx, 9)
    plane = t[0]
    with interop.map(plane, MemoryType.CPU) as c0:  # a tensor: planned apart from frames
        assert (np.asarray(c0) == 9).all()
    with interop.map(plane, MemoryType.CPU) as c1:
        assert (np.asarray(c1) == 9).all()
    t.release()


def test_a_known_layout_still_has_its_per_frame_fields_checked(link):
    pool, tx, rx = link
    for _ in range(2):  # each buffer's fd and the layout cross once
        g = _hand_over(pool, tx, rx, 1)
        g.release()
        assert tx.wait_returned(5)
    f = pool.acquire(timeout=5)
    sent = capture_sent(tx)
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    assert g is not None and g.metadata["frame_id"] == 3 and len(sent) == 1
    g.release()
    assert tx.wait_returned(5)
    good = sent[-1]
    a = tx._sock._sock
    for _what, at, data, match in (("frame id 0", _FID_AT, bytes(8), "frame id 0"),
                                  ("a pts where the layout has none", _PTS_AT, (5).to_bytes(8, "little"), "pts")):
        bad = bytearray(good)
        bad[at:at + len(data)] = data
        a.send(bytes(bad))
        with pytest.raises(ProtocolError, match=match):
            rx.recv(timeout=5)
    # a torn frame (its marker's sequence does not match) is dropped on the cached path too
    bad = bytearray(good)
    bad[_FID_AT + 8:_FID_AT + 16] = (12345).to_bytes(8, "little")
    a.send(bytes(bad))
    with pytest.raises(interop.transport.TransportTimeoutError):
        rx.recv(timeout=0.2)
    assert rx.torn == 1
    # and the receiver goes on
    g = _hand_over(pool, tx, rx, 3)
    assert (np.asarray(interop.map(g, MemoryType.CPU)[0]) == 3).all()
    g.release()


