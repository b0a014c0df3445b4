"""Level Zero import/export per frame: map+release of DMA -> USM (import) and USM -> DMA (export) beside one
copy of the frame. Runs where a Level Zero driver answers. On the test fake driver
(``ZE_ENABLE_ALT_DRIVERS=tests/fakes/build/ze/libze_fake_driver.so.1``, built by ``tests/prepare.d/fakes_ze.sh``) it
measures interop's and the loader's own overhead, not a device."""

from __future__ import annotations

import time

import numpy as np

from . import Result, Skipped, median

NAME = "level_zero"
SUMMARY = "Level Zero DMA -> USM import and USM -> DMA export per frame, beside one copy (needs a Level Zero driver)"
REQUIRES: tuple[tuple[str, str], ...] = ()


def _time(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return median(xs) * 1e6


def run(quick: bool = False) -> list[Result]:
    import interop
    from interop import FrameFormat, MemoryType
    from interop.native import level_zero as ze

    ze.loader()  # BackendUnavailableError (no loader) skips the benchmark, with the loader's reason
    if not ze.init_early():
        raise Skipped("no Level Zero driver answered zeInit (for the test fake driver set ZE_ENABLE_ALT_DRIVERS to "
                      "tests/fakes/build/ze/libze_fake_driver.so.1)")
    from interop.tensors.dma import DMAContext
    from interop.tensors.level_zero import LevelZeroContext

    lz = LevelZeroContext.create(import_as="host")
    driver = ze.device_properties(lz.ze_device).name
    n = 50 if quick else 300
    out = []
    for w, h in ((640, 480), (1920, 1080), (3840, 2160)):
        f = DMAContext().alloc_frame(FrameFormat.NV12, w, h)
        nbytes = sum(t.info.nbytes for t in f)
        src = np.ones(nbytes, np.uint8)
        dst = np.empty_like(src)
        copy_us = _time(lambda dst=dst, src=src: np.copyto(dst, src), n)

        def imp(f: interop.Frame = f) -> None:
            interop.map(f, lz).release()

        imp_us = _time(imp, n)
        u = lz.alloc_tensor(interop.TensorInfo((h * 3 // 2, w), np.uint8), "shared")

        def exp(u: interop.Tensor = u) -> None:
            interop.map(u, MemoryType.DMA).release()

        exp_us = _time(exp, n)
        for case, us in ((f"dma_to_usm import {w}x{h}", imp_us), (f"usm_to_dma export {w}x{h}", exp_us)):
            out.append(Result(NAME, case, us / copy_us, "x one copy",
                              {"us": us, "copy_us": copy_us, "frame_bytes": nbytes, "driver": driver}))
    return out
