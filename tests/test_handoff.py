"""interop.dma, the public module of frames between processes, its FrameFanout, and the hand-off benchmark's
machinery (consumers in other processes, latency samples taken on the shared monotonic clock)."""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

import interop
import interop.tensors.dma as old_dma
import interop.transport as old_transport
from interop import AccessMode, FrameFormat, MemoryType
from interop.benchmarks import handoff
from interop.dma import (
    FrameFanout,
    FramePool,
    FrameReceiver,
    FrameSender,
    InvalidTensorError,
    PeerClosedError,
    seqpacket_pair,
)


def test_public_module_names_the_same_objects_as_the_old_paths():
    import interop.dma as dma

    for name in ("FramePool", "DMAContext", "DMATensor", "frame_from_fds", "live_buffers", "PoolTimeoutError"):
        assert getattr(dma, name) is getattr(old_dma, name)
    for name in ("FrameServer", "FrameSender", "FrameReceiver", "connect", "commit", "seqpacket_pair",
                 "PeerClosedError", "ProtocolError", "TransportTimeoutError"):
        assert getattr(dma, name) is getattr(old_transport, name)
    assert set(dma.__all__) <= set(dir(dma))


def _write(frame, value: int) -> None:
    with interop.map(frame, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        for t in c:
            np.asarray(t)[:] = value


def _fanout(n: int, timeout: float | None = None):
    pairs = [seqpacket_pair() for _ in range(n)]
    fan = FrameFanout([FrameSender(a) for a, _ in pairs], timeout=timeout)
    return fan, [FrameReceiver(b) for _, b in pairs]


def test_fanout_sends_to_every_consumer_and_the_frame_returns_after_the_last():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    fan, rxs = _fanout(3)
    for i in range(1, 5):
        f = pool.acquire(timeout=5)
        _write(f, i)
        assert fan.send(f) == 3
        f.release()
        got = [rx.recv(timeout=5) for rx in rxs]
        for g in got:
            with interop.map(g, MemoryType.CPU) as c:
                assert int(np.asarray(c[0])[0, 0]) == i
        for g in got[:-1]:
            g.release()
        assert pool.free_count == 1  # the last consumer still holds this frame
        got[-1].release()
        assert fan.wait_returned(5) and pool.free_count == 2
    fan.close()
    pool.close()


def test_fanout_drops_a_consumer_that_is_gone_and_goes_on():
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 2)
    fan, rxs = _fanout(2)
    rxs[0].close()
    time.sleep(0.1)
    f = pool.acquire()
    assert fan.send(f) == 1 and fan.dropped == 1 and len(fan.consumers) == 1
    f.release()
    rxs[1].recv(timeout=5).release()
    assert fan.wait_returned(5) and pool.free_count == 2
    rxs[1].close()
    f = pool.acquire()
    time.sleep(0.1)
    with pytest.raises(PeerClosedError):
        fan.send(f)
    f.release()
    fan.close()
    pool.close()


def test_fanout_consumer_that_stops_reading_misses_frames_others_do_not_wait():
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 300)
    fan, rxs = _fanout(2, timeout=0)
    sent = 0
    t0 = time.monotonic()
    while fan.missed[id(fan.consumers[1])] == 0 and time.monotonic() - t0 < 20:
        f = pool.acquire(timeout=5)
        fan.send(f)
        f.release()
        sent += 1
        g = rxs[0].recv(timeout=5)  # the first consumer keeps up; the second never reads
        g.release()
    assert fan.missed[id(fan.consumers[1])] >= 1 and fan.missed[id(fan.consumers[0])] == 0
    fan.close()
    for rx in rxs:
        rx.close()
    pool.close()


def test_fanout_refuses_what_is_not_a_sender():
    with pytest.raises(InvalidTensorError, match="FrameSender"):
        FrameFanout([object()])  # type: ignore[list-item]


def test_handoff_latency_machinery_returns_one_sample_per_timed_frame():
    n = 5
    lat = handoff._latency_interop(64, 48, n, 0.002, False)
    assert len(lat) == n + handoff.WARMUP and all(0 < x < 5e9 for x in lat)
    lat = handoff._latency_interop(64, 48, n, 0.002, False, slots=0)
    assert len(lat) == n + handoff.WARMUP and all(0 < x < 5e9 for x in lat)
    lat = handoff._latency_pipe(64, 48, n, 0.002)
    assert len(lat) == n + handoff.WARMUP and all(0 < x < 5e9 for x in lat)


@pytest.mark.skipif(importlib.util.find_spec("iceoryx2") is None, reason="iceoryx2 (the bench extra) not installed")
def test_handoff_iceoryx2_machinery_returns_one_sample_per_timed_frame():
    lat = handoff._latency_iceoryx2(64, 48, 5, 0.002, False)
    assert len(lat) == 5 + handoff.WARMUP and all(0 < x < 5e9 for x in lat)


def test_handoff_without_iceoryx2_skips_its_parts_with_the_reason(monkeypatch):
    monkeypatch.setattr(handoff, "iceoryx2_missing", lambda: "needs iceoryx2 (pip install 'interop-video[bench]')")
    monkeypatch.setattr(handoff, "_latency_interop", lambda *a, **k: [1000] * 20)
    monkeypatch.setattr(handoff, "_latency_pipe", lambda *a: [2000] * 20)
    res = handoff.latency(quick=True)
    skipped = [r for r in res if r.skipped]
    assert skipped and all("iceoryx2" in r.case and "pip install" in r.skipped for r in skipped)
    assert all(r.value == 1.0 for r in res if r.case.startswith("interop"))


def test_handoff_latency_interleaves_rounds_and_reports_each_round(monkeypatch):
    """interop and iceoryx2, blocking and busy-poll, run as interleaved rounds: each case's value is the median of
    all its rounds' samples, ``per_round`` each round's median, and the ratio the median of the rounds' own ratios
    (the pooled ratio beside it); the other cases run once."""
    calls: list[tuple[str, bool, bool]] = []
    # round r: interop blocking takes 30 + r us, iceoryx2 blocking 20, 30, 40 us (rounds 0, 1, 2); busy-poll 10 us
    iox_blocking = {0: 20_000, 1: 30_000, 2: 40_000}

    def fake_interop(w, h, n, interval, poll, slots=None, views=True):
        calls.append(("interop", poll, views and slots is None))
        r = sum(1 for c in calls if c == ("interop", poll, True)) - 1
        return [(10_000 if poll else 30_000 + 1000 * r)] * (handoff.WARMUP + 4)

    def fake_iceoryx2(w, h, n, interval, poll):
        calls.append(("iceoryx2", poll, True))
        r = sum(1 for c in calls if c == ("iceoryx2", poll, True)) - 1
        return [10_000 if poll else iox_blocking[r]] * (handoff.WARMUP + 4)

    monkeypatch.setattr(handoff, "iceoryx2_missing", lambda: None)
    monkeypatch.setattr(handoff, "SIZES", {"1080p": (64, 48)})
    monkeypatch.setattr(handoff, "_latency_interop", fake_interop)
    monkeypatch.setattr(handoff, "_latency_iceoryx2", fake_iceoryx2)
    monkeypatch.setattr(handoff, "_latency_pipe", lambda *a: [2000] * 20)
    res = {r.case: r for r in handoff.latency(quick=True)}
    round_order = [("interop", False, True), ("iceoryx2", False, True), ("interop", True, True),
                   ("iceoryx2", True, True)]
    # three rounds (the default), each case in turn, the middle one in the reverse order
    assert calls[:12] == round_order + round_order[::-1] + round_order
    assert len(calls) == 15  # then recv + map (blocking, busy-poll) and fd with every frame, once each
    blocking = res["interop blocking 1080p"]
    assert blocking.details["per_round"] == [30.0, 31.0, 32.0] and blocking.value == 31.0
    assert blocking.details["samples"] == 12 and blocking.details["reps"] == 3
    assert res["iceoryx2 blocking (Listener) 1080p"].details["per_round"] == [20.0, 30.0, 40.0]
    assert blocking.details["per_round_x"] == [1.5, 1.03, 0.8]
    assert blocking.details["x_iceoryx2_blocking"] == 1.03  # the median of the rounds' ratios
    assert blocking.details["x_iceoryx2_blocking_pooled"] == round(31.0 / 30.0, 2)
    assert res["interop busy-poll 1080p"].details["x_iceoryx2_blocking"] == 0.33  # 10 / 30 (the middle round)
    assert res["interop blocking, recv + map 1080p"].details["samples"] == 4
    assert "per_round" not in res["pipe 1080p"].details
    assert "| 30.0 / 31.0 / 32.0; x 1.5 / 1.03 / 0.8 |" in handoff.markdown(list(res.values()))


def test_handoff_takes_reps_as_the_bench_command_passes_it(monkeypatch):
    from interop import benchmarks

    assert "reps" in benchmarks.options_of(handoff)
    calls = []
    monkeypatch.setattr(handoff, "iceoryx2_missing", lambda: "needs iceoryx2")
    monkeypatch.setattr(handoff, "_latency_interop", lambda *a, **k: calls.append(a) or [1000] * 20)
    monkeypatch.setattr(handoff, "_latency_pipe", lambda *a: [2000] * 20)
    monkeypatch.setattr(handoff, "throughput", lambda quick=False: [])
    report = benchmarks.run([handoff], quick=True, options={"reps": 5})
    blocking = [r for r in report.results if r.case == "interop blocking 1080p"][0]
    assert blocking.details["reps"] == 5 and len(blocking.details["per_round"]) == 5
