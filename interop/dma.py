"""Zero-copy frames between processes: the public module.

A producer fills frames of a :class:`FramePool` (sealed memfds, or real dma-bufs where the kernel has a heap) and
hands them to consumer processes over a Unix socket (:class:`FrameServer` / :func:`connect`, or a
:func:`seqpacket_pair` given to a child). A pool buffer's fd crosses once per consumer; later frames in it are named
by a slot reference (index + generation), so a hand-off costs one small message each way. Each frame goes back to
its pool when every consumer it was sent to released it (:class:`FrameFanout` sends one frame to several).

What the pool promises: a consumer killed mid-frame leaves the pool intact (its buffers come back when its socket
closes); a frame whose writer died mid-write is never delivered (commit markers); buffers are sealed against
truncation; no fd outlives the frames and slots that need it. See docs/dma.md.

The older import paths (``interop.tensors.dma``, ``interop.transport``) keep working; this module is the one to use.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType

from .errors import InteropError, InvalidTensorError
from .frame import Frame
from .tensors.dma import (
    DMABuffer,
    DMAContext,
    DMATensor,
    FramePool,
    PoolClosedError,
    PoolTimeoutError,
    buffers_of,
    dma_frame,
    frame_from_fds,
    live_buffers,
)
from .transport import (
    DEFAULT_SLOTS,
    MAX_SLOTS,
    FrameReceiver,
    FrameSender,
    FrameServer,
    InvalidTimeoutError,
    PathInUseError,
    PeerClosedError,
    ProtocolError,
    ServerPathError,
    TransportTimeoutError,
    commit,
    connect,
    seqpacket_pair,
)

log = logging.getLogger("interop")


class FrameFanout:
    """One producer, several consumers: ``send(frame)`` hands the frame to every consumer still connected; its buffer
    goes back to the pool when the last of them (and the producer) released it.

    A consumer that is gone (closed, killed) is dropped at the next send and its buffers come back to the pool; the
    others go on. A consumer that does not read for ``timeout`` seconds misses that frame (``missed`` counts, per
    consumer): ``send`` gives all consumers together at most ``timeout`` seconds (one deadline for the whole send; a
    consumer reached once the time is up is polled), so stalled consumers never hold up a frame longer than that.
    ``timeout=None`` waits for each.
    """

    def __init__(self, senders: list[FrameSender] | tuple[FrameSender, ...] = (), *, timeout: float | None = None):
        self._senders: list[FrameSender] = []
        self.timeout = timeout
        self.missed: dict[int, int] = {}
        self.dropped = 0
        for s in senders:
            self.add(s)

    def add(self, sender: FrameSender) -> None:
        """Add a consumer (a FrameSender, e.g. from ``FrameServer.accept()``)."""
        if not isinstance(sender, FrameSender):
            raise InvalidTensorError(f"FrameFanout.add takes a FrameSender (FrameServer.accept()), "
                                     f"not {type(sender).__name__}")
        self._senders.append(sender)
        self.missed[id(sender)] = 0

    def accept(self, server: FrameServer, count: int = 1, timeout: float | None = None) -> None:
        """Wait for ``count`` consumers to connect to ``server`` and add them."""
        for _ in range(count):
            self.add(server.accept(timeout))

    @property
    def consumers(self) -> list[FrameSender]:
        """The consumers still connected."""
        return [s for s in self._senders if s.alive]

    def send(self, frame: Frame) -> int:
        """Send ``frame`` to every connected consumer; returns how many got it. Raises PeerClosedError when no
        consumer is left."""
        got = 0
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        for s in list(self._senders):
            try:
                s.send(frame, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
                got += 1
            except TransportTimeoutError:
                self.missed[id(s)] += 1
            except PeerClosedError:
                self._senders.remove(s)
                self.missed.pop(id(s), None)
                self.dropped += 1
                log.info("a consumer of the fan-out is gone; %d left", len(self._senders))
                s.close()
        if not self._senders:
            raise PeerClosedError("every consumer of this FrameFanout is gone")
        return got

    def wait_returned(self, timeout: float | None = None) -> bool:
        """Wait until every consumer released every frame it was sent (see FrameSender.wait_returned); ``timeout``
        bounds the whole wait, not each consumer's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(s.wait_returned(None if deadline is None else max(0.0, deadline - time.monotonic()))
                   for s in list(self._senders))

    def close(self) -> None:
        """Disconnect every consumer; buffers they held go back to the pool."""
        for s in self._senders:
            s.close()
        self._senders.clear()

    def __enter__(self) -> FrameFanout:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


__all__ = ["FramePool", "FrameServer", "FrameSender", "FrameReceiver", "FrameFanout", "connect", "commit",
           "seqpacket_pair", "DMAContext", "DMATensor", "DMABuffer", "dma_frame", "frame_from_fds", "buffers_of",
           "live_buffers", "DEFAULT_SLOTS", "MAX_SLOTS", "PeerClosedError", "ProtocolError", "TransportTimeoutError",
           "InvalidTimeoutError", "ServerPathError", "PathInUseError", "PoolClosedError", "PoolTimeoutError",
           "InteropError"]
