"""Frees interrupted or raced at their edges (see each test's doc for the interleaving).

- An interrupted use() runs the on-free callbacks when another user came and went meanwhile; FramePool.acquire()
  puts the slot back itself when its BufferLease's use() is interrupted: the slot must go back once, or two acquires
  hand out the same buffer.
- _wait_and_free() must not take its token back while anything of its own still holds the last pool (and its
  request queue): exit would go on before that queue is freed.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from interop import FrameFormat
from interop import inference as inference_module
from interop._locks import UseCounted
from interop.dma import DMABuffer
from interop.tensors.dma import FramePool, PoolTimeoutError
from tests.test_locks_sigint import _bounded, _counting, _free_for_another_thread, _Interrupt


class _OtherUserAfterTheCount(_Interrupt):
    """Raises at the ``at``-th point as :class:`_Interrupt` does. When that point is the one right past use()'s
    critical section (the count made, the lock let go), another thread first uses the buffer and lets go of it: a
    holder of ``t.native`` of an earlier frame making a tensor over it, say. Only there: before the count that
    thread's unuse() would run the pool's give-back, which waits for the pool's lock that acquire() holds."""

    def __init__(self, at: int, watched: set[types.CodeType], buf: DMABuffer):
        super().__init__(at, watched)
        self.buf = buf
        self.other = False

    def _point(self, frame: types.FrameType, what: str) -> None:
        if (self.seen + 1 == self.at and frame.f_code is UseCounted.use.__code__ and frame.f_locals.get("counted")
                and _free_for_another_thread(self.buf._lock)):
            t = threading.Thread(target=self._come_and_go, daemon=True)
            t.start()
            t.join(10)
            self.other = not t.is_alive()
        super()._point(frame, what)

    def _come_and_go(self) -> None:
        self.buf.use()
        self.buf.unuse()

    def run(self, op: Callable[[], Any]) -> Any:
        """``op()`` traced by this injector: its result, or None when the interrupt came."""
        outer = sys.gettrace()
        sys.settrace(self.trace)
        try:
            return op()
        except KeyboardInterrupt:
            return None
        finally:
            sys.settrace(outer)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")
@_bounded
def test_pool_acquire_interrupted_while_another_user_comes_and_goes_hands_the_buffer_out_once():
    """acquire() pops the slot, BufferLease's use() counts (users 0 -> 1), another thread uses and lets go of the
    buffer (2 -> 1: no on-free), the interrupt lands as use()'s with statement returns. _give_back_use now sees a
    let-go since the count and runs the on-free callbacks: _GiveBack puts the slot back (the pool's Condition is an
    RLock, held by this very thread). Then acquire()'s own except puts it back again: the free list holds the slot
    twice, and a pool of one buffer hands that buffer out to two frames at once (two writers of one buffer)."""
    pool = FramePool(FrameFormat.GRAY8, 16, 16, count=1)
    buf = pool._buffers[0]
    watched = {f.__code__ for f in _counting(DMABuffer)}
    others = 0
    try:
        for at in range(1, 400):
            inj = _OtherUserAfterTheCount(at, watched, buf)
            frame = inj.run(lambda: pool.acquire(timeout=0))
            if frame is not None:  # past the last point
                frame.release()
                break
            if not inj.other:
                continue
            others += 1
            assert buf.users == 0, f"interrupted at {inj.where}: {buf.users} users"
            free = list(pool._free)
            first = pool.acquire(timeout=0)
            try:
                second = pool.acquire(timeout=0)  # a pool of one: PoolTimeoutError unless the slot went back twice
            except PoolTimeoutError:
                second = None
            finally:
                first.release()
            if second is not None:
                second.release()
            assert second is None, (f"interrupted at {inj.where}: the pool's one buffer was handed out twice "
                                    f"(free list {free})")
        assert others > 0, "no point right past the count: the test checked nothing"
    finally:
        pool.close()


class _Queue:
    """A request queue with no request (nothing to wait for), weakly referenceable: the test sees when it is freed."""

    def __len__(self) -> int:
        return 0


def test_the_free_token_goes_only_once_the_last_queue_is_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit waits for ``_freeing`` to be empty, then for the callbacks of *freed* queues (a queue not yet freed is
    not looked at). _wait_and_free's ``for pool in pools`` leaves ``pool`` holding the last pool, and with it the
    last request queue, until the function returns: after its finally has taken the token back. On the free's own
    thread, exit (polling ``_freeing``) can take the GIL right there and go on to finalize while that queue is still
    to be freed. (As before the change: the Condition's count was taken back at the same place.)"""
    queue = _Queue()
    ref = weakref.ref(queue)
    pools = [inference_module._Pool(queue)]
    del queue
    alive_at_discard: list[bool] = []

    class Recording(set):  # type: ignore[type-arg]
        def discard(self, token: object) -> None:
            alive_at_discard.append(ref() is not None)
            super().discard(token)

    freeing = Recording()
    monkeypatch.setattr(inference_module, "_freeing", freeing)
    token = object()
    freeing.add(token)
    inference_module._wait_and_free(pools, token)
    assert ref() is None
    assert alive_at_discard == [False], "the token went while the last queue was still alive"
