"""What the text-box post-processing of `interop run` costs in CPU, beside its wall time, and why.

    python bench/postprocess_threads.py [--precision f32]

A one-off experiment (session 5): on the 16-core Xeon, `interop run` at f32 spent ~12 ms more CPU per frame than the
same run without post-processing, where `textdet.boxes_from_map` takes ~1 ms of wall time. Suspect: OpenCV's own
thread pool (cv2.dilate runs a parallel_for over all cores, whose workers spin before they sleep). For each variant,
on real output maps of the pinned clip: wall and process CPU per call, idle and with the 16-stream inference running.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

import interop  # noqa: F401 - before openvino
from interop import textdet
from interop.benchmarks.pipeline import _inference, clip_path


def dilate_numpy(mask: np.ndarray) -> np.ndarray:
    """cv2.dilate(mask, ones((2, 2))) (anchor (1, 1)): max of each pixel and its up, left and up-left neighbours."""
    d = mask.copy()
    d[1:, :] |= mask[:-1, :]
    d[:, 1:] |= mask[:, :-1]
    d[1:, 1:] |= mask[:-1, :-1]
    return d


def main() -> int:
    import av
    import cv2

    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default=None)
    args = ap.parse_args()
    inf = _inference(args.precision)
    outs, mapped = [], []
    with av.open(clip_path()) as c:
        for i, vf in enumerate(c.decode(video=0)):
            if i % 20 == 0:
                outs.append(next(iter(inf.infer(vf).values())))
                mapped.append(interop.map(vf, interop.MemoryType.OPENVINO))
            if len(outs) == 8:
                break
    for o in outs:
        m = (o.reshape(o.shape[-2:]) > textdet.THRESH).astype(np.uint8)
        assert np.array_equal(dilate_numpy(m), cv2.dilate(m, np.ones((2, 2), np.uint8)))
    stop = threading.Event()

    def load() -> None:
        k = 0
        while not stop.is_set():
            inf.infer_async(mapped[k % len(mapped)])
            k += 1
        inf.wait_all()

    def variant(name: str, calls: int = 400) -> None:
        w0, c0 = time.perf_counter(), time.process_time()
        for k in range(calls):
            textdet.boxes_from_map(outs[k % len(outs)], 1920, 1080)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        print(f"  {name:42s} wall {1000 * w / calls:7.3f} ms/call   process CPU {1000 * c / calls:7.3f} ms/call", flush=True)

    real_dilate = cv2.dilate
    for loaded in (False, True):
        th = None
        if loaded:
            stop.clear()
            th = threading.Thread(target=load, daemon=True)
            th.start()
            time.sleep(2)
        print(f"{'with inference running' if loaded else 'idle'} (cv2 threads {cv2.getNumThreads()}):", flush=True)
        for _ in range(2):
            cv2.dilate = real_dilate
            variant("boxes_from_map (cv2.dilate, default threads)")
            cv2.setNumThreads(1)
            variant("boxes_from_map, cv2.setNumThreads(1)")
            cv2.setNumThreads(-1)
            cv2.dilate = lambda m, k: dilate_numpy(m)  # noqa: E731
            variant("boxes_from_map, numpy dilation")
        cv2.dilate = real_dilate
        if th is not None:
            stop.set()
            th.join()
    inf.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
