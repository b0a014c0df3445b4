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
import ctypes
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interop  # noqa: E402


def missing() -> str | None:
    """What this machine lacks to run the example (None: nothing)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "an NVIDIA GPU and its driver (libcuda.so.1 was not found)"
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
    from interop import textdet
    from interop.clip import default_clip
    from interop.cuda import open_nvdec

    video = a.video or default_clip()
    boxes: dict[int, int] = {}

    def done(outputs: dict[Any, Any], i: int) -> None:  # on OpenVINO's thread (interop run uses a thread of its own)
        heat = next(iter(outputs.values()))
        boxes[i] = len(textdet.boxes_from_map(heat, width, height))

    with interop.copy_meter() as meter, open_nvdec(video) as c:
        frames = c.decode(video=0)
        first = next(frames)
        width, height = first.width, first.height
        inf = interop.Inference(textdet.model_path(), "CPU", input_size=textdet.input_size_for(width, height),
                                mean=textdet.MEAN, scale=textdet.SCALE, rgb=textdet.RGB)
        with inf:
            inf.compile_for(inf.gpu_preprocess(first))  # compiled before the clock starts
            t0 = time.perf_counter()
            n = 0
            for vf in _chain(first, frames):
                # the kernel is queued here; the request that reads its output starts once it has ended
                inf.infer_async(inf.gpu_preprocess(vf), done, n)
                n += 1
                if a.frames and n >= a.frames:
                    break
            inf.wait_all()
            fps = n / (time.perf_counter() - t0)
    out = {"frames": n, "fps": round(fps, 1), "copies": meter.copies, "bytes_copied": meter.bytes,
           "boxes_per_frame": round(sum(boxes.values()) / max(1, len(boxes)), 2)}
    print(f"{n} frames at {fps:.1f} fps (NVDEC, pre-processing on the GPU, PP-OCRv4 on the CPU), copies "
          f"{meter.copies}, {out['boxes_per_frame']} text boxes per frame")
    return out


def _chain(first: Any, rest: Any) -> Any:
    yield first
    yield from rest


if __name__ == "__main__":
    main()
