"""Decoded frame -> an OpenCL kernel of ours (I420 -> RGB + resize) -> OpenVINO inference, zero-copy on the CPU.

The decoder's I420 planes become OpenCL buffers over the very same memory (USE_HOST_PTR on a device that works
in host memory), our kernel writes an RGB image into an OpenCL buffer, and OpenVINO reads that buffer through
its host mapping. The copy meter proves that no mapper copied a byte. Each frame is checked against OpenCV's own
conversion (cv2.cvtColor + cv2.resize), and the model's outputs on both images are compared.

    python examples/opencl_preprocess.py [VIDEO] [--frames N] [--size W H]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Any

import numpy as np

import interop  # first: sets up the OpenCL runtime before av, cv2, pyopencl and openvino load
from interop import MemoryType, TensorInfo
from interop.cli_lines import error_line

KERNEL = r"""
// BT.601 limited range, the fixed-point constants OpenCV's I420->RGB uses (20-bit).
inline float3 yuv2rgb(int y, int u, int v) {
    int yy = max(0, y - 16) * 1220542;
    int r = (yy + 1673527 * (v - 128) + (1 << 19)) >> 20;
    int g = (yy - 852492 * (v - 128) - 409993 * (u - 128) + (1 << 19)) >> 20;
    int b = (yy + 2116026 * (u - 128) + (1 << 19)) >> 20;
    return (float3)(clamp(r, 0, 255), clamp(g, 0, 255), clamp(b, 0, 255));
}

inline float3 px(__global const uchar* Y, int yp, __global const uchar* U, int up, __global const uchar* V, int vp,
                 int x, int y) {
    return yuv2rgb(Y[y * yp + x], U[(y >> 1) * up + (x >> 1)], V[(y >> 1) * vp + (x >> 1)]);
}

// One work item per output pixel: convert the four source neighbours, blend them bilinearly (pixel centres
// aligned as in cv2.resize INTER_LINEAR), write packed RGB.
__kernel void i420_to_rgb_resize(__global const uchar* Y, ulong yo, int yp, __global const uchar* U, ulong uo, int up,
                                 __global const uchar* V, ulong vo, int vp, int W, int H,
                                 __global uchar* out, ulong oo, int op, int OW, int OH) {
    int x = get_global_id(0), y = get_global_id(1);
    if (x >= OW || y >= OH) return;
    Y += yo; U += uo; V += vo; out += oo;
    float fx = (x + 0.5f) * ((float)W / OW) - 0.5f, fy = (y + 0.5f) * ((float)H / OH) - 0.5f;
    int sx = (int)floor(fx), sy = (int)floor(fy);
    fx -= sx; fy -= sy;
    if (sx < 0) { sx = 0; fx = 0.f; }
    if (sy < 0) { sy = 0; fy = 0.f; }
    if (sx >= W - 1) { sx = W - 1; fx = 0.f; }
    if (sy >= H - 1) { sy = H - 1; fy = 0.f; }
    int sx1 = min(sx + 1, W - 1), sy1 = min(sy + 1, H - 1);
    float3 top = px(Y, yp, U, up, V, vp, sx, sy) * (1.f - fx) + px(Y, yp, U, up, V, vp, sx1, sy) * fx;
    float3 bot = px(Y, yp, U, up, V, vp, sx, sy1) * (1.f - fx) + px(Y, yp, U, up, V, vp, sx1, sy1) * fx;
    uchar3 rgb = convert_uchar3_sat_rte(top * (1.f - fy) + bot * fy);
    vstore3(rgb, 0, out + y * op + x * 3);
}
"""


def build_model(width: int, height: int) -> Any:
    """A small image model built in code (nothing downloaded): u8 NHWC RGB -> conv 3x3 x8 + ReLU -> spatial mean."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(7)
    x = ops.parameter([1, height, width, 3], ov.Type.u8, name="image")
    f = ops.convert(x, ov.Type.f32)
    f = ops.transpose(f, ops.constant(np.array([0, 3, 1, 2], np.int64)))
    w = ops.constant((rng.standard_normal((8, 3, 3, 3)) / 27).astype(np.float32))
    c = ops.relu(ops.convolution(f, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    y = ops.reduce_mean(c, ops.constant(np.array([2, 3], np.int64)), keep_dims=False)
    return ov.Model([y], [x], "tiny")


def reference(vf: Any, width: int, height: int) -> np.ndarray:
    """OpenCV's conversion of the same decoded frame: I420 -> RGB, then a bilinear resize."""
    import cv2

    y, u, v = (np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in vf.planes)
    # OpenCV's I420 layout needs even sizes; an odd-size frame's chroma planes are already rounded up (ceil(W/2)),
    # so repeat the last luma row/column to the even size, convert, and crop back: each pixel still takes the
    # chroma sample (x >> 1, y >> 1), as the kernel does.
    w2, h2 = u.shape[1] * 2, u.shape[0] * 2
    y = np.pad(y, ((0, h2 - y.shape[0]), (0, w2 - y.shape[1])), mode="edge")
    i420 = np.concatenate([y.reshape(-1), u.reshape(-1), v.reshape(-1)]).reshape(h2 * 3 // 2, w2)
    rgb = cv2.cvtColor(i420, cv2.COLOR_YUV2RGB_I420)[:vf.height, :vf.width]
    return cv2.resize(rgb, (width, height), interpolation=cv2.INTER_LINEAR)


def run(video: str | None = None, frames: int = 5, size: tuple[int, int] = (224, 160)) -> dict[str, Any]:
    import av
    import pyopencl as cl

    from interop.clip import default_clip
    from interop.tensors.opencl import OpenCLContext, OpenCLTensor

    ocl = interop.Context.default(MemoryType.OPENCL)
    assert isinstance(ocl, OpenCLContext)  # its queue and program builder below
    kernel = cl.Kernel(ocl.build(KERNEL), "i420_to_rgb_resize")
    ow, oh = size
    out_buf = cl.Buffer(ocl.native, cl.mem_flags.READ_WRITE, oh * ow * 3)
    rgb = interop.wrap(out_buf, info=TensorInfo((1, oh, ow, 3), np.uint8))
    inf = interop.Inference(build_model(ow, oh), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
    stats: dict[str, Any] = {"frames": 0, "max_abs_diff": 0, "mean_abs_diff": 0.0, "max_output_rel_diff": 0.0,
                             "device": ocl.device.name.strip(), "kernel_ms": 0.0}
    with av.open(video or default_clip()) as container, interop.copy_meter() as meter:
        for i, vf in enumerate(container.decode(video=0)):
            if i == frames:
                break
            planes = interop.map(interop.wrap(vf), MemoryType.OPENCL, allow_copy=True)  # zero-copy on the CPU device
            args: list[Any] = []
            for p in planes:
                assert isinstance(p, OpenCLTensor)  # a region of a cl.Buffer: its offset goes to the kernel
                args += [p.native, np.uint64(p.offset), np.int32(p.info.strides[0])]
            t0 = time.perf_counter()
            kernel(ocl.queue, (ow, oh), None, *args, np.int32(vf.width), np.int32(vf.height), out_buf,
                   np.uint64(0), np.int32(ow * 3), np.int32(ow), np.int32(oh))
            ocl.queue.finish()
            stats["kernel_ms"] += (time.perf_counter() - t0) * 1e3
            ours = inf.infer(rgb)  # OPENCL -> OPENVINO: the buffer's host mapping, shared
            planes.release()
            ref = reference(vf, ow, oh)
            with interop.map(rgb, MemoryType.CPU) as host:
                diff = np.abs(host.numpy()[0].astype(np.int16) - ref.astype(np.int16))
            theirs = inf.infer(ref[None])
            a, b = next(iter(ours.values())), next(iter(theirs.values()))
            stats["frames"] += 1
            stats["max_abs_diff"] = max(stats["max_abs_diff"], int(diff.max()))
            stats["mean_abs_diff"] = max(stats["mean_abs_diff"], float(diff.mean()))
            stats["max_output_rel_diff"] = max(stats["max_output_rel_diff"],
                                               float(np.abs(a - b).max() / (np.abs(b).max() + 1e-9)))
    inf.close()
    stats["copies"] = meter.copies
    stats["bytes_copied"] = meter.bytes
    stats["kernel_ms"] /= max(stats["frames"], 1)
    return stats


def _missing() -> str | None:
    """What this example needs and this machine lacks (one line), or None."""
    import importlib.util

    for mod, what in (("av", "PyAV: pip install '.[ffmpeg]'"), ("cv2", "OpenCV: pip install '.[opencv]'"),
                      ("pyopencl", "pyopencl: pip install '.[opencl]'"), ("openvino", "OpenVINO: pip install '.[openvino]'")):
        if importlib.util.find_spec(mod) is None:
            return f"needs {what}"
    try:
        interop.Context.default(MemoryType.OPENCL)
    except interop.InteropError as e:
        return f"needs an OpenCL device: {e}"
    return None


# one line on stderr in the interop CLI's style ("opencl_preprocess: error: Type: message"); returns the exit status, 1
_error = functools.partial(error_line, "opencl_preprocess")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("video", nargs="?", default=None)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--size", type=int, nargs=2, default=(224, 160), metavar=("W", "H"))
    args = ap.parse_args(argv)
    if args.frames < 1:
        ap.error(f"argument --frames: must be a positive number of frames, not {args.frames}")
    if min(args.size) < 1:  # else OpenCL refuses the output buffer with a raw INVALID_BUFFER_SIZE traceback
        ap.error(f"argument --size: W and H must be positive, not {args.size[0]} {args.size[1]}")
    missing = _missing()
    if missing:
        print(f"opencl_preprocess: cannot run here: {missing}", file=sys.stderr)
        return 2
    import av

    from interop.clip import default_clip
    from interop.pipeline import open_video

    video = args.video or default_clip()
    try:
        open_video(video)[0].close()  # first: an unreadable video is a VideoInputError that says why
        s = run(video, args.frames, tuple(args.size))
    except interop.InteropError as e:  # interop's messages say what to do
        return _error(e)
    except av.error.FFmpegError as e:
        return _error(e, f"decoding {video!r} failed: {e.strerror or e}: the file is damaged; re-encode it or give "
                         f"another video")
    print(f"{s['frames']} frames on {s['device']}: kernel {s['kernel_ms']:.2f} ms/frame; vs OpenCV: max |diff| "
          f"{s['max_abs_diff']}, mean {s['mean_abs_diff']:.3f}; model outputs rel diff {s['max_output_rel_diff']:.2e}; "
          f"mapper copies {s['copies']} ({s['bytes_copied']} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
