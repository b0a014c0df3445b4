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
    """Tier-C devices: VA render node, Level Zero driver, NPU accel node, dma-buf heap, udmabuf."""
    render = bool(glob.glob("/dev/dri/renderD*"))
    return {
        "vaapi": render,
        "level_zero": render or bool(glob.glob("/dev/accel/accel*")),
        "npu": bool(glob.glob("/dev/accel/accel*")),
        "dma_heap": os.path.exists("/dev/dma_heap/system"),
        "udmabuf": os.path.exists("/dev/udmabuf"),
    }


def backing_of(addr: int) -> tuple[tuple[int, int], int, int, str]:
    """What backs a virtual address of this process, from /proc/self/maps: ((major, minor) of the file's device,
    its inode, the file offset the address maps, the mapping's path). Tests tie a pointer to an fd with it:
    ``os.fstat(fd)`` has the same device and inode when the pointer maps the fd's memory."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                major, minor = (int(x, 16) for x in parts[3].split(":"))
                return (major, minor), int(parts[4]), int(parts[2], 16) + addr - lo, \
                    parts[5].strip() if len(parts) > 5 else ""
    raise AssertionError(f"address {addr:#x} is not mapped in this process")


def same_file(fd: int, addr: int) -> tuple[int, str]:
    """Assert that ``addr`` maps the memory of ``fd`` (same device and inode); returns (file offset, path)."""
    dev, ino, off, path = backing_of(addr)
    st = os.fstat(fd)
    assert (dev, ino) == ((os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino), \
        f"address {addr:#x} maps {path or 'anonymous memory'} (dev {dev}, inode {ino}), not fd {fd} (inode {st.st_ino})"
    return off, path
