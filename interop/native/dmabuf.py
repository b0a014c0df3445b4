"""DMA-BUF plumbing without a framework: ioctl numbers, allocation (heap, udmabuf, sealed memfd), fd checks, mmap.

Facts (docs/dma.md): the ioctl numbers below match the kernel's uapi headers (linux-libc-dev 6.1). A memfd has
the same mmap and fd-passing semantics as a dma-buf but is not one: DMA_BUF_IOCTL_SYNC on it fails with ENOTTY,
which means "nothing to synchronise". Memfds we make are sealed (SHRINK | GROW | SEAL) so that no peer holding
the fd can truncate it under our mappings (a truncation would SIGBUS every process that maps it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import math
import operator
import os
import stat
import struct
import sys
import threading
import weakref
from dataclasses import dataclass

from .._locks import FinalizerLock
from ..errors import InteropError, InvalidTensorError, ResourceError


def _IOW(t: str, nr: int, size: int) -> int:
    return (1 << 30) | (size << 16) | (ord(t) << 8) | nr


def _IOWR(t: str, nr: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (ord(t) << 8) | nr


# <linux/dma-buf.h>
DMA_BUF_IOCTL_SYNC = _IOW("b", 0, 8)  # 0x40086200, struct dma_buf_sync { __u64 flags; }
DMA_BUF_SYNC_READ = 1
DMA_BUF_SYNC_WRITE = 2
DMA_BUF_SYNC_RW = 3
DMA_BUF_SYNC_START = 0
DMA_BUF_SYNC_END = 4
DMA_BUF_SET_NAME_B = _IOW("b", 1, 8)  # 0x40086201
DMA_BUF_IOCTL_EXPORT_SYNC_FILE = _IOWR("b", 2, 8)  # 0xc0086202
DMA_BUF_IOCTL_IMPORT_SYNC_FILE = _IOW("b", 3, 8)  # 0x40086203
# <linux/udmabuf.h>: struct udmabuf_create { __u32 memfd; __u32 flags; __u64 offset; __u64 size; }
UDMABUF_CREATE = _IOW("u", 0x42, 24)  # 0x40187542
UDMABUF_FLAGS_CLOEXEC = 0x01
# <linux/dma-heap.h>: struct dma_heap_allocation_data { __u64 len; __u32 fd; __u32 fd_flags; __u64 heap_flags; }
DMA_HEAP_IOCTL_ALLOC = _IOWR("H", 0x0, 24)  # 0xc0184800

# <drm/drm_fourcc.h>
DRM_FORMAT_MOD_LINEAR = 0
DRM_FORMAT_MOD_INVALID = 0x00FFFFFFFFFFFFFF

HEAP_PATH = "/dev/dma_heap/system"
UDMABUF_PATH = "/dev/udmabuf"
PAGE = os.sysconf("SC_PAGE_SIZE")

assert DMA_BUF_IOCTL_SYNC == 0x40086200 and UDMABUF_CREATE == 0x40187542 and DMA_HEAP_IOCTL_ALLOC == 0xC0184800


class DmaBufError(InteropError, OSError):
    """A dma-buf system call failed (mapping, synchronisation). Also an OSError carrying the call's errno."""


FD_MAX = (1 << 31) - 1  # file descriptors are C ints
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1


def check_int(value: object, what: str, *, lo: int | None = 0, hi: int | None = I64_MAX) -> int:
    """``value`` as an int in [lo, hi], or a typed error naming ``what``. The one validator of every integer argument
    of the DMA API: Python ints and numpy integers pass; floats (even 4.0: 1.9 would otherwise be truncated to 1),
    bools, None and strings are refused, as are values out of range: InvalidTensorError (a ValueError), as for
    every integer argument of the library (info.as_int)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise InvalidTensorError(f"{what} must be an integer, not a bool ({value!r})")
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        hint = " (NaN)" if isinstance(value, float) and math.isnan(value) else ""
        raise InvalidTensorError(f"{what} must be an integer, got {type(value).__name__} {value!r}{hint}: "
                                f"pass a whole number (round it yourself if a computation gave a float)") from None
    if lo is not None and v < lo:
        raise InvalidTensorError(f"{what} is {v}, less than {lo}: check the value")
    if hi is not None and v > hi:
        raise InvalidTensorError(f"{what} is {v}, more than the largest allowed ({hi}): check the value")
    return v


def check_fd(fd: object, what: str = "a dma-buf fd") -> int:
    """An fd argument: an int in [0, 2**31 - 1] (the kernel's range)."""
    return check_int(fd, what, lo=0, hi=FD_MAX)


def page_align(n: int) -> int:
    return -(-int(n) // PAGE) * PAGE


# ---- synchronisation ----------------------------------------------------------------------------------


def dma_buf_sync(fd: int, start: bool, write: bool, read: bool = True) -> bool:
    """Bracket CPU access to a dma-buf (DMA_BUF_IOCTL_SYNC): ``start=True`` before, ``start=False`` after.

    Returns False when ``fd`` is not a dma-buf (ENOTTY: a memfd or a file), where there is nothing to sync.
    EINTR/EAGAIN are retried, as libdrm does.
    """
    flags = (DMA_BUF_SYNC_START if start else DMA_BUF_SYNC_END) | (DMA_BUF_SYNC_READ if read else 0) | \
        (DMA_BUF_SYNC_WRITE if write else 0)
    if not flags & DMA_BUF_SYNC_RW:
        flags |= DMA_BUF_SYNC_READ
    arg = struct.pack("<Q", flags)
    while True:
        try:
            fcntl.ioctl(fd, DMA_BUF_IOCTL_SYNC, arg)
            return True
        except OSError as e:
            if e.errno in (errno.EINTR, errno.EAGAIN):
                continue
            if e.errno in (errno.ENOTTY, errno.EINVAL) and not is_dmabuf_fd(fd):
                return False
            raise DmaBufError(e.errno, f"DMA_BUF_IOCTL_SYNC on fd {fd} failed: {e.strerror}") from e


# ---- allocation ---------------------------------------------------------------------------------------


def fd_exhausted(e: OSError, what: str) -> OSError:
    """EMFILE/ENFILE as a ResourceError that says what to do; other errors as they are."""
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return ResourceError(e.errno, f"cannot {what}: the process has no file descriptor left ({os.strerror(e.errno)}); "
                                      f"release frames you no longer need, or raise the limit (ulimit -n)")
    return e


def dup_fd(fd: int) -> int:
    """os.dup(fd); running out of descriptors is a ResourceError that says what to do."""
    try:
        return os.dup(fd)
    except OSError as e:
        raise fd_exhausted(e, f"duplicate fd {fd}") from e


def memfd_alloc(size: int, name: str = "interop-dma") -> int:
    """A memfd of ``size`` bytes, sealed SHRINK|GROW|SEAL so no holder can change its size. CLOEXEC."""
    size = check_size(size)
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as e:
        raise fd_exhausted(e, "allocate a frame buffer (memfd)") from e
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def heap_alloc(size: int, heap: str = HEAP_PATH) -> int:
    """A real dma-buf from a dma-buf heap (DMA_HEAP_IOCTL_ALLOC), O_RDWR | O_CLOEXEC."""
    hfd = os.open(heap, os.O_RDWR | os.O_CLOEXEC)
    try:
        buf = bytearray(struct.pack("<QIIQ", page_align(size), 0, os.O_RDWR | os.O_CLOEXEC, 0))
        fcntl.ioctl(hfd, DMA_HEAP_IOCTL_ALLOC, buf, True)
        return struct.unpack("<QIIQ", bytes(buf))[1]
    finally:
        os.close(hfd)


def udmabuf_alloc(size: int) -> int:
    """A real dma-buf made by /dev/udmabuf over a sealed memfd (the memfd is closed; the dma-buf holds its pages)."""
    size = page_align(size)
    mfd = os.memfd_create("interop-udmabuf", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(mfd, size)
        fcntl.fcntl(mfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # udmabuf requires SHRINK and refuses WRITE seals
        dev = os.open(UDMABUF_PATH, os.O_RDWR | os.O_CLOEXEC)
        try:
            # the new dma-buf fd is the ioctl's return value, which fcntl.ioctl drops for buffer arguments
            arg = ctypes.create_string_buffer(struct.pack("<IIQQ", mfd, UDMABUF_FLAGS_CLOEXEC, 0, size), 24)
            ret = _libc.ioctl(dev, ctypes.c_ulong(UDMABUF_CREATE), arg)
            if ret < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            return int(ret)
        finally:
            os.close(dev)
    finally:
        os.close(mfd)


def check_size(size: object, what: str = "size") -> int:
    """An allocation size: a positive integer no larger than this machine's memory (a sparse memfd of a TiB would
    be created and mapped without complaint, then kill the process when touched)."""
    n = check_int(size, what, lo=1)
    if n > _PHYS_BYTES:
        raise ResourceError(errno.ENOMEM, f"cannot allocate {n} bytes: this machine has {_PHYS_BYTES} bytes of memory; "
                                          f"check the frame size")
    return n


try:
    _PHYS_BYTES = os.sysconf("SC_PHYS_PAGES") * PAGE
except (ValueError, OSError):  # pragma: no cover - every Linux has it
    _PHYS_BYTES = I64_MAX

KINDS = ("dma_heap", "udmabuf", "memfd")
# errnos that say an allocator cannot work in this process at all (no device, no permission, no driver support):
# only these take it out of available_kinds(); running out of fds or memory is transient and says nothing about it
_PERMANENT = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENODEV, errno.ENXIO, errno.ENOTTY,
                        errno.EOPNOTSUPP, errno.ENOSYS})
_TRANSIENT_RESOURCE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EAGAIN})

_kinds_lock = threading.Lock()
_kind_broken: set[str] = set()


def available_kinds() -> list[str]:
    """Allocators usable here, best first: 'dma_heap', 'udmabuf', 'memfd'."""
    out = []
    if os.access(HEAP_PATH, os.R_OK | os.W_OK) and "dma_heap" not in _kind_broken:
        out.append("dma_heap")
    if os.access(UDMABUF_PATH, os.R_OK | os.W_OK) and "udmabuf" not in _kind_broken:
        out.append("udmabuf")
    out.append("memfd")
    return out


def check_kind(kind: object) -> str | None:
    """An allocator name argument: None (the best available) or one of KINDS."""
    if kind is None:
        return None
    if not isinstance(kind, str):
        raise InvalidTensorError(f"an allocator kind is a str ({', '.join(map(repr, KINDS))}) or None, "
                                f"not {type(kind).__name__}")
    if kind not in KINDS:
        raise InvalidTensorError(f"unknown allocator {kind!r}: use one of {', '.join(map(repr, KINDS))} (or None)")
    return kind


_ALLOCATORS = {"dma_heap": lambda n: heap_alloc(n), "udmabuf": lambda n: udmabuf_alloc(n),
               "memfd": lambda n: memfd_alloc(n)}


def allocate(size: int, kind: str | None = None) -> tuple[int, str]:
    """Allocate ``size`` bytes: a dma-buf heap, else udmabuf, else a sealed memfd. Returns (fd, kind); we own fd.

    Running out of fds or memory raises ResourceError (an OSError with the errno) at once: another allocator
    needs an fd too. An allocator that fails for good (ENOENT, EACCES, ENODEV …) is not tried again in this
    process; one that fails for a transient reason is.
    """
    size = check_size(size)
    kind = check_kind(kind)
    kinds = [kind] if kind else available_kinds()
    last: OSError | None = None
    for k in kinds:
        try:
            return _ALLOCATORS[k](size), k
        except ResourceError:
            raise
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise fd_exhausted(e, f"allocate {size} bytes ({k})") from e
            last = e
            if e.errno in _PERMANENT and not kind:
                with _kinds_lock:
                    _kind_broken.add(k)
    assert last is not None
    err = last.errno or errno.EIO
    msg = f"could not allocate {size} bytes ({', '.join(kinds)}): {last.strerror or last}"
    if err in _TRANSIENT_RESOURCE:
        raise ResourceError(err, msg + "; release frames you no longer need") from last
    raise DmaBufError(err, msg) from last


# ---- fd checks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FdInfo:
    """What an fd refers to: its size in bytes (None when unknown), whether it is a real dma-buf, access mode."""

    size: int | None
    is_dmabuf: bool
    writable: bool
    sealed: bool  # cannot shrink: a dma-buf, or a memfd with F_SEAL_SHRINK
    kind: str  # 'dmabuf', 'memfd', 'file'


def is_dmabuf_fd(fd: int) -> bool:
    try:
        link = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return link.startswith("/dmabuf:") or link.startswith("anon_inode:dmabuf")


def seals(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return 0


def inspect_fd(fd: object) -> FdInfo:
    """Check that ``fd`` is an open fd that can back a tensor; raise InvalidTensorError saying what is wrong."""
    try:
        fd = check_int(fd, "a dma-buf fd", lo=None, hi=None)
    except InvalidTensorError:
        raise InvalidTensorError(f"a dma-buf fd must be an int file descriptor, not {type(fd).__name__}; "
                                f"pass f.fileno() for file objects") from None
    if fd < 0:
        raise InvalidTensorError(f"fd {fd} is negative: pass the file descriptor of an open dma-buf or memfd")
    if fd > FD_MAX:
        raise InvalidTensorError(f"fd {fd} is larger than any file descriptor: pass the file descriptor of an open "
                                 f"dma-buf or memfd")
    try:
        st = os.fstat(fd)
    except OSError as e:
        if e.errno == errno.EBADF:
            raise InvalidTensorError(f"fd {fd} is closed (EBADF): keep the fd open until DMATensor.from_fd() returns "
                                     f"(the tensor keeps its own dup)") from None
        raise InvalidTensorError(f"fd {fd} cannot be inspected: {e.strerror}") from None
    mode = st.st_mode
    if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
        what = "a socket" if stat.S_ISSOCK(mode) else "a pipe"
        raise InvalidTensorError(f"fd {fd} is {what}, not memory: pass a dma-buf fd (V4L2 EXPBUF, VA export, "
                                 f"a dma-buf heap) or a memfd; check the order of fds received over SCM_RIGHTS")
    if stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise InvalidTensorError(f"fd {fd} is a directory or device node, not a buffer: pass a dma-buf or memfd fd")
    try:
        acc = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        acc = os.O_RDWR
    if acc == os.O_WRONLY:
        raise InvalidTensorError(f"fd {fd} is open write-only; mmap needs it readable: open it O_RDWR or O_RDONLY")
    dmabuf = is_dmabuf_fd(fd)
    if stat.S_ISREG(mode):
        size: int | None = st.st_size
        memfd = os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
        sealed = bool(seals(fd) & fcntl.F_SEAL_SHRINK)
        kind = "memfd" if memfd else "file"
    else:  # a dma-buf: an anonymous inode whose size lseek(SEEK_END) reports
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            size = st.st_size or None
        sealed, kind = True, "dmabuf"
        if not dmabuf:
            raise InvalidTensorError(f"fd {fd} ({os.readlink(f'/proc/self/fd/{fd}')}) is not a dma-buf, memfd or file")
    return FdInfo(size=size, is_dmabuf=dmabuf, writable=acc == os.O_RDWR, sealed=sealed, kind=kind)


# ---- mmap without Python's mmap module (which dups the fd and cannot unmap while views exist) ----------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.ioctl.restype = ctypes.c_int
_PROT_READ, _PROT_WRITE, _MAP_SHARED = 1, 2, 1
_MAP_FAILED = ctypes.c_void_p(-1).value

# live mappings, address -> weakref(Mapping); lets cpu_to_dma recognise memory that came from one of our buffers
# (finalisers take it through call(): the collector may run one while this very thread is inside it)
_live_lock = FinalizerLock()
_live: dict[int, weakref.ref[Mapping]] = {}
_stats = {"mappings": 0}


def _unmap(addr: int, length: int) -> None:
    if sys.is_finalizing():  # interpreter teardown: daemon threads are frozen, maybe holding our locks; the OS frees it
        return
    _live_lock.call(_forget_and_unmap, addr, length)


def _forget_and_unmap(addr: int, length: int) -> None:
    ref = _live.get(addr)
    if ref is not None and ref() is None:  # never another live mapping at a reused address
        del _live[addr]
    _stats["mappings"] -= 1
    _libc.munmap(addr, length)


class Mapping:
    """One MAP_SHARED mapping of a whole buffer. Unmapped when the last reference (numpy views hold one) is gone.

    ``owner`` is an object (the DMABuffer) kept weakly so cpu_to_dma can find the buffer behind an address.
    """

    __slots__ = ("address", "length", "writable", "_owner", "_fin", "__weakref__")

    def __init__(self, fd: int, length: int, writable: bool, owner: object | None = None):
        prot = _PROT_READ | (_PROT_WRITE if writable else 0)
        addr = _libc.mmap(None, length, prot, _MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            hint = " (the fd is read-only: map it with AccessMode.READ)" if err == errno.EACCES else ""
            msg = f"mmap of fd {fd} ({length} bytes) failed: {os.strerror(err)}{hint}"
            if err in _TRANSIENT_RESOURCE:
                raise ResourceError(err, msg + "; release mappings and frames you no longer need")
            raise DmaBufError(err, msg)
        self.address = int(addr)
        self.length = int(length)
        self.writable = bool(writable)
        self._owner = weakref.ref(owner) if owner is not None else None
        with _live_lock:
            _live[self.address] = weakref.ref(self)
            _stats["mappings"] += 1
        self._fin = weakref.finalize(self, _unmap, self.address, self.length)
        # Not at interpreter exit: a daemon thread may still read or write through a view; the OS unmaps at exit.
        self._fin.atexit = False

    @property
    def owner(self) -> object | None:
        return self._owner() if self._owner is not None else None

    def array_interface(self, offset: int, shape: tuple[int, ...], typestr: str, strides: tuple[int, ...],
                        readonly: bool) -> dict:
        return {"version": 3, "shape": shape, "typestr": typestr, "data": (self.address + offset, readonly),
                "strides": strides}


def find_mapping(address: int, nbytes: int) -> Mapping | None:
    """The live mapping of ours that holds [address, address + nbytes), if any."""
    with _live_lock:
        refs = list(_live.items())
    for start, ref in refs:
        m = ref()
        if m is not None and start <= address and address + nbytes <= start + m.length:
            return m
    return None


def live_mappings() -> int:
    """How many of our mappings exist now (for leak checks)."""
    return _stats["mappings"]
