"""Frame hand-off between processes: latency (the producer publishes -> the consumer holds a numpy view of the frame),
median and p99, for 1080p NV12 and 4K NV12 frames, and throughput from one producer to 1, 2 and 4 consumers.

Side by side in one run:
- ``interop``: a FramePool frame sent with a FrameSender; the consumer takes numpy views of it with
  ``FrameReceiver.recv_views()`` and reads them (rows "recv + map": the general path, ``recv()`` then
  ``interop.map(frame, CPU)``);
- ``iceoryx2``: its Python publish/subscribe of the same payload (loaned in its shared memory, no copy), with the
  consumer woken by an iceoryx2 Listener (an event service beside the data service);
- ``pipe``: the frame's bytes through ``os.pipe`` into the consumer's buffer.
Each is measured blocking (the consumer sleeps until woken) and, separately, busy-polling (the consumer spins on a
non-blocking receive). iceoryx2 is optional (``pip install interop-video[bench]``): without it those parts are
skipped with the reason.

Where the scheduler puts a consumer process (on the producer's vCPU or the other one) moves a wake-up by tens of
microseconds on a small VM, and it changes from one consumer process to the next. So the cases the acceptance ratio
compares (interop and iceoryx2, blocking and busy-poll) run as ``reps`` interleaved rounds (default 3; ``interop
bench --reps N``), each round running interop blocking, iceoryx2 blocking, interop busy-poll and iceoryx2 busy-poll
in turn (every other round in the reverse order), each in a new consumer process. Such a case reports the median
over every sample of every round, and in its details ``per_round`` (each round's median); ``x_iceoryx2_blocking`` is
the median of the rounds' own ratios (a round's interop median over that round's iceoryx2 blocking median,
``per_round_x``), and ``x_iceoryx2_blocking_pooled`` the ratio of the pooled medians. The other cases (recv + map, fd with every frame,
the pipe) run once each, and their ratio is against iceoryx2's pooled blocking median.

Latency is taken on CLOCK_MONOTONIC, which both processes share: the producer writes the time into the frame just
before it publishes; the consumer reads it back from its numpy view of the frame and subtracts it from the time it
got that view. The producer publishes at a fixed pace (slower than any hand-off measured) so that no frame queues
behind another; the consumer sends its samples back at the end.

The consumers are this module run as a script: ``python -m interop.benchmarks.handoff ROLE ...``.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import Result, median, skipped

NAME = "handoff"
SUMMARY = "frame hand-off between processes: interop (slot references, fds per frame) against iceoryx2 and a pipe"
REQUIRES: tuple[tuple[str, str], ...] = ()

SIZES = {"1080p": (1920, 1080), "4K": (3840, 2160)}
STOP = 0  # a timestamp of 0 tells a consumer to stop


def _now() -> int:
    return time.monotonic_ns()


def _p99(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def _nv12_bytes(w: int, h: int) -> int:
    return w * h * 3 // 2


def iceoryx2_missing() -> str | None:
    """Why the iceoryx2 parts cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("iceoryx2") is None:
        return "needs iceoryx2 (pip install 'interop-video[bench]')"
    return None


# ---- consumers (run in their own process) ---------------------------------------------------------------


def _consume_interop(sock_fd: int, poll: bool, views: bool, reply: Callable[[Any], None]) -> None:
    """``views``: FrameReceiver.recv_views() (numpy views straight from the receive); else recv() and
    interop.map(frame, CPU) (the general path, a Frame of tensors first)."""
    import interop
    from interop import MemoryType
    from interop.transport import FrameReceiver, TransportTimeoutError

    rx = FrameReceiver(socket.socket(fileno=sock_fd))
    reply("ready")
    lat: list[int] = []
    frames = 0
    receive: Callable[..., Any] = rx.recv_views if views else rx.recv
    while True:
        if poll:
            try:
                g = receive(timeout=0)
            except TransportTimeoutError:
                continue
        else:
            g = receive()
        if g is None:
            break
        if views:
            y = g.planes[0]
            t0 = int(y[0, :8].view("<u8")[0])
            t1 = _now()
            del y
        else:
            with interop.map(g, MemoryType.CPU) as c:
                assert isinstance(c, interop.Frame)
                y = np.asarray(c[0])
                t0 = int(y[0, :8].view("<u8")[0])
                t1 = _now()
                del y
        g.release()
        frames += 1
        if t0 != STOP:
            lat.append(t1 - t0)
    rx.close()
    reply({"lat_ns": lat, "frames": frames})


def _iox_ports(service: str, nbytes: int, consumers: int, *, publisher: bool) -> tuple[Any, ...]:
    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Fatal)  # it reports a missing config file on stderr
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    data = (node.service_builder(iox2.ServiceName.new(service)).publish_subscribe(iox2.Slice[ctypes.c_uint8])
            .max_subscribers(max(consumers, 1)).subscriber_max_buffer_size(4).enable_safe_overflow(False)
            .open_or_create())
    event = node.service_builder(iox2.ServiceName.new(service + "/ev")).event().open_or_create()
    if publisher:
        port = (data.publisher_builder().initial_max_slice_len(nbytes)
                .backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create())
        return node, data, event, port, event.notifier_builder().create()
    return node, data, event, data.subscriber_builder().buffer_size(4).create(), event.listener_builder().create()


def _consume_iceoryx2(service: str, nbytes: int, consumers: int, poll: bool, reply: Callable[[Any], None]) -> None:
    node, data, event, sub, listener = _iox_ports(service, nbytes, consumers, publisher=False)
    reply("ready")
    lat: list[int] = []
    frames = 0
    running = True
    while running:
        if not poll:
            listener.blocking_wait()  # woken by the producer's notify(); several samples may be waiting
        while True:
            sample = sub.receive()
            if sample is None:
                break
            p = sample.payload()
            # a numpy view of the sample's shared memory, as the interop consumer holds one of its frame
            y = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(p.as_ptr()))
            t0 = int(y[:8].view("<u8")[0])
            t1 = _now()
            del y, p
            sample.delete()
            frames += 1
            if t0 == STOP:
                running = False
                break
            lat.append(t1 - t0)
    reply({"lat_ns": lat, "frames": frames})


def _consume_pipe(fd: int, nbytes: int, reply: Callable[[Any], None]) -> None:
    buf = bytearray(nbytes)
    mv = memoryview(buf)
    f = os.fdopen(fd, "rb", buffering=0)
    reply("ready")
    lat: list[int] = []
    frames = 0
    while True:
        got = 0
        while got < nbytes:
            k = f.readinto(mv[got:])
            if not k:
                reply({"lat_ns": lat, "frames": frames})
                return
            got += k
        y = np.frombuffer(buf, np.uint8)
        t0 = int(y[:8].view("<u8")[0])
        t1 = _now()
        frames += 1
        if t0 != STOP:
            lat.append(t1 - t0)


def _main(argv: list[str]) -> int:
    role = argv[0]

    def reply(obj: Any) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    if role == "interop":
        _consume_interop(int(argv[1]), argv[2] == "poll", argv[3] == "views", reply)
    elif role == "iceoryx2":
        _consume_iceoryx2(argv[1], int(argv[2]), int(argv[3]), argv[4] == "poll", reply)
    elif role == "pipe":
        _consume_pipe(int(argv[1]), int(argv[2]), reply)
    else:
        raise SystemExit(f"unknown role {role!r}")
    return 0


# ---- producers (this process) ---------------------------------------------------------------------------


class _Peer:
    """A consumer process; its replies are JSON lines on its stdout."""

    def __init__(self, args: list[str], pass_fds: Sequence[int] = ()):
        self.p = subprocess.Popen([sys.executable, "-m", "interop.benchmarks.handoff", *args], pass_fds=list(pass_fds),
                                  stdout=subprocess.PIPE, text=True)

    def reply(self, timeout: float = 60.0) -> Any:
        import select

        assert self.p.stdout is not None
        if not select.select([self.p.stdout], [], [], timeout)[0]:
            self.p.kill()
            raise RuntimeError("a hand-off consumer did not answer in time")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"a hand-off consumer died (exit status {self.p.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


WARMUP = 10  # frames published before the timed ones (first touches of pages and code paths)


def _pace(n: int, interval: float, publish: Callable[[int], None]) -> None:
    """Publish ``n`` timed frames (after WARMUP untimed ones), one every ``interval`` seconds, then the stop frame."""
    nxt = time.perf_counter()
    for _ in range(n + WARMUP):
        nxt += interval
        while time.perf_counter() < nxt:
            time.sleep(max(0.0, min(nxt - time.perf_counter() - 2e-4, interval)))
        publish(_now())
    publish(STOP)


def _interop_pool(w: int, h: int, count: int) -> tuple[Any, dict[int, np.ndarray], list[Any]]:
    """A pool, a writable numpy view of each of its buffers (by pool slot: the producer's own mapping of the pool,
    made once, as iceoryx2's publisher has its shared memory mapped), every pixel set once, and the mappings."""
    from interop import FrameFormat
    from interop.tensors.dma import FramePool

    pool = FramePool(FrameFormat.NV12, w, h, count)
    views: dict[int, np.ndarray] = {}
    maps = []
    for slot in pool.slots:
        m = slot.buffer.mapping(True)
        maps.append(m)
        mem = np.ctypeslib.as_array((ctypes.c_uint8 * slot.marker_offset).from_address(m.address))
        mem[:] = 0x10
        views[slot.index] = mem[pool.offsets[0]:]  # the Y plane's first row starts here
    return pool, views, maps


def _stamp(y: np.ndarray, t: int) -> None:
    y[:8] = np.frombuffer(int(t).to_bytes(8, "little"), np.uint8)


def _latency_interop(w: int, h: int, n: int, interval: float, poll: bool, slots: int | None = None,
                     views: bool = True) -> list[int]:
    """``slots=0``: every frame carries its buffer's fd (FRAME messages); None: slot references (the default).
    ``views``: the consumer takes numpy views with recv_views(); else recv() and interop.map() to the CPU.

    Per frame the producer does what iceoryx2's does: takes a free buffer of the pool (FramePool.acquire, as
    iceoryx2 loans a sample: before the time is taken), writes the time into it, sends it (which commits it, as
    iceoryx2's send publishes its sample) and goes back to its pacing; it lets go of its own hold on the frame
    before it takes the next one (the buffer returns to the pool once the consumer's DONE came too, as an iceoryx2
    sample returns when its subscriber drops it)."""
    from interop.transport import FrameSender, seqpacket_pair

    pool, ys, maps = _interop_pool(w, h, 4)
    a, b = seqpacket_pair()
    peer = _Peer(["interop", str(b.fileno()), "poll" if poll else "block", "views" if views else "map"],
                 [b.fileno()])
    b.close()
    tx = FrameSender(a) if slots is None else FrameSender(a, slots=slots)
    peer.reply()
    held: list[Any] = []

    def publish(t: int) -> None:
        if held:
            held.pop().release()
        f = pool.acquire(timeout=10)
        held.append(f)
        _stamp(ys[f.metadata["pool_slot"]], t if t == STOP else _now())
        tx.send(f)

    try:
        _pace(n, interval, publish)
        tx.wait_returned(10)
        tx.close()
        return list(peer.reply()["lat_ns"])
    finally:
        for f in held:
            f.release()
        tx.close()
        peer.close()
        ys.clear()
        maps.clear()
        pool.close()


def _latency_iceoryx2(w: int, h: int, n: int, interval: float, poll: bool) -> list[int]:
    nbytes = _nv12_bytes(w, h)
    service = f"interop-bench/{uuid.uuid4().hex}"
    node, data, event, pub, notifier = _iox_ports(service, nbytes, 1, publisher=True)
    peer = _Peer(["iceoryx2", service, str(nbytes), "1", "poll" if poll else "block"])
    try:
        peer.reply()  # subscribed
        _wait_connected(pub)

        def publish(t: int) -> None:
            sample = pub.loan_slice_uninit(nbytes)
            y = np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(sample.payload().as_ptr()))
            y[:] = np.frombuffer(int(t if t == STOP else _now()).to_bytes(8, "little"), np.uint8)
            sample.assume_init().send()
            if not poll:
                notifier.notify()

        _pace(n, interval, publish)
        return list(peer.reply()["lat_ns"])
    finally:
        peer.close()


def _wait_connected(pub: Any) -> None:
    # a subscriber that has just been created is connected on the publisher's next update
    for _ in range(10):
        pub.update_connections()
        time.sleep(0.01)


def _latency_pipe(w: int, h: int, n: int, interval: float) -> list[int]:
    nbytes = _nv12_bytes(w, h)
    r, wfd = os.pipe()
    peer = _Peer(["pipe", str(r), str(nbytes)], [r])
    os.close(r)
    peer.reply()
    src = np.full(nbytes, 0x10, np.uint8)
    mv = memoryview(src.data)

    def publish(t: int) -> None:
        src[:8] = np.frombuffer(int(t if t == STOP else _now()).to_bytes(8, "little"), np.uint8)
        done = 0
        while done < nbytes:
            done += os.write(wfd, mv[done:])

    try:
        _pace(n, interval, publish)
        os.close(wfd)
        wfd = -1
        return list(peer.reply()["lat_ns"])
    finally:
        if wfd >= 0:
            os.close(wfd)
        peer.close()


def _lat_result(case: str, lat_ns: list[int], label: str, extra: dict[str, Any]) -> Result:
    us = [x / 1000 for x in lat_ns[WARMUP:]]
    return Result(NAME, case, round(median(us), 1), "us median",
                  {"p99_us": round(_p99(us), 1), "samples": len(us), "frame": label, **extra})


def _rounds_result(case: str, rounds: list[list[int]], label: str) -> Result:
    """A case run in interleaved rounds: the median and p99 over every round's timed samples, each round's median."""
    per = [[x / 1000 for x in lat[WARMUP:]] for lat in rounds]
    us = [x for r in per for x in r]
    return Result(NAME, case, round(median(us), 1), "us median",
                  {"p99_us": round(_p99(us), 1), "samples": len(us), "frame": label, "reps": len(rounds),
                   "per_round": [round(median(r), 1) for r in per],
                   "stat": f"median over the samples of {len(rounds)} interleaved rounds"})


BLOCKING = "iceoryx2 blocking (Listener)"


def latency(quick: bool = False, reps: int | None = None) -> list[Result]:
    """``reps``: interleaved rounds of the cases the acceptance ratio compares (see the module docstring)."""
    reps = max(1, int(reps or 3))
    n = 150 if quick else 1000
    out: list[Result] = []
    missing = iceoryx2_missing()
    for label, (w, h) in SIZES.items():
        interval = 0.004 if label == "1080p" else 0.012  # above the slowest hand-off (the pipe) at that size
        # the interleaved cases, in the order each round runs them
        runs: dict[str, tuple[Callable[..., list[int]], bool]] = {
            "interop blocking": (_latency_interop, False),
            BLOCKING: (_latency_iceoryx2, False),
            "interop busy-poll": (_latency_interop, True),
            "iceoryx2 busy-poll": (_latency_iceoryx2, True),
        }
        if missing:
            runs = {k: v for k, v in runs.items() if not k.startswith("iceoryx2")}
        rounds: dict[str, list[list[int]]] = {k: [] for k in runs}
        for r in range(reps):
            # every other round in the reverse order: no case always runs first, or always right after another
            for k in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                measure, poll = runs[k]
                rounds[k].append(measure(w, h, n, interval, poll))
        res = {k: _rounds_result(f"{k} {label}", v, label) for k, v in rounds.items()}
        for k in ("interop blocking", "interop busy-poll"):
            out.append(res[k])
        out.append(_lat_result(f"interop blocking, recv + map {label}",
                               _latency_interop(w, h, n, interval, False, views=False), label, {}))
        out.append(_lat_result(f"interop busy-poll, recv + map {label}",
                               _latency_interop(w, h, n, interval, True, views=False), label, {}))
        out.append(_lat_result(f"interop blocking, fd with every frame {label}",
                               _latency_interop(w, h, n, interval, False, slots=0), label, {}))
        for k in (BLOCKING, "iceoryx2 busy-poll"):
            out.append(skipped(NAME, f"{k} {label}", missing) if missing else res[k])
        out.append(_lat_result(f"pipe {label}", _latency_pipe(w, h, max(20, n // 5), interval), label, {}))
    _ratios(out)
    return out


def _ratios(results: list[Result]) -> None:
    """interop's medians against iceoryx2's blocking median at the same size (the issue's acceptance ratio). For the
    interleaved cases: the median of the rounds' own ratios, and the ratio of the pooled medians."""
    by = {r.case: r for r in results if r.skipped is None}
    for label in SIZES:
        ref = by.get(f"{BLOCKING} {label}")
        if ref is None or ref.value <= 0:
            continue
        for case in (f"interop blocking {label}", f"interop busy-poll {label}"):
            r = by.get(case)
            if r is None:
                continue
            xs = [a / b for a, b in zip(r.details["per_round"], ref.details["per_round"]) if b > 0]
            r.details["x_iceoryx2_blocking"] = round(median(xs), 2) if xs else None
            r.details["per_round_x"] = [round(x, 2) for x in xs]
            r.details["x_iceoryx2_blocking_pooled"] = round(r.value / ref.value, 2)
        for case in (f"interop blocking, recv + map {label}", f"interop busy-poll, recv + map {label}"):
            if case in by:
                by[case].details["x_iceoryx2_blocking"] = round(by[case].value / ref.value, 2)


# ---- throughput: one producer, several consumers -------------------------------------------------------


def _throughput_interop(w: int, h: int, consumers: int, seconds: float) -> tuple[float, int]:
    from interop import FrameFormat
    from interop.tensors.dma import FramePool
    from interop.transport import FrameSender, seqpacket_pair

    pool = FramePool(FrameFormat.NV12, w, h, 4)
    peers, senders = [], []
    for _ in range(consumers):
        a, b = seqpacket_pair()
        peers.append(_Peer(["interop", str(b.fileno()), "block", "views"], [b.fileno()]))
        b.close()
        senders.append(FrameSender(a))
    for p in peers:
        p.reply()
    sent = 0
    try:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            f = pool.acquire(timeout=10)
            for tx in senders:
                tx.send(f)
            f.release()  # the buffer comes back when the last consumer released it
            sent += 1
        for tx in senders:
            tx.wait_returned(10)
        elapsed = time.perf_counter() - t0
        for tx in senders:
            tx.close()
        got = min(int(p.reply()["frames"]) for p in peers)
        return got / elapsed, sent - got
    finally:
        for tx in senders:
            tx.close()
        for p in peers:
            p.close()
        pool.close()


def _throughput_iceoryx2(w: int, h: int, consumers: int, seconds: float) -> tuple[float, int]:
    nbytes = _nv12_bytes(w, h)
    service = f"interop-bench/{uuid.uuid4().hex}"
    node, data, event, pub, notifier = _iox_ports(service, nbytes, consumers, publisher=True)
    peers = [_Peer(["iceoryx2", service, str(nbytes), str(consumers), "block"]) for _ in range(consumers)]
    sent = 0
    try:
        for p in peers:
            p.reply()
        _wait_connected(pub)
        stop = np.frombuffer(int(STOP).to_bytes(8, "little"), np.uint8)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            sample = pub.loan_slice_uninit(nbytes)
            y = np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(sample.payload().as_ptr()))
            y[:] = 1
            sample.assume_init().send()
            notifier.notify()
            sent += 1
        sample = pub.loan_slice_uninit(nbytes)
        np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(sample.payload().as_ptr()))[:] = stop
        sample.assume_init().send()
        notifier.notify()
        got = [int(p.reply()["frames"]) - 1 for p in peers]
        elapsed = time.perf_counter() - t0
        return min(got) / elapsed, sent - min(got)
    finally:
        for p in peers:
            p.close()


def throughput(quick: bool = False) -> list[Result]:
    seconds = 1.0 if quick else 3.0
    w, h = SIZES["1080p"]
    out: list[Result] = []
    missing = iceoryx2_missing()
    for k in (1, 2, 4):
        fps, lost = _throughput_interop(w, h, k, seconds)
        out.append(Result(NAME, f"interop 1 -> {k} consumers 1080p", round(fps, 1), "frames/s to every consumer",
                          {"lost": lost}))
        case = f"iceoryx2 1 -> {k} consumers 1080p"
        if missing:
            out.append(skipped(NAME, case, missing))
        else:
            fps, lost = _throughput_iceoryx2(w, h, k, seconds)
            out.append(Result(NAME, case, round(fps, 1), "frames/s to every consumer", {"lost": lost}))
    return out


def run(quick: bool = False, reps: int | None = None) -> list[Result]:
    """``reps``: interleaved rounds of the latency cases the acceptance ratio compares (default 3)."""
    return latency(quick, reps) + throughput(quick)


def markdown(results: list[Result]) -> str:
    lines = ["| case | value | unit | p99 us | x iceoryx2 blocking | samples / lost | per round (median; x) |",
             "|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        d = r.details
        rounds = " / ".join(str(x) for x in d.get("per_round", ()))
        if d.get("per_round_x"):
            rounds += f"; x {' / '.join(str(x) for x in d['per_round_x'])}"
        lines.append(f"| {r.case} | {r.value:.4g} | {r.unit} | {d.get('p99_us', '')} | {d.get('x_iceoryx2_blocking', '')} "
                     f"| {d.get('samples', d.get('lost', ''))} | {rounds} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
