"""CUDA and OpenCL on one NVIDIA GPU, sharing memory: torch writes, an OpenCL kernel works in place, torch reads.

    OCL_ICD_VENDORS=<folder with nvidia.icd> python examples/cuda_opencl.py [VIDEO] [--frames N]

1. ``exportable_empty()`` allocates CUDA memory with an OS handle; torch fills it through DLPack; interop maps it
   to OpenCL (NVIDIA's ``cl_khr_external_memory_opaque_fd``): the same bytes, no copy (the copy meter says 0).
   An OpenCL kernel sums torch's rows; OpenCL then fills the buffer and torch reads the fill.
2. NVDEC frames live in memory CUDA cannot export: each plane reaches OpenCL through one counted GPU copy into a
   pooled exportable buffer; an OpenCL kernel computes the mean luma of every frame.

Without VIDEO a short synthetic clip is made with PyAV. Needs torch, PyAV, pyopencl and NVIDIA's OpenCL driver.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interop  # noqa: E402
from interop import AccessMode, MemoryType  # noqa: E402

_ROW_SUMS = """
__kernel void row_sums(__global const uchar *p, ulong offset, uint width, uint pitch, __global uint *out) {
    size_t r = get_global_id(0); uint s = 0;
    for (uint x = 0; x < width; ++x) s += p[offset + r * pitch + x];
    out[r] = s;
}
"""
_kernels: dict = {}


def row_sums(o, width: int, rows: int, pitch: int):  # type: ignore[no-untyped-def]
    """Sum every row of the OpenCL tensor ``o`` with a kernel (one kernel object per context, made once)."""
    import pyopencl as cl

    knl = _kernels.get(o.context)
    if knl is None:
        knl = _kernels[o.context] = o.context.build(_ROW_SUMS).row_sums
    out = cl.Buffer(o.context.native, cl.mem_flags.WRITE_ONLY, rows * 4)
    knl(o.queue, (rows,), None, o.native, np.uint64(o.offset), np.uint32(width), np.uint32(pitch), out)
    sums = np.empty(rows, np.uint32)
    cl.enqueue_copy(o.queue, sums, out).wait()
    return sums


def shared_buffer() -> None:
    import pyopencl as cl
    import torch

    from interop.cuda import exportable_empty
    from interop.tensors.opencl import OpenCLTensor

    t = exportable_empty((480, 640), np.uint8)
    view = torch.from_dlpack(t)  # torch's tensor over the exportable memory
    view.copy_(torch.randint(0, 256, (480, 640), device="cuda", dtype=torch.uint8))
    with interop.copy_meter() as meter:
        o = interop.map(t, MemoryType.OPENCL, mode=AccessMode.READ_WRITE, allow_copy=True)  # routing asks; nothing copied
        assert isinstance(o, OpenCLTensor)  # its queue and its region of the cl.Buffer, below
        reads = np.array_equal(row_sums(o, 640, 480, 640), view.sum(dim=1, dtype=torch.int64).cpu().numpy())
        cl.enqueue_fill_buffer(o.queue, o.native, np.uint8(7), o.offset, t.info.nbytes)  # type: ignore[arg-type]  # a one-byte pattern
        o.release()  # OpenCL's queue is finished: CUDA work queued after this sees the writes
    print(f"shared buffer: OpenCL's row sums of torch's bytes match torch's: {reads}; torch sees OpenCL's fill: "
          f"{bool((view == 7).all())}; copies {meter.copies}")
    t.native.close()


def nvdec_to_opencl(video: str, frames: int) -> None:
    from interop.cuda import open_nvdec

    with open_nvdec(video) as c, interop.copy_meter() as meter:
        means = []
        for vf in c.decode(video=0):
            f = interop.map(interop.map(vf, MemoryType.CUDA), MemoryType.OPENCL, allow_copy=True)
            y = f[0]
            rows, width = y.shape[0], y.shape[1]
            means.append(float(row_sums(y, width, rows, y.strides[0]).sum()) / (rows * width))
            f.release()
            if len(means) >= frames:
                break
    print(f"NVDEC -> OpenCL: {len(means)} frames, mean luma of the first {means[0]:.1f}, last {means[-1]:.1f}; "
          f"{meter.copies} counted GPU copies ({meter.copies // max(len(means), 1)} per frame: the NV12 planes)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("video", nargs="?")
    ap.add_argument("--frames", type=int, default=60)
    args = ap.parse_args()  # first: --help and usage errors answer on any machine
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
        print("cuda_opencl: cannot run here: needs " + need, file=sys.stderr)
        raise SystemExit(2)
    shared_buffer()
    video = args.video
    if video is None:
        from interop.clip import make_clip

        video = make_clip(str(Path(tempfile.mkdtemp()) / "clip.mp4"), width=640, height=360, frames=args.frames,
                          preset="ultrafast")
    nvdec_to_opencl(video, args.frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
