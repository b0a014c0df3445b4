"""Where the per-frame time of NVDEC -> torch goes (µs per call, one decoded hardware frame, timeit medians).

    python bench/cuda_profile.py CLIP
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    import interop
    from interop import MemoryType
    from interop.mappers.ffmpeg_to_cuda import FFmpegToCUDA, from_video_frame, open_nvdec
    from interop.tensors.cuda import torch_views
    from interop.tensors.ffmpeg import wrap_video_frame

    clip = sys.argv[1]
    with open_nvdec(clip) as c:
        vf = next(c.decode(video=0))
        f = interop.map(vf, MemoryType.CUDA)
        ff = wrap_video_frame(vf)
        m = FFmpegToCUDA()
        y = f[0]
        p0 = vf.planes[0]
        cases = {
            "vf.planes": lambda: vf.planes,
            "raw: torch.from_dlpack(plane.__dlpack__(stream=None))": lambda: torch.from_dlpack(p0.__dlpack__(stream=None)),
            "plane.__dlpack__(stream=None)": lambda: p0.__dlpack__(stream=None),
            "wrap_video_frame(vf)": lambda: wrap_video_frame(vf),
            "interop.wrap(vf)": lambda: interop.wrap(vf),
            "interop.route(ctx, CUDA)": lambda: interop.route(ff.context, MemoryType.CUDA),
            "FFmpegToCUDA().map(ffmpeg_frame)": lambda: m.map(ff),
            "mapper.map_frame(ffmpeg_frame)": lambda: m.map_frame(ff, interop.AccessMode.READ, False),
            "from_video_frame(vf)": lambda: from_video_frame(vf),
            "interop.map(vf, CUDA)": lambda: interop.map(vf, MemoryType.CUDA),
            "frame[0]": lambda: f[0],
            "t.__dlpack__(stream=1, max_version=(1, 0))": lambda: y.__dlpack__(stream=1, max_version=(1, 0)),
            "torch.from_dlpack(t)": lambda: torch.from_dlpack(y),
            "torch_views(interop.map(vf, CUDA))": lambda: torch_views(interop.map(vf, MemoryType.CUDA)),
            "torch_views(frame)": lambda: torch_views(f),
            "torch.from_dlpack(t.__dlpack__(stream=1))": lambda: torch.from_dlpack(y.__dlpack__(stream=1)),
            "torch.cuda.current_stream('cuda:0')": lambda: torch.cuda.current_stream("cuda:0"),
            "y.region(..).__dlpack__() (ctypes capsule)": lambda: y.region(0, 0, 64, 64).__dlpack__(stream=1),
        }
        for name, fn in cases.items():
            runs = [timeit.timeit(fn, number=2000) / 2000 * 1e6 for _ in range(5)]
            print(f"{name:55s} {statistics.median(runs):7.2f} us")
        import cProfile
        import inspect
        import pstats

        print(inspect.getsource(torch.from_dlpack))  # what torch does before it calls __dlpack__
        prof = cProfile.Profile()
        prof.runcall(lambda: [torch.from_dlpack(y) for _ in range(2000)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        # colour check material for examples/cuda_infer.py
        import av
        import numpy as np
        with av.open(clip) as cc:
            ref = next(cc.decode(video=0)).to_ndarray(format="nv12")
        h = vf.height
        yg = torch.from_dlpack(f[0]).cpu().numpy()
        uvg = torch.from_dlpack(f[1]).cpu().numpy().reshape(h // 2, -1)
        print("colorspace", f.colorspace, vf.colorspace, "Y diff", np.abs(yg.astype(int) - ref[:h]).mean(),
              "UV diff", np.abs(uvg.astype(int) - ref[h:]).mean())


if __name__ == "__main__":
    main()
