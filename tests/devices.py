"""Which devices exist here, found without importing interop's backends (used to skip with a reason)."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess


@functools.cache
def cuda_device() -> str | None:
    """Name of the first NVIDIA GPU, or None."""
    if not os.path.exists("/dev/nvidiactl") and not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        names = [x.strip() for x in out.stdout.splitlines() if x.strip()]
        return names[0] if names else None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def hardware_devices() -> dict[str, bool]:
    """Tier-C devices: VA render node, Level Zero driver, NPU accel node, dma-buf heap."""
    render = bool(glob.glob("/dev/dri/renderD*"))
    return {
        "vaapi": render,
        "level_zero": render or bool(glob.glob("/dev/accel/accel*")),
        "npu": bool(glob.glob("/dev/accel/accel*")),
        "dma_heap": os.path.exists("/dev/dma_heap/system"),
    }
