"""interop._cache.IdentityCache: bounded, a hit is a dict lookup, identity keys hold their objects."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import interop
from interop._cache import MISSING, IdentityCache
from interop.info import TensorInfo
from tests.support.requirements import need_module


def test_value_keys_hit_and_miss() -> None:
    c: IdentityCache[str, int] = IdentityCache(4)
    assert c.get("a") is None and c.get("a", MISSING) is MISSING
    assert c.put("a", 1) == 1
    assert c.get("a") == 1 and c["a"] == 1 and "a" in c and len(c) == 1
    c.put("n", None)  # type: ignore[arg-type]
    assert c.get("n", MISSING) is None  # a cached None is told from a miss


def test_bounded_and_replacing_a_key_does_not_evict() -> None:
    c: IdentityCache[int, int] = IdentityCache(3)
    for i in range(3):
        c.put(i, i)
    c.put(1, 10)  # same key: no eviction
    assert dict(c) == {0: 0, 1: 10, 2: 2}
    c.put(3, 3)  # full: starts again
    assert dict(c) == {3: 3}
    for i in range(1000):
        c.put(i, i)
        assert len(c) <= 3


def test_identity_keys_hold_their_objects_while_the_entry_lives() -> None:
    class Obj:
        pass

    c: IdentityCache[tuple[int, int], str] = IdentityCache(2)
    a, b = Obj(), Obj()
    key = (id(a), id(b))
    c.put(key, "ab", a, b)
    ids = set(key)
    del a, b
    gc.collect()
    # the cache keeps both alive, so no new object can take their ids and find this entry
    fresh = [Obj() for _ in range(1000)]
    assert not ids & {id(o) for o in fresh}
    assert c.get(key) == "ab"
    c.clear()
    assert len(c) == 0 and not c._held


def test_eviction_drops_the_held_objects() -> None:
    import weakref

    class Obj:
        pass

    c: IdentityCache[int, int] = IdentityCache(1)
    a = Obj()
    ref = weakref.ref(a)
    c.put(id(a), 1, a)
    del a
    gc.collect()
    assert ref() is not None
    c.put(0, 0)  # full: the entry and what it held go
    gc.collect()
    assert ref() is None and c.get(0) == 0


def test_a_value_entry_replacing_an_identity_entry_drops_the_held_object() -> None:
    c: IdentityCache[int, int] = IdentityCache(4)
    o = object()
    c.put(7, 1, o)
    c.put(7, 2)
    assert 7 not in c._held and c[7] == 2


@pytest.mark.parametrize("bad,builtin", [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("8", TypeError),
                                         (True, TypeError)])
def test_bad_maxsize(bad: object, builtin: type) -> None:
    with pytest.raises(interop.InteropError, match="positive int"):
        IdentityCache(bad)  # type: ignore[arg-type]
    with pytest.raises(builtin):
        IdentityCache(bad)  # type: ignore[arg-type]


def test_threads_putting_and_reading_stay_bounded_and_consistent() -> None:
    c: IdentityCache[int, int] = IdentityCache(64)
    errors: list[str] = []

    def work(base: int) -> None:
        for i in range(5000):
            k = base + i % 200
            v = c.get(k)
            if v is not None and v != k * 2:
                errors.append(f"{k} -> {v}")
            c.put(k, k * 2)

    ts = [threading.Thread(target=work, args=(n * 1000,)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(c) <= 64


def test_tensor_info_stays_interned_and_bounded() -> None:
    from interop import info as info_mod

    a = TensorInfo((4, 5), np.uint8, (8, 1))
    assert TensorInfo((4, 5), np.uint8, (8, 1)) is a
    for n in range(info_mod._INFO_CACHE.maxsize + 10):
        TensorInfo((n + 1,), np.uint8)
    assert len(info_mod._INFO_CACHE) <= info_mod._INFO_CACHE.maxsize
    # an unhashable dtype-like is validated, never cached
    with pytest.raises(interop.InvalidTensorError):
        TensorInfo((2,), [("a", "bogus")])


def test_ffmpeg_layout_cache_is_bounded() -> None:
    av = need_module("av")
    from interop.tensors import ffmpeg as tf

    first = av.VideoFrame(16, 16, "yuv420p")
    lay = tf._layout("yuv420p", first, first.planes)
    assert tf._layout("yuv420p", first, first.planes) is lay
    for w in range(2, 2 + 2 * (tf._layouts.maxsize + 10), 2):
        vf = av.VideoFrame(w, 8, "gray")
        tf._layout("gray", vf, vf.planes)
    assert len(tf._layouts) <= tf._layouts.maxsize
