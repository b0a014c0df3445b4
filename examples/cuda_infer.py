"""GPU inference on NVDEC frames without leaving the GPU: NV12 CUDA planes -> RGB + resize (torch) -> a torch CNN.

    python examples/cuda_infer.py [VIDEO] [--frames N] [--size 224] [--check]

PyAV decodes on NVDEC and keeps frames on the GPU; interop maps each frame to CUDA planes (zero-copy, the copy
meter stays at 0) and torch takes them through DLPack. Colour conversion (BT.601/BT.709, limited range) and the
resize run as torch ops on the GPU; the model is a small CNN whose weights are built in code (seeded), so nothing
is downloaded. ``--check`` compares the GPU conversion of the first frame with FFmpeg's own CPU conversion.
Without VIDEO a short synthetic clip is made with PyAV.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interop  # noqa: E402
from interop import ColorSpace, MemoryType  # noqa: E402

# Y'CbCr -> R'G'B' for limited-range video: (Kr, Kb) per matrix
_K = {ColorSpace.BT601: (0.299, 0.114), ColorSpace.BT709: (0.2126, 0.0722), ColorSpace.BT2020: (0.2627, 0.0593)}


def nv12_to_rgb(y: Any, uv: Any, size: tuple[int, int] | None, matrix: ColorSpace | None = None,
                full_range: bool = False) -> Any:
    """(H, W) uint8 Y and (H/2, W/2, 2) uint8 UV (torch, on the GPU) -> (1, 3, h, w) float RGB in [0, 1].

    With ``size`` the planes are resized first (Y to ``size``, UV to ``size`` as well), which is cheaper than
    converting at full resolution and resizing RGB. At full resolution chroma is upsampled by repetition, like
    FFmpeg's default conversion (bilinear chroma differs from it by up to ~18 levels on sharp synthetic chroma).
    """
    import torch
    import torch.nn.functional as F

    # Unspecified matrices are converted as BT.601, as FFmpeg (swscale) does.
    kr, kb = _K.get(matrix or ColorSpace.BT601, _K[ColorSpace.BT601])
    kg = 1.0 - kr - kb
    yf = y.unsqueeze(0).unsqueeze(0).float()
    cf = uv.permute(2, 0, 1).unsqueeze(0).float()
    out = size or (y.shape[0], y.shape[1])
    if size is None:  # full resolution: chroma samples repeated, as FFmpeg's default rgb24 conversion does
        cf = F.interpolate(cf, size=out, mode="nearest")
    else:
        yf = F.interpolate(yf, size=out, mode="bilinear", align_corners=False, antialias=True)
        cf = F.interpolate(cf, size=out, mode="bilinear", align_corners=False, antialias=True)
    if full_range:
        yn, cb, cr = yf / 255.0, (cf[:, :1] - 128.0) / 255.0, (cf[:, 1:] - 128.0) / 255.0
    else:
        yn, cb, cr = (yf - 16.0) / 219.0, (cf[:, :1] - 128.0) / 224.0, (cf[:, 1:] - 128.0) / 224.0
    r = yn + 2 * (1 - kr) * cr
    b = yn + 2 * (1 - kb) * cb
    g = (yn - kr * r - kb * b) / kg
    return torch.cat([r, g, b], 1).clamp_(0, 1)


def make_model(classes: int = 10) -> Any:
    """A small CNN with seeded weights (a stand-in for a real network: the data path is what this shows)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    m = nn.Sequential(block(3, 32), block(32, 64), block(64, 128), block(128, 256), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(256, classes))
    return m.eval().cuda().half().to(memory_format=torch.channels_last)


def make_clip(path: Path, frames: int = 120) -> Path:
    from interop.benchmarks.cuda import make_clip as mk

    return mk(path, "libx264", 1280, 720, frames)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("video", nargs="?")
    ap.add_argument("--frames", type=int, default=0, help="stop after N frames (0: all)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--check", action="store_true", help="compare the GPU colour conversion with FFmpeg's")
    ap.add_argument("--no-frame-threads", action="store_true", help="decode without FFmpeg's frame threads")
    a = ap.parse_args(argv)  # first: --help and usage errors answer on any machine
    try:  # then one line naming what is missing, not a traceback, where there is no GPU
        import torch

        need = None if torch.cuda.is_available() else "an NVIDIA GPU and its driver (torch finds no CUDA device)"
    except ImportError:
        need = "torch built with CUDA (pip install torch)"
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:  # no NVIDIA driver: installing torch alone would not make it run
            need = "an NVIDIA GPU and its driver (libcuda.so.1 was not found), and " + need
    if need:
        print("cuda_infer: cannot run here: needs " + need, file=sys.stderr)
        raise SystemExit(2)
    import av
    import numpy as np
    import torch

    from interop.cuda import open_nvdec

    video = Path(a.video) if a.video else make_clip(Path(tempfile.gettempdir()) / "interop_cuda_infer.mp4")
    model = make_model()
    n, diff, t0 = 0, None, None
    counts = np.zeros(10, np.int64)
    with interop.copy_meter() as meter, torch.inference_mode(), \
            open_nvdec(str(video), frame_threads=not a.no_frame_threads) as c:
        for vf in c.decode(video=0):
            f = interop.map(vf, MemoryType.CUDA)  # zero-copy: CUDA planes over the decoder's surface
            y, uv = torch.from_dlpack(f[0]), torch.from_dlpack(f[1])  # or torch_views(f)
            if a.check and n == 0:
                full = nv12_to_rgb(y, uv, None, f.colorspace)[0].permute(1, 2, 0).mul(255).round().byte().cpu().numpy()
                with av.open(str(video)) as cc:
                    refs = [next(g).to_ndarray(format="rgb24") for g in [cc.decode(video=0)] for _ in range(2)]
                diffs = [float(np.abs(full.astype(np.int16) - r.astype(np.int16)).mean()) for r in refs]
                diff = diffs[0]
                # where a difference would come from: the same formula in float64 numpy on the same planes
                yh = y.cpu().numpy().astype(np.float64)
                uvh = uv.cpu().numpy().astype(np.float64).repeat(2, 0).repeat(2, 1)[: yh.shape[0], : yh.shape[1]]
                yn, cb, cr = (yh - 16) / 219, (uvh[..., 0] - 128) / 224, (uvh[..., 1] - 128) / 224
                r, b = yn + 1.402 * cr, yn + 1.772 * cb
                g = (yn - 0.299 * r - 0.114 * b) / 0.587
                npx = (np.clip(np.stack([r, g, b], -1), 0, 1) * 255).round()
                print(f"check: numpy on the GPU planes vs FFmpeg {np.abs(npx - refs[0]).mean():.2f}, vs torch "
                      f"{np.abs(npx - full).mean():.2f}, per channel torch-FFmpeg "
                      f"{np.abs(full.astype(np.int16) - refs[0]).mean((0, 1)).round(2).tolist()}", file=sys.stderr)
                if diffs[1] < diffs[0]:
                    print(f"warning: the first NVDEC frame matches CPU frame 1 better ({diffs})", file=sys.stderr)
            x = nv12_to_rgb(y, uv, (a.size, a.size), f.colorspace).half().contiguous(memory_format=torch.channels_last)
            logits = model((x - 0.45) / 0.225)
            counts[int(logits.argmax())] += 1
            n += 1
            if n == 10:  # first frames include cuDNN autotuning and NVDEC start-up
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            if a.frames and n >= a.frames:
                break
        torch.cuda.synchronize()
    fps = (n - 10) / (time.perf_counter() - t0) if t0 and n > 10 else 0.0
    out = {"frames": n, "fps": round(fps, 1), "copies": meter.copies, "bytes_copied": meter.bytes,
           "classes": counts.tolist(), "check_mean_abs_diff": diff, "gpu": torch.cuda.get_device_name()}
    print(f"{n} frames, {fps:.1f} fps (decode + colour + resize + CNN on {out['gpu']}), copies {meter.copies}, "
          f"class histogram {counts.tolist()}" + (f", mean |GPU RGB - FFmpeg RGB| = {diff:.2f}" if diff is not None else ""))
    return out


if __name__ == "__main__":
    main()
