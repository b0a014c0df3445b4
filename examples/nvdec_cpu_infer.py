"""NVDEC frames into an OpenVINO model on the CPU, pre-processed on the GPU: no copy, and the CPU runs the network.

    python examples/nvdec_cpu_infer.py [VIDEO] [--frames N]

PyAV decodes on NVDEC and the frames stay in GPU memory. ``Inference.gpu_preprocess`` runs one CUDA kernel per
frame that resizes, converts and normalises the decoder's planes straight into page-locked host memory, which the
text detector (PP-OCRv4, on the CPU) reads as it is: the copy meter stays at 0 and the host's CPU neither decodes
nor pre-processes. ``interop run --nvdec`` does the same with a thread that pre-processes ahead. Needs an NVIDIA
GPU with its driver, CuPy and PyAV with NVDEC. Without VIDEO the clip bundled with interop is used.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interop  # noqa: E402


def missing() -> str | None:
    """What this machine lacks to run the example (None: nothing)."""
    from interop.errors import BackendUnavailableError
    from interop.native.cuda_driver import driver

    try:
        driver()  # libcuda.so.1 and a GPU it sees
    except BackendUnavailableError as e:
        return f"an NVIDIA GPU and its driver ({e})"
    try:
        from av.codec.hwaccel import hwdevices_available
    except ImportError:
        return "PyAV (pip install av)"
    if "cuda" not in hwdevices_available():
        return "a PyAV built with CUDA (NVDEC) hardware decoding (the PyPI wheels are)"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy for the pre-processing kernel (pip install cupy-cuda12x, or the one of your CUDA version)"
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("video", nargs="?")
    ap.add_argument("--frames", type=int, default=0, help="stop after N frames (0: all)")
    a = ap.parse_args(argv)  # first: --help and usage errors answer on any machine
    need = missing()
    if need:
        print("nvdec_cpu_infer: cannot run here: needs " + need, file=sys.stderr)
        raise SystemExit(2)
    import cv2

    from interop import textdet
    from interop.clip import default_clip
    from interop.cuda import open_nvdec

    video = a.video or default_clip()
    maps: queue.Queue[Any] = queue.Queue(maxsize=64)
    boxes: list[int] = []
    failed: list[BaseException] = []

    def done(outputs: dict[Any, Any], i: int) -> None:
        # on OpenVINO's thread, which holds the request until it returns: hand the map on, nothing more
        maps.put(next(iter(outputs.values())))

    def results() -> None:  # the boxes, on a thread of their own
        while (heat := maps.get()) is not None:
            if failed:
                continue  # keeps taking maps, so that no callback ever waits on a full queue
            try:
                boxes.append(len(textdet.boxes_from_map(heat, width, height)))
            except BaseException as e:  # noqa: BLE001 - raised by main once the run ends
                failed.append(e)

    cv2.setNumThreads(1)  # process-wide: the network has the cores, OpenCV's own thread pool would compete with it
    with interop.copy_meter() as meter, open_nvdec(video) as c:
        frames = c.decode(video=0)
        first = next(frames)
        width, height = first.width, first.height
        inf = interop.Inference(textdet.model_path(), "CPU", input_size=textdet.input_size_for(width, height),
                                mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB)
        worker = threading.Thread(target=results)
        worker.start()
        try:
            with inf:
                ready = inf.gpu_preprocess(first)  # the kernel is queued; the frame goes back to NVDEC once it ends
                inf.compile_for(ready)  # compiled before the clock starts
                t0 = time.perf_counter()
                n = 0
                for vf in frames:
                    if a.frames and n + 1 >= a.frames:
                        break
                    nxt = inf.gpu_preprocess(vf)  # this frame's kernel is queued before the last one's request
                    inf.infer_async(ready, done, n)  # starts: by then that kernel has most likely ended
                    ready, n = nxt, n + 1
                inf.infer_async(ready, done, n)
                n += 1
                inf.wait_all()
                maps.put(None)
                worker.join()  # the last boxes made: part of the run
                fps = n / (time.perf_counter() - t0)
        finally:
            if worker.is_alive():
                maps.put(None)
                worker.join()
    if failed:
        raise failed[0]
    out = {"frames": n, "fps": round(fps, 1), "copies": meter.copies, "bytes_copied": meter.bytes,
           "boxes_per_frame": round(sum(boxes) / max(1, len(boxes)), 2)}
    print(f"{n} frames at {fps:.1f} fps (NVDEC, pre-processing on the GPU, PP-OCRv4 on the CPU), copies "
          f"{meter.copies}, {out['boxes_per_frame']} text boxes per frame")
    return out


if __name__ == "__main__":
    main()
