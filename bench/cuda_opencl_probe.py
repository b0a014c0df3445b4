"""Probe for cuda_to_opencl on an NVIDIA machine: OpenCL platforms and the import extension, whether the OpenCL
implementation keeps the imported fd open (ownership), and a round trip through an exportable allocation.

    python bench/cuda_opencl_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import numpy as np
    import pyopencl as cl
    import torch

    from interop.mappers.cuda_to_opencl import EXTENSION, import_context
    from interop.native.cuda_export import fd_is_open
    from interop.native.opencl_external import CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR, import_fd
    from interop.tensors.cuda import exportable_empty

    for p in cl.get_platforms():
        for d in p.get_devices():
            print(f"{p.name} / {d.name} / {d.version}: {EXTENSION in d.extensions.split()}; acquire/release ext "
                  f"{'cl_khr_external_memory' in d.extensions.split()}", flush=True)
    ctx = import_context()
    print("import context", ctx, flush=True)
    t = exportable_empty((1024, 1024), np.uint8)
    fd = t.native.export_fd()
    buf = import_fd(ctx.native, CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR, fd, t.native.size, read_only=False,
                    device=ctx.device)
    print(f"fd {fd} still open after import: {fd_is_open(fd)}; buffer size {buf.size}", flush=True)
    tv = torch.from_dlpack(t)
    tv.fill_(42)
    torch.cuda.synchronize()
    host = np.empty(16, np.uint8)
    cl.enqueue_copy(ctx.queue, host, buf).wait()
    print("OpenCL reads what torch wrote:", host[:4], flush=True)

    # map + release of a 64 MiB exportable tensor, beside copying the same bytes on the GPU and the copying path
    import time

    import interop
    from interop import MemoryType
    from interop.mappers.cuda_to_opencl import CUDAToOpenCL

    big = exportable_empty((64 << 20,), np.uint8)
    plain = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    m = CUDAToOpenCL()
    m.map(big).release()  # the one import

    def per_call(fn, n=50):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    zero = per_call(lambda: m.map(big).release())
    clone = per_call(lambda: plain.clone())
    copied = per_call(lambda: interop.map(interop.wrap(plain), MemoryType.OPENCL, allow_copy=True).release(), 20)
    print(f"64 MiB: map + release {zero:.1f} us; torch clone (one GPU copy) {clone:.1f} us; map + release of torch "
          f"memory (copy in, allow_copy) {copied:.1f} us; map / clone {zero / clone:.3f}", flush=True)


if __name__ == "__main__":
    main()
