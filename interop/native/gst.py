"""ctypes bindings to libgstreamer-1.0 / libgstvideo-1.0 for what PyGObject cannot give: the memory's own pointer.

PyPI's PyGObject maps a buffer into ``bytes`` (a copy); here ``gst_memory_map`` runs on the C pointer PyGObject
holds (``hash()`` of a boxed ``Gst.Buffer``/``Gst.Memory``/``Gst.Caps`` is that pointer), one memory at a time:
``gst_buffer_map`` on a buffer of several memories merges them into a new allocation, a hidden copy, so it is
never called. Struct layouts are GStreamer 1.x's public ABI (GstMapInfo, GstVideoInfo, GstVideoMeta).
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import itertools
import os as _os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._locks import FinalizerLock
from ..errors import BackendUnavailableError, InvalidTensorError, ResourceError

GST_MAP_READ = 1
GST_MAP_WRITE = 2
GST_LOCK_FLAG_EXCLUSIVE = 4
GST_MEMORY_FLAG_READONLY = 2
GST_MEMORY_FLAG_NOT_MAPPABLE = 16 << 4
GST_VIDEO_MAX_PLANES = 4
GST_CLOCK_TIME_NONE = (1 << 64) - 1

_c = ctypes
_vp, _sz, _int, _uint, _bool = _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_uint, _c.c_int


class GstMapInfo(_c.Structure):
    _fields_ = [("memory", _vp), ("flags", _int), ("data", _vp), ("size", _sz), ("maxsize", _sz),
                ("user_data", _vp * 4), ("_gst_reserved", _vp * 4)]


class GstVideoColorimetry(_c.Structure):
    _fields_ = [("range", _int), ("matrix", _int), ("transfer", _int), ("primaries", _int)]


class GstVideoInfo(_c.Structure):
    _fields_ = [("finfo", _vp), ("interlace_mode", _int), ("flags", _int), ("width", _int), ("height", _int),
                ("size", _sz), ("views", _int), ("chroma_site", _int), ("colorimetry", GstVideoColorimetry),
                ("par_n", _int), ("par_d", _int), ("fps_n", _int), ("fps_d", _int),
                ("offset", _sz * GST_VIDEO_MAX_PLANES), ("stride", _int * GST_VIDEO_MAX_PLANES),
                ("_abi", _vp * 4)]


class GstVideoMeta(_c.Structure):
    _fields_ = [("meta_flags", _int), ("meta_info", _vp), ("buffer", _vp), ("flags", _int), ("format", _int),
                ("id", _int), ("width", _uint), ("height", _uint), ("n_planes", _uint),
                ("offset", _sz * GST_VIDEO_MAX_PLANES), ("stride", _int * GST_VIDEO_MAX_PLANES)]


DESTROY_NOTIFY = _c.CFUNCTYPE(None, _vp)

# finalisers (_unmap) and GStreamer's destroy notifies (_release_kept) take it through call(): either may run while
# this very thread is inside one of its critical sections (a collection, an unref that frees a memory)
_lock = FinalizerLock()
_libs: list[tuple[Any, Any]] = []

# ---- interpreter exit ------------------------------------------------------------------------------------------
# Exit rule: clean-up at interpreter exit never frees memory another thread can still touch. Daemon threads (and
# GStreamer's streaming threads) run on while atexit handlers and module teardown do, and GStreamer holds raw
# pointers to what interop keeps alive for it (wrapped numpy arrays, fd dups, callbacks). So from the exit on,
# nothing is unmapped, closed or dropped here: the OS reclaims it all when the process ends.
_exiting = [False]


def _at_exit() -> None:
    _exiting[0] = True


atexit.register(_at_exit)


def _immortal(*objs: object) -> None:
    """Keep objects alive for the rest of the process, module teardown included: GStreamer holds pointers into them
    (callbacks it may still call, what wrapped memory points to), and teardown would otherwise free them."""
    for o in objs:
        _c.pythonapi.Py_IncRef(_c.py_object(o))


def _load(name: str) -> Any:
    path = ctypes.util.find_library(name) or f"lib{name}.so.0"
    try:
        return _c.CDLL(path)
    except OSError as e:
        raise BackendUnavailableError(
            f"GStreamer's C library {path} cannot be loaded ({e}): install Debian's GStreamer packages "
            f"(tests/prepare.d/gstreamer.sh prints the apt command)", backend="gst", extra="gst") from e


def _sig(lib: Any, name: str, res: Any, *args: Any) -> None:
    fn = getattr(lib, name)
    fn.restype = res
    fn.argtypes = list(args)


def libs() -> tuple[Any, Any]:
    """(libgstreamer-1.0, libgstvideo-1.0) with their signatures set; loaded once."""
    if _libs:
        return _libs[0]
    with _lock:
        if _libs:
            return _libs[0]
        g, v = _load("gstreamer-1.0"), _load("gstvideo-1.0")
        _sig(g, "gst_is_initialized", _bool)
        _sig(g, "gst_memory_map", _bool, _vp, _c.POINTER(GstMapInfo), _int)
        _sig(g, "gst_buffer_map", _bool, _vp, _c.POINTER(GstMapInfo), _int)
        _sig(g, "gst_buffer_unmap", None, _vp, _c.POINTER(GstMapInfo))
        _sig(g, "gst_sample_get_buffer", _vp, _vp)
        _sig(g, "gst_sample_get_caps", _vp, _vp)
        _sig(g, "gst_mini_object_weak_ref", None, _vp, WEAK_NOTIFY, _vp)
        _sig(g, "gst_memory_unmap", None, _vp, _c.POINTER(GstMapInfo))
        _sig(g, "gst_mini_object_ref", _vp, _vp)
        _sig(g, "gst_mini_object_unref", None, _vp)
        _sig(g, "gst_mini_object_lock", _bool, _vp, _int)
        _sig(g, "gst_mini_object_unlock", None, _vp, _int)
        _sig(g, "gst_mini_object_is_writable", _bool, _vp)
        _sig(g, "gst_buffer_n_memory", _uint, _vp)
        _sig(g, "gst_buffer_peek_memory", _vp, _vp, _uint)
        _sig(g, "gst_buffer_find_memory", _bool, _vp, _sz, _sz, _c.POINTER(_uint), _c.POINTER(_uint),
             _c.POINTER(_sz))
        _sig(g, "gst_buffer_get_size", _sz, _vp)
        _sig(g, "gst_memory_get_sizes", _sz, _vp, _c.POINTER(_sz), _c.POINTER(_sz))
        _sig(g, "gst_memory_is_type", _bool, _vp, _c.c_char_p)
        _sig(g, "gst_memory_new_wrapped", _vp, _int, _vp, _sz, _sz, _sz, _vp, DESTROY_NOTIFY)
        _sig(g, "gst_buffer_append_memory", None, _vp, _vp)
        _sig(g, "gst_buffer_get_meta", _vp, _vp, _c.c_size_t)
        _sig(g, "gst_mini_object_set_qdata", None, _vp, _uint, _vp, DESTROY_NOTIFY)
        _sig(g, "gst_element_get_static_pad", _vp, _vp, _c.c_char_p)
        _sig(g, "gst_pad_add_probe", _c.c_ulong, _vp, _int, PROBE_CB, _vp, _vp)
        _sig(g, "gst_object_unref", None, _vp)
        _sig(g, "gst_query_add_allocation_meta", None, _vp, _c.c_size_t, _vp)
        _sig(g, "gst_query_find_allocation_meta", _bool, _vp, _c.c_size_t, _c.POINTER(_uint))
        _sig(g, "gst_buffer_extract", _sz, _vp, _sz, _vp, _sz)
        _sig(g, "gst_element_class_set_metadata", None, _vp, _c.c_char_p, _c.c_char_p, _c.c_char_p, _c.c_char_p)
        _sig(g, "gst_pad_template_new", _vp, _c.c_char_p, _int, _int, _vp)
        _sig(g, "gst_element_class_add_pad_template", None, _vp, _vp)
        _sig(v, "gst_video_meta_api_get_type", _c.c_size_t)
        _sig(v, "gst_buffer_add_video_meta_full", _vp, _vp, _int, _int, _uint, _uint, _uint,
             _c.POINTER(_sz), _c.POINTER(_int))
        _sig(v, "gst_video_info_new", _vp)
        _sig(v, "gst_video_info_free", None, _vp)
        _sig(v, "gst_video_info_from_caps", _bool, _vp, _vp)
        _sig(v, "gst_video_format_to_string", _c.c_char_p, _int)
        _sig(v, "gst_video_format_from_string", _int, _c.c_char_p)
        _libs.append((g, v))
        return _libs[0]


def pointer_of(obj: Any, what: str) -> int:
    """The C pointer a PyGObject boxed wrapper (Gst.Buffer, Gst.Memory, Gst.Caps) holds: PyGObject's ``hash()``
    of a boxed object is its pointer."""
    ptr = hash(obj)
    if ptr <= 0:
        raise InvalidTensorError(f"this {what} wraps no GStreamer object (a NULL pointer)")
    return ptr


def refcount(ptr: int) -> int:
    """A GstMiniObject's reference count (diagnostics and tests; GstMiniObject: GType, then gint refcount)."""
    return _c.c_int.from_address(ptr + _c.sizeof(_c.c_size_t)).value


def is_writable(ptr: int) -> bool:
    """gst_mini_object_is_writable: a buffer with one reference; a memory owned by one buffer, not read-only."""
    return bool(libs()[0].gst_mini_object_is_writable(ptr))


def n_memory(buf: int) -> int:
    return int(libs()[0].gst_buffer_n_memory(buf))


def buffer_size(buf: int) -> int:
    return int(libs()[0].gst_buffer_get_size(buf))


def peek_memory(buf: int, idx: int) -> int:
    return int(libs()[0].gst_buffer_peek_memory(buf, idx) or 0)


def memory_sizes(mem: int) -> tuple[int, int, int]:
    """(size, offset, maxsize) of a GstMemory."""
    off, mx = _sz(), _sz()
    size = libs()[0].gst_memory_get_sizes(mem, _c.byref(off), _c.byref(mx))
    return int(size), int(off.value), int(mx.value)


def memory_is_type(mem: int, mem_type: str) -> bool:
    return bool(libs()[0].gst_memory_is_type(mem, mem_type.encode()))


#: GstMiniObject.flags: after the GType, the refcount and the lockstate
MINI_OBJECT_FLAGS_OFFSET = _c.sizeof(_c.c_size_t) + 8  # GstMiniObject: GType, refcount, lockstate, flags


def memory_flags(mem: int) -> int:
    """GstMiniObject.flags (GType, refcount, lockstate, then flags)."""
    return _c.c_uint.from_address(mem + MINI_OBJECT_FLAGS_OFFSET).value


def find_memory(buf: int, offset: int, size: int) -> tuple[int, int, int] | None:
    """(index, count, skip) of the memories holding bytes [offset, offset+size) of a buffer, or None."""
    idx, length, skip = _uint(), _uint(), _sz()
    if not libs()[0].gst_buffer_find_memory(buf, offset, size, _c.byref(idx), _c.byref(length), _c.byref(skip)):
        return None
    return int(idx.value), int(length.value), int(skip.value)


# ---- mappings -------------------------------------------------------------------------------------------

_live = {"mappings": 0}
# BufferMappings made and freed: itertools.count's next() is atomic, so a finaliser running on any thread (or
# inside a locked section of the same thread) never waits on a lock
_made, _freed = itertools.count(), itertools.count()


def _count(c: itertools.count[int]) -> int:
    return int(c.__reduce__()[1][0])  # type: ignore[index]


def live_mappings() -> int:
    """GstMemory mappings interop holds now (each ends when its last view is gone)."""
    return _live["mappings"] + _count(_made) - _count(_freed)


def _unmap(mem: int, info: GstMapInfo, buf: int, locked: bool, live: dict[str, int]) -> None:
    g = libs()[0]
    if locked:
        g.gst_mini_object_unlock(mem, GST_LOCK_FLAG_EXCLUSIVE)
    g.gst_memory_unmap(mem, _c.byref(info))
    g.gst_mini_object_unref(mem)
    if buf:
        g.gst_mini_object_unref(buf)
    _lock.call(_count_unmapped, live)


def _count_unmapped(live: dict[str, int]) -> None:
    live["mappings"] -= 1


#: GstMiniObject.lockstate counts locks in bits 8-15 (each gst_memory_map takes one) and GStreamer does not check
#: for overflow: past 255 live locks of one memory its lock state is corrupt, so interop refuses well before
LOCK_COUNT_MASK = 0xFF00
MAX_LOCKS = 200 << 8


def check_lock_room(mem: int) -> None:
    """Raise ResourceError when one memory already has so many live mappings that another could overflow
    GStreamer's lock count."""
    if GstMemoryHead.from_address(mem).lockstate & LOCK_COUNT_MASK >= MAX_LOCKS:
        raise ResourceError(
            "this GstMemory is mapped about 200 times at once; GStreamer counts at most 255 locks per memory, so "
            "interop maps it no more: release mappings (frame.release(), or drop the numpy views) before mapping "
            "the same buffer again")


class MemoryMapping:
    """One GstMemory mapped with ``gst_memory_map`` (READ, or READ|WRITE), until this object is gone.

    It holds a reference on the memory and on the buffer it came from (when given): a buffer pool gets the buffer
    back only when the last view is gone. A READ mapping also takes a shared (exclusive-count) lock on the memory,
    which makes a pool discard the buffer rather than hand its memory to the next frame, so views over this
    mapping go on reading this frame. (GStreamer refuses that lock on memory mapped for WRITE.) numpy views hold
    this object; unmap runs in its finaliser.
    """

    __slots__ = ("memory", "address", "size", "writable", "_fin", "__weakref__")

    def __init__(self, mem: int, write: bool, buf: int = 0):
        g = libs()[0]
        check_lock_room(mem)
        info = GstMapInfo()
        flags = GST_MAP_READ | (GST_MAP_WRITE if write else 0)
        g.gst_mini_object_ref(mem)
        if not g.gst_memory_map(mem, _c.byref(info), flags):
            g.gst_mini_object_unref(mem)
            what = "for writing (it is shared or read-only)" if write else "for reading"
            raise InvalidTensorError(f"GStreamer refused to map this memory {what}")
        locked = not write and bool(g.gst_mini_object_lock(mem, GST_LOCK_FLAG_EXCLUSIVE))
        if buf:
            g.gst_mini_object_ref(buf)
        with _lock:
            _live["mappings"] += 1
        self.memory = mem
        self.address = int(info.data or 0)
        self.size = int(info.size)
        self.writable = write
        self._fin = weakref.finalize(self, _unmap, mem, info, buf, locked, _live)
        # Not at interpreter exit: a daemon thread may still read a view; the OS unmaps at exit.
        self._fin.atexit = False

    def close(self) -> None:
        """Unmap now; only safe when no view of the mapping is left (the finaliser does it otherwise)."""
        self._fin()

    def host_bounds(self) -> tuple[int, int]:
        """[start, end) of the mapped bytes: how far a consumer of a view over this mapping may read."""
        return self.address, self.address + self.size


class BufferMapping:
    """The one memory of a one-memory buffer mapped for READ with ``gst_buffer_map`` (which maps that memory in
    place and takes a reference on it; only a buffer of several memories would be merged into a copy, and those
    never come here), unmapped when this object is gone.

    ``owner`` is the Python ``Gst.Sample``/``Gst.Buffer`` the buffer came from: holding it holds the buffer, so
    a buffer pool gets the buffer back only when the last view is gone (the pool needs the refcount at zero),
    and nobody can map it for WRITE meanwhile (a buffer with two references is not writable). numpy views hold
    this object; the unmap is its ``__del__`` (no finaliser registry on the per-frame path).
    """

    __slots__ = ("info", "owner", "buf", "address", "size", "_unmap", "__weakref__")
    # bound now: __del__ may run during module teardown, when this module's globals are already None
    _freed = _freed.__next__
    _exiting = _exiting

    def __init__(self, owner: Any, buf: int, g: Any):
        info = GstMapInfo()
        if not g.gst_buffer_map(buf, info, GST_MAP_READ):
            raise InvalidTensorError("GStreamer refused to map this buffer for reading")
        next(_made)
        self.info, self.owner, self.buf, self._unmap = info, owner, buf, g.gst_buffer_unmap
        self.address = info.data or 0
        self.size = info.size

    def host_bounds(self) -> tuple[int, int]:
        """[start, end) of the mapped bytes: how far a consumer of a view over this mapping may read."""
        return int(self.address), int(self.address) + int(self.size)

    def __del__(self) -> None:
        try:
            if not self._exiting[0]:  # exit rule: at exit the mapping stays (a thread may read a view)
                self._unmap(self.buf, self.info)
            self._freed()
        except Exception:  # never raise from a finaliser (the library may be gone at teardown)
            pass


def mapped() -> None:
    """Count a BufferMapping whose state its maker set itself (a one-step mapper builds it without __init__)."""
    next(_made)


#: mapped() without the function around it, for the per-frame path
count_mapping = _made.__next__


def sample_buffer_caps(sample: int) -> tuple[int, int]:
    """(GstBuffer*, GstCaps*) of a GstSample (borrowed pointers: the sample holds them), 0 where absent."""
    g = libs()[0]
    return int(g.gst_sample_get_buffer(sample) or 0), int(g.gst_sample_get_caps(sample) or 0)


#: GstBuffer's public fields (GstMiniObject is 64 bytes on LP64, then the pool pointer): pts, dts, duration. LP64
#: offsets: ``_held()`` (the only writer) refuses other data models
BUFFER_PTS_OFFSET = 72
BUFFER_DURATION_OFFSET = 88
_LP64 = _c.sizeof(_c.c_void_p) == 8 and _c.sizeof(_c.c_long) == 8


def buffer_times(buf: int) -> tuple[int, int]:
    """(pts, duration) of a GstBuffer in ns; GST_CLOCK_TIME_NONE where unknown."""
    return (_c.c_uint64.from_address(buf + BUFFER_PTS_OFFSET).value,
            _c.c_uint64.from_address(buf + BUFFER_DURATION_OFFSET).value)


#: the bytes of a GstVideoMeta that describe the layout (flags .. stride): a cache key for the layout it gives
META_KEY_OFFSET = 24  # after GstMeta (flags, info) and the buffer pointer
META_KEY_SIZE = 96 - META_KEY_OFFSET  # to the end of stride[4]


def meta_key(meta: int) -> bytes:
    return _c.string_at(meta + META_KEY_OFFSET, META_KEY_SIZE)


class GstMemoryHead(_c.Structure):
    """The public head of a GstMemory: its GstMiniObject (type, refcount, lockstate, flags …), then the allocator."""

    _fields_ = [("type", _sz), ("refcount", _int), ("lockstate", _int), ("flags", _uint), ("_mini", _c.c_byte * 44),
                ("allocator", _vp)]


class GstSampleHead(_c.Structure):
    """The head of a GstSample (gstsample.c, unchanged since 1.0): its GstMiniObject, then buffer and caps."""

    _fields_ = [("_mini", _c.c_byte * 64), ("buffer", _vp), ("caps", _vp)]


class GstBufferHead(_c.Structure):
    """A GstBuffer as gstbuffer.c lays it out (GstBufferImpl): the public GstBuffer (112 bytes on LP64), then the
    slice size, the memory count and blocks, and the meta item list. Private to GStreamer, so it is read only once
    ``struct_layout_ok()`` has checked it against GStreamer's own getters in this process."""

    _fields_ = [("_public", _c.c_byte * 112), ("slice_size", _sz), ("len", _uint), ("mem0", _vp),
                ("_mem", _vp * 15), ("bufmem", _vp), ("item", _vp)]


class GstMetaItemHead(_c.Structure):
    """GstMetaItem (public, gstmeta.h since 1.16): next, seq_num, then the GstMeta (flags, info)."""

    _fields_ = [("next", _vp), ("seq_num", _c.c_uint64), ("flags", _int), ("info", _vp)]


#: from a GstMetaItem* to its GstMeta* (the GstMeta follows next and seq_num)
META_ITEM_META_OFFSET = 16
_layout_ok: list[bool] = []


def struct_layout_ok() -> bool:
    """Whether GstSampleHead, GstBufferHead and GstMetaItemHead describe this process's GStreamer: checked once, on
    a sample and a buffer of two memories and two metas made for the purpose, against gst_sample_get_buffer/
    get_caps, gst_buffer_n_memory/peek_memory and gst_buffer_get_meta. When they do not, callers use those
    functions instead (slower, same answers)."""
    if _layout_ok:
        return _layout_ok[0]
    ok = False
    try:
        if not initialized():
            return False  # not cached: once GStreamer is initialised, the check runs
        ok = _check_layout()
    except Exception:  # a GStreamer without one of the functions: the getters still work
        _log_failure("interop could not check GStreamer's struct layout; it calls the getters instead")
    with _lock:
        if not _layout_ok:
            _layout_ok.append(ok)
    return _layout_ok[0]


def initialized() -> bool:
    """Whether GStreamer is initialised in this process. Until it is, a buffer or sample made here (the layout check
    makes both) has no allocator behind it: GStreamer crashes the process."""
    g, _ = libs()
    return bool(g.gst_is_initialized())


def _check_layout() -> bool:
    g, v = libs()
    _sig(g, "gst_buffer_new_allocate", _vp, _vp, _sz, _vp)
    _sig(g, "gst_allocator_alloc", _vp, _vp, _sz, _vp)
    _sig(g, "gst_buffer_add_meta", _vp, _vp, _vp, _vp)
    _sig(g, "gst_caps_new_empty_simple", _vp, _c.c_char_p)
    _sig(g, "gst_sample_new", _vp, _vp, _vp, _vp, _vp)
    _sig(v, "gst_video_crop_meta_get_info", _vp)
    buf = g.gst_buffer_new_allocate(None, 64, None)
    caps = g.gst_caps_new_empty_simple(b"video/x-raw")
    sample = 0
    try:
        g.gst_buffer_add_meta(buf, v.gst_video_crop_meta_get_info(), None)  # a meta of another API first
        offs, strs = (_sz * GST_VIDEO_MAX_PLANES)(0), (_int * GST_VIDEO_MAX_PLANES)(8)
        v.gst_buffer_add_video_meta_full(buf, 0, format_code("GRAY8"), 8, 8, 1, offs, strs)
        g.gst_buffer_append_memory(buf, g.gst_allocator_alloc(None, 16, None))
        sample = g.gst_sample_new(buf, caps, None, None)
        s = GstSampleHead.from_address(sample)
        b = GstBufferHead.from_address(buf)
        return bool(s.buffer == g.gst_sample_get_buffer(sample) == buf and s.caps == g.gst_sample_get_caps(sample)
                    == caps and b.len == g.gst_buffer_n_memory(buf) == 2 and
                    b.mem0 == g.gst_buffer_peek_memory(buf, 0) and b._mem[0] == g.gst_buffer_peek_memory(buf, 1)
                    and find_meta(b.item, video_meta_api()) == g.gst_buffer_get_meta(buf, video_meta_api()) != 0)
    finally:
        if sample:
            g.gst_mini_object_unref(sample)
        g.gst_mini_object_unref(caps)
        g.gst_mini_object_unref(buf)


_meta_apis: dict[int, int] = {}  # GstMetaInfo* -> its API GType (meta infos are registered for the process's life)


def find_meta(item: int | None, api: int) -> int:
    """The first GstMeta* of API ``api`` in a buffer's meta item list (GstBufferHead.item), 0 when none: what
    gst_buffer_get_meta answers, read from the list."""
    while item:
        it = GstMetaItemHead.from_address(item)
        info = it.info or 0
        a = _meta_apis.get(info)
        if a is None:
            a = _meta_apis[info] = _c.c_size_t.from_address(info).value if info else 0  # GstMetaInfo.api
        if a == api:
            return item + META_ITEM_META_OFFSET
        item = it.next
    return 0


def memory_allocator(mem: int) -> int:
    """GstMemory.allocator (the public field after the 64-byte GstMiniObject)."""
    return int(_c.c_void_p.from_address(mem + 64).value or 0)


# ---- knowing when a GStreamer object is freed (caches keyed by pointer) ------------------------------------

WEAK_NOTIFY = _c.CFUNCTYPE(None, _vp, _vp)  # GstMiniObjectNotify and GWeakNotify: (user data, the object)
_watchers: dict[int, Callable[[int], None]] = {}
_watch_lock = threading.RLock()


def _on_free(data: int | None, obj: int | None, _watchers: dict[int, Callable[[int], None]] = _watchers,
             _watch_lock: Any = _watch_lock, _exiting: list[bool] = _exiting) -> None:
    # runs on whichever thread frees the object, before its memory is released (ctypes takes the GIL); globals are
    # bound as defaults: it may run during module teardown
    try:
        with _watch_lock:
            cb = _watchers.pop(int(obj or 0), None)
        if cb is not None:
            cb(int(obj or 0))
    except Exception:  # never raise into GStreamer's thread
        if not _exiting[0]:  # at exit the caches' modules may be torn down already: nothing to say
            _log_failure("interop's cache clean-up failed")


def _log_failure(what: str) -> None:
    import logging

    logging.getLogger("interop").exception(what)


_on_free_cb = WEAK_NOTIFY(_on_free)  # GStreamer may call it as long as the process lives
_immortal(_on_free_cb, _on_free, _watchers, _watch_lock)
_gobject: list[Any] = []


def gobject_lib() -> Any:
    """libgobject-2.0 with the signatures interop uses; loaded once."""
    if not _gobject:
        with _lock:
            if not _gobject:
                go = _load("gobject-2.0")
                _sig(go, "g_object_weak_ref", None, _vp, WEAK_NOTIFY, _vp)
                _sig(go, "g_type_class_ref", _vp, _sz)
                _sig(go, "g_type_from_name", _sz, _c.c_char_p)
                _gobject.append(go)
    return _gobject[0]


def watch(ptr: int, on_free: Callable[[int], None], *, gobject: bool = False) -> None:
    """Call ``on_free(ptr)`` when the GstMiniObject (or GObject, e.g. a GstAllocator) at ``ptr`` is freed, without
    holding a reference on it: a cache keyed by its pointer drops the entry before the address can be reused."""
    with _watch_lock:
        if ptr in _watchers:
            _watchers[ptr] = on_free
            return
        _watchers[ptr] = on_free
    if gobject:
        gobject_lib().g_object_weak_ref(ptr, _on_free_cb, None)
    else:
        libs()[0].gst_mini_object_weak_ref(ptr, _on_free_cb, None)


# ---- video layouts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoLayout:
    """Format name (GStreamer's), size, per-plane buffer offsets and strides, colorimetry codes, frame rate."""

    format: str
    width: int
    height: int
    offsets: tuple[int, ...]
    strides: tuple[int, ...]
    range: int = 0  # GstVideoColorRange: 0 unknown, 1 0-255, 2 16-235
    matrix: int = 0  # GstVideoColorMatrix: 0 unknown, 1 RGB, 3 BT709, 4 BT601, 6 BT2020
    fps: tuple[int, int] = (0, 1)
    size: int = 0  # bytes of a whole frame at this layout (GstVideoInfo's; 0 from a video meta)


def format_name(code: int) -> str:
    s = libs()[1].gst_video_format_to_string(code)
    return s.decode() if s else "UNKNOWN"


def format_code(name: str) -> int:
    return int(libs()[1].gst_video_format_from_string(name.encode()))


def video_info(caps: int) -> VideoLayout | None:
    """The layout GstVideoInfo gives for video caps (tight GStreamer default strides), or None (not raw video)."""
    v = libs()[1]
    p = v.gst_video_info_new()
    try:
        if not v.gst_video_info_from_caps(p, caps):
            return None
        vi = GstVideoInfo.from_address(p)
        fmt = _c.c_int.from_address(vi.finfo).value  # GstVideoFormatInfo starts with its GstVideoFormat
        return VideoLayout(format_name(fmt), vi.width, vi.height, tuple(vi.offset), tuple(vi.stride),
                           vi.colorimetry.range, vi.colorimetry.matrix, (vi.fps_n, vi.fps_d), int(vi.size))
    finally:
        v.gst_video_info_free(p)


_meta_api: list[int] = []


def video_meta_api() -> int:
    """GstVideoMeta's API GType."""
    if not _meta_api:
        _meta_api.append(int(libs()[1].gst_video_meta_api_get_type()))
    return _meta_api[0]


def video_meta_ptr(buf: int) -> int:
    """The buffer's GstVideoMeta* (0: none)."""
    return int(libs()[0].gst_buffer_get_meta(buf, video_meta_api()) or 0)


def video_meta(buf: int) -> VideoLayout | None:
    """The buffer's GstVideoMeta (the producer's true plane offsets and strides), or None."""
    return video_meta_at(video_meta_ptr(buf))


def video_meta_at(p: int) -> VideoLayout | None:
    """The layout a GstVideoMeta* gives (None for 0)."""
    if not p:
        return None
    m = GstVideoMeta.from_address(p)
    n = min(int(m.n_planes), GST_VIDEO_MAX_PLANES)
    return VideoLayout(format_name(m.format), int(m.width), int(m.height), tuple(m.offset)[:n], tuple(m.stride)[:n])


def add_video_meta(buf: int, fmt: str, width: int, height: int, offsets: list[int], strides: list[int]) -> None:
    """Attach a GstVideoMeta with explicit plane offsets and strides (padded pitches, planes in several memories)."""
    v = libs()[1]
    n = len(offsets)
    offs = (_sz * GST_VIDEO_MAX_PLANES)(*offsets)
    strs = (_int * GST_VIDEO_MAX_PLANES)(*strides)
    if not v.gst_buffer_add_video_meta_full(buf, 0, format_code(fmt), width, height, n, offs, strs):
        raise InvalidTensorError(f"GStreamer refused a {fmt} {width}x{height} video meta")


# ---- host memory wrapped as GstMemory --------------------------------------------------------------------

_kept: dict[int, object] = {}
_next_key = [1]


def _forget_kept(key: int, _kept: dict[int, object] = _kept) -> Any:
    kept = _kept.pop(key, None)
    # dropped after the lock is let go: its finalisers (an fd closed, a pool slot back) may take other locks
    return lambda: kept


def _release_kept(key: int | None, _kept: dict[int, object] = _kept, _lock: Any = _lock,
                  _exiting: list[bool] = _exiting, _forget_kept: Any = _forget_kept) -> None:
    # GStreamer calls this from whichever thread frees the memory; ctypes takes the GIL for it. Its globals are
    # bound as defaults: it may run during module teardown. From the exit on it drops nothing (exit rule: what it
    # would drop may be a pool slot another thread takes, or an fd number it reuses).
    if _exiting[0]:
        return
    _lock.call(_forget_kept, int(key or 0), _kept)


_release_cb = DESTROY_NOTIFY(_release_kept)  # GStreamer may call it as long as the process lives
# what GStreamer's memories point into, and the callback that lets go of it: never freed by module teardown
_immortal(_kept, _release_cb, _release_kept, _forget_kept)


def live_wrapped() -> int:
    """Host memories wrapped as GstMemory that GStreamer has not freed yet."""
    return len(_kept)


def append_host_memory(buf: int, address: int, size: int, keep: object, readonly: bool) -> None:
    """Append ``size`` bytes at ``address`` to ``buf`` as a GstMemory, without copying. ``keep`` (which owns the
    memory) stays referenced until GStreamer frees that memory (its destroy notify)."""
    g = libs()[0]
    with _lock:
        key = _next_key[0]
        _next_key[0] += 1
        _kept[key] = keep
    mem = g.gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY if readonly else 0, address, size, 0, size, key,
                                   _release_cb)
    if not mem:
        _release_kept(key)
        raise InvalidTensorError(f"GStreamer refused to wrap {size} bytes at {address:#x}")
    g.gst_buffer_append_memory(buf, mem)  # takes the memory's reference


# ---- fd / dma-buf memory (libgstallocators-1.0) ----------------------------------------------------------

GST_FD_MEMORY_FLAG_DONT_CLOSE = 1 << 2
_alloc_libs: list[Any] = []
_allocators: dict[str, int] = {}


def allocators_lib() -> Any:
    """libgstallocators-1.0 with the fd/dma-buf signatures set; loaded once."""
    if _alloc_libs:
        return _alloc_libs[0]
    libs()
    with _lock:
        if not _alloc_libs:
            a = _load("gstallocators-1.0")
            _sig(a, "gst_is_fd_memory", _bool, _vp)
            _sig(a, "gst_is_dmabuf_memory", _bool, _vp)
            _sig(a, "gst_fd_memory_get_fd", _int, _vp)
            _sig(a, "gst_fd_allocator_new", _vp)
            _sig(a, "gst_fd_allocator_alloc", _vp, _vp, _int, _sz, _int)
            _sig(a, "gst_dmabuf_allocator_new", _vp)
            _sig(a, "gst_dmabuf_allocator_alloc_with_flags", _vp, _vp, _int, _sz, _int)
            _alloc_libs.append(a)
    return _alloc_libs[0]


def fd_of_memory(mem: int) -> int | None:
    """The fd under a GstFdMemory/GstDmaBufMemory (GStreamer's, not a dup), or None for other memory."""
    a = allocators_lib()
    if not a.gst_is_fd_memory(mem):
        return None
    fd = int(a.gst_fd_memory_get_fd(mem))
    return fd if fd >= 0 else None


def is_dmabuf_memory(mem: int) -> bool:
    return bool(allocators_lib().gst_is_dmabuf_memory(mem))


def _allocator(kind: str) -> int:
    a = allocators_lib()
    with _lock:
        p = _allocators.get(kind)
        if p is None:
            # kept for the process's life: GStreamer allocators are singletons in practice
            p = _allocators[kind] = int((a.gst_dmabuf_allocator_new() if kind == "dmabuf" else
                                         a.gst_fd_allocator_new()) or 0)
    if not p:
        raise InvalidTensorError(f"GStreamer could not make a {kind} allocator")
    return p


def append_fd_memory(buf: int, fd: int, size: int, keep: object, dmabuf: bool, readonly: bool = False) -> int:
    """Append a GstFdMemory (GstDmaBufMemory when ``dmabuf``) over ``fd`` to ``buf`` and return it; ``readonly``
    flags it GST_MEMORY_FLAG_READONLY (GStreamer then refuses to map it for writing).

    ``fd`` must be a dup the caller hands over: GStreamer gets it with DONT_CLOSE and interop closes it (and drops
    ``keep``, e.g. the DMA frame and so its pool slot) when GStreamer frees the memory (a qdata destroy notify)."""
    g, a = libs()[0], allocators_lib()
    alloc = _allocator("dmabuf" if dmabuf else "fd")
    if dmabuf:
        mem = a.gst_dmabuf_allocator_alloc_with_flags(alloc, fd, size, GST_FD_MEMORY_FLAG_DONT_CLOSE)
    else:
        mem = a.gst_fd_allocator_alloc(alloc, fd, size, GST_FD_MEMORY_FLAG_DONT_CLOSE)
    if not mem:
        raise InvalidTensorError(f"GStreamer refused to wrap fd {fd} ({size} bytes) as fd memory")
    if readonly:  # GST_MINI_OBJECT_FLAG_SET is a macro: set the flag in the new memory nobody else holds yet
        _c.c_uint.from_address(mem + MINI_OBJECT_FLAGS_OFFSET).value |= GST_MEMORY_FLAG_READONLY
    with _lock:
        key = _next_key[0]
        _next_key[0] += 1
        _kept[key] = (keep, _FdCloser(fd))
    g.gst_mini_object_set_qdata(mem, _quark(), key, _release_cb)
    g.gst_buffer_append_memory(buf, mem)  # takes the memory's reference
    return int(mem)


class _FdCloser:
    """Closes the fd it holds when dropped (from GStreamer's destroy notify, on whichever thread frees the memory).

    Never at interpreter exit (exit rule: GStreamer may still use the fd, and a closed number is soon another
    file's); never raises."""

    __slots__ = ("fd",)
    # bound at class creation: a finaliser may run during module teardown, when this module's globals are None
    _close = staticmethod(_os.close)
    _exiting = _exiting

    def __init__(self, fd: int):
        self.fd = fd

    def __del__(self) -> None:
        if self._exiting[0]:
            return
        try:
            self._close(self.fd)
        except Exception:  # never raise from a finaliser
            pass


_quarks: list[int] = []


def _quark() -> int:
    if not _quarks:
        glib = _load("glib-2.0")
        _sig(glib, "g_quark_from_static_string", _uint, _c.c_char_p)
        _quarks.append(int(glib.g_quark_from_static_string(b"interop-keep")))
    return _quarks[0]


# ---- ALLOCATION query answer (pad probe) ------------------------------------------------------------------

PROBE_CB = _c.CFUNCTYPE(_int, _vp, _vp, _vp)
GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM = 1 << 9
GST_PAD_PROBE_OK = 1
GST_QUERY_ALLOCATION = (140 << 8) | 6  # GST_QUERY_MAKE_TYPE (140, DOWNSTREAM | SERIALIZED)
_QUERY_TYPE_OFFSET = 64  # GstQuery: a GstMiniObject (64 bytes on LP64), then GstQueryType
_PROBE_DATA_OFFSET = 16  # GstPadProbeInfo: type (int), id (gulong), then data


def _on_query(pad: int | None, info: int | None, user_data: int | None, _exiting: list[bool] = _exiting) -> int:
    # runs on a streaming thread; ctypes holds the GIL for it. Only reads/extends the query (refcount 1 here:
    # no Python wrapper takes a reference, so the query stays writable). From the exit on it answers nothing:
    # the module may be torn down under it
    if _exiting[0]:
        return 1  # GST_PAD_PROBE_OK
    try:
        q = _c.c_void_p.from_address(int(info or 0) + _PROBE_DATA_OFFSET).value
        if q and _c.c_int.from_address(q + _QUERY_TYPE_OFFSET).value == GST_QUERY_ALLOCATION:
            g, v = libs()
            api = v.gst_video_meta_api_get_type()
            if not g.gst_query_find_allocation_meta(q, api, None):
                g.gst_query_add_allocation_meta(q, api, None)
    except Exception:  # never raise into GStreamer's thread
        _log_failure("interop's ALLOCATION query answer failed")
    return GST_PAD_PROBE_OK


_probe_cb = PROBE_CB(_on_query)  # GStreamer may call it as long as a pipeline lives
_immortal(_probe_cb, _on_query)


def offer_video_meta(element: Any, pad_name: str = "sink") -> None:
    """Answer the ALLOCATION queries reaching ``element``'s ``pad_name`` pad with GstVideoMeta support, so that
    upstream (decoders) may hand over buffers with padded strides instead of copying into tight ones.

    PyGObject cannot do this: its wrapper of the query takes a reference, which makes the query read-only."""
    g = libs()[0]
    pad = g.gst_element_get_static_pad(pointer_of(element, "Gst.Element"), pad_name.encode())
    if not pad:
        raise InvalidTensorError(f"element has no static {pad_name!r} pad")
    try:
        if not g.gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM, _probe_cb, None, None):
            raise InvalidTensorError("GStreamer refused the ALLOCATION query probe")
    finally:
        g.gst_object_unref(pad)


# ---- VA memory (libgstva-1.0, gstreamer1.0-plugins-bad's library) -----------------------------------------

_va_libs: list[Any] = []


def va_lib() -> Any:
    """libgstva-1.0 with the signatures interop uses; loaded once (BackendUnavailableError when it is missing)."""
    if _va_libs:
        return _va_libs[0]
    libs()
    with _lock:
        if not _va_libs:
            try:
                a = _c.CDLL("libgstva-1.0.so.0")
            except OSError as e:
                raise BackendUnavailableError(
                    f"GStreamer's VA library libgstva-1.0.so.0 cannot be loaded ({e}): install "
                    f"libgstreamer-plugins-bad1.0-0 (tests/prepare.d/gstreamer.sh)", backend="gst", extra="gst") from e
            _sig(a, "gst_va_memory_get_surface", _uint, _vp)
            _sig(a, "gst_va_memory_peek_display", _vp, _vp)
            _sig(a, "gst_va_display_get_va_dpy", _vp, _vp)
            _sig(a, "gst_va_display_wrapped_new", _vp, _vp)
            _sig(a, "gst_va_allocator_new", _vp, _vp, _vp)
            _sig(a, "gst_va_allocator_set_format", _bool, _vp, _vp, _uint, _int)
            _sig(a, "gst_va_allocator_setup_buffer", _bool, _vp, _vp)
            _va_libs.append(a)
    return _va_libs[0]


VA_INVALID_SURFACE = 0xFFFFFFFF


def va_surface_of(mem: int) -> tuple[int, int] | None:
    """(VASurfaceID, VADisplay) of a GstVaMemory, or None for other memory."""
    if not memory_is_type(mem, "VAMemory"):
        return None
    a = va_lib()
    sid = int(a.gst_va_memory_get_surface(mem))
    disp = a.gst_va_memory_peek_display(mem)
    dpy = int(a.gst_va_display_get_va_dpy(disp) or 0) if disp else 0
    if sid == VA_INVALID_SURFACE or not dpy:
        return None
    return sid, dpy


def va_display_wrapped(va_display: int) -> int:
    """A GstVaDisplay over an existing, initialised VADisplay (which must outlive it); a new reference."""
    p = va_lib().gst_va_display_wrapped_new(va_display)
    if not p:
        raise InvalidTensorError(f"GStreamer could not wrap VADisplay {va_display:#x}")
    return int(p)


def va_allocator(gst_va_display: int, caps: int) -> int:
    """A GstVaAllocator making surfaces for raw-video ``caps`` (a GstCaps*) on ``gst_va_display``; a new reference.
    (gst_va_allocator_set_format answers FALSE on drivers that cannot derive an image, yet the allocator is set.)"""
    a, v = va_lib(), libs()[1]
    alloc = a.gst_va_allocator_new(gst_va_display, None)
    if not alloc:
        raise InvalidTensorError("GStreamer could not make a VA allocator")
    vi = v.gst_video_info_new()
    try:
        if not v.gst_video_info_from_caps(vi, caps):
            raise InvalidTensorError("these caps are not raw video")
        a.gst_va_allocator_set_format(alloc, vi, 0, 0)
    finally:
        v.gst_video_info_free(vi)
    return int(alloc)


def va_setup_buffer(allocator: int, buf: int) -> None:
    """Append a new VA memory (a new surface) from ``allocator`` to ``buf``."""
    if not va_lib().gst_va_allocator_setup_buffer(allocator, buf):
        raise InvalidTensorError("GStreamer's VA allocator could not make a surface")


# ---- elements written in Python -----------------------------------------------------------------------------

def set_element_class(type_name: str, metadata: tuple[str, str, str, str],
                      templates: list[tuple[str, int, int, int]]) -> None:
    """Metadata (long name, klass, description, author) and pad templates ((name, direction, presence, caps
    pointer), the caps borrowed) on the class of a GstElement subclass registered by PyGObject: without gst-python's
    overrides PyGObject cannot set them, and decodebin picks decoders by them."""
    g, go = libs()[0], gobject_lib()
    klass = go.g_type_class_ref(go.g_type_from_name(type_name.encode()))
    if not klass:
        raise InvalidTensorError(f"no GType named {type_name!r}")
    g.gst_element_class_set_metadata(klass, *(m.encode() for m in metadata))
    for name, direction, presence, caps in templates:
        g.gst_element_class_add_pad_template(klass, g.gst_pad_template_new(name.encode(), direction, presence, caps))


def buffer_extract(buf: int, address: int, size: int) -> int:
    """Copy the first ``size`` bytes of a GstBuffer to ``address``; returns how many were copied."""
    return int(libs()[0].gst_buffer_extract(buf, 0, address, size))


# ---- decoder output buffers, assembled with the GIL held (interopdec) -----------------------------------------
# A ctypes CDLL call releases the GIL and takes it back; with another Python thread busy, each take-back waits for
# that thread to let go (sys.getswitchinterval()). The calls below go through ctypes.PyDLL, which keeps the GIL, so
# a frame's buffer is built without letting go of it once; only the push lets it go. The rule for a function called
# through PyDLL: it takes no lock (mutex, object lock, g_once) that another thread may hold while it waits for the
# GIL. GStreamer runs destroy notifies, probes and signal handlers (PyGObject's take the GIL) with locks held: a pad's
# object lock while it removes a probe, for one. So no pad, element or bus function belongs here (the pad's
# RECONFIGURE flag is read through PyGObject, which lets go of the GIL); these only allocate (gst_buffer_new,
# gst_memory_new_wrapped), touch a buffer no other thread has seen yet (append_memory, add_video_meta_full, whose
# meta info is registered once and never calls out), read the input buffer's fields (get_size, n_memory,
# peek_memory, memory_is_type) or copy system memory (extract, only when every memory is SystemMemory, whose map
# takes no lock); gst_mini_object_unref on the error path runs the memories' destroy notifies on this thread, which
# already holds the GIL.

_held_libs: list[tuple[Any, Any]] = []


def _held() -> tuple[Any, Any]:
    """(libgstreamer-1.0, libgstvideo-1.0) through ctypes.PyDLL (the GIL is kept during calls); loaded once."""
    if _held_libs:
        return _held_libs[0]
    if not _LP64:
        raise BackendUnavailableError(
            "interop writes GstBuffer's fields at their LP64 offsets, and this Python is not a 64-bit (LP64) build: "
            "use a 64-bit Linux Python, or avdec_* instead of interopdec", backend="gst", extra="gst")
    libs()
    with _lock:
        if not _held_libs:
            g, v = _load("gstreamer-1.0"), _load("gstvideo-1.0")
            g, v = _c.PyDLL(g._name), _c.PyDLL(v._name)
            _sig(g, "gst_buffer_new", _vp)
            _sig(g, "gst_memory_new_wrapped", _vp, _int, _vp, _sz, _sz, _sz, _vp, DESTROY_NOTIFY)
            _sig(g, "gst_buffer_append_memory", None, _vp, _vp)
            _sig(g, "gst_mini_object_unref", None, _vp)
            _sig(g, "gst_buffer_get_size", _sz, _vp)
            _sig(g, "gst_buffer_n_memory", _uint, _vp)
            _sig(g, "gst_buffer_peek_memory", _vp, _vp, _uint)
            _sig(g, "gst_memory_is_type", _bool, _vp, _c.c_char_p)
            _sig(g, "gst_buffer_extract", _sz, _vp, _sz, _vp, _sz)
            _sig(v, "gst_buffer_add_video_meta_full", _vp, _vp, _int, _int, _uint, _uint, _uint,
                 _c.POINTER(_sz), _c.POINTER(_int))
            _held_libs.append((g, v))
    return _held_libs[0]


def video_frame_buffer(planes: list[tuple[int, int]], keep: object, fmt: int, width: int, height: int,
                       strides: list[int] | None, pts: int, duration: int, flags: int) -> int:
    """A new GstBuffer (one reference, the caller's: give it to ``pad_push``) of read-only memories wrapping
    ``planes`` ((address, size) each, no copy), ``keep`` referenced until GStreamer frees the last of them; with a
    GstVideoMeta of format code ``fmt`` and these plane ``strides`` (offsets: the planes end to end) unless
    ``strides`` is None; ``pts``/``duration`` in ns (GST_CLOCK_TIME_NONE: unknown) and ``flags`` (GstBufferFlags)
    set. The GIL is held throughout (see above)."""
    g, v = _held()
    with _lock:
        first = _next_key[0]
        _next_key[0] += len(planes)
        for k in range(first, first + len(planes)):
            _kept[k] = keep
    buf = g.gst_buffer_new()
    key = first
    try:
        if not buf:
            raise ResourceError("GStreamer could not allocate a buffer")
        offsets = []
        pos = 0
        for address, size in planes:
            mem = g.gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, address, size, 0, size, key, _release_cb)
            if not mem:
                raise InvalidTensorError(f"GStreamer refused to wrap {size} bytes at {address:#x}")
            key += 1  # from here on the memory's destroy notify lets go of its key
            g.gst_buffer_append_memory(buf, mem)
            offsets.append(pos)
            pos += size
        if strides is not None:
            n = len(planes)
            offs = (_sz * GST_VIDEO_MAX_PLANES)(*offsets)
            strs = (_int * GST_VIDEO_MAX_PLANES)(*strides)
            if not v.gst_buffer_add_video_meta_full(buf, 0, fmt, width, height, n, offs, strs):
                raise InvalidTensorError(f"GStreamer refused a {format_name(fmt)} {width}x{height} video meta")
        _c.c_uint64.from_address(buf + BUFFER_PTS_OFFSET).value = pts
        _c.c_uint64.from_address(buf + BUFFER_DURATION_OFFSET).value = duration
        _c.c_uint.from_address(buf + MINI_OBJECT_FLAGS_OFFSET).value |= flags
    except BaseException:
        for k in range(key, first + len(planes)):
            _release_kept(k)
        if buf:
            g.gst_mini_object_unref(buf)
        raise
    return int(buf)


_push_lib: list[Any] = []


def pad_push(pad: int, buf: int) -> int:
    """gst_pad_push: gives ``buf``'s reference to the pad; the GstFlowReturn. The GIL is let go meanwhile."""
    if not _push_lib:
        g = libs()[0]
        _sig(g, "gst_pad_push", _int, _vp, _vp)
        _push_lib.append(g)
    return int(_push_lib[0].gst_pad_push(pad, buf))


def query_has_allocation_meta(query: int, api: int) -> bool:
    """Whether an ALLOCATION query (GstQuery*) lists the meta API ``api`` (a GType, e.g. ``video_meta_api()``)."""
    return bool(libs()[0].gst_query_find_allocation_meta(query, api, None))


def coded_buffer_size(buf: int) -> int:
    """``buffer_size`` with the GIL kept (it reads the memories' sizes, no lock): for a decoder's compressed input."""
    return int(_held()[0].gst_buffer_get_size(buf))


def coded_buffer_extract(buf: int, address: int, size: int) -> int:
    """``buffer_extract`` for a decoder's compressed input: with the GIL kept where every memory is system memory (a
    memcpy, no lock), else through ``buffer_extract`` (another allocator's map may lock or wait)."""
    g = _held()[0]
    if not all(g.gst_memory_is_type(g.gst_buffer_peek_memory(buf, i), b"SystemMemory")
               for i in range(int(g.gst_buffer_n_memory(buf)))):
        return buffer_extract(buf, address, size)
    return int(g.gst_buffer_extract(buf, 0, address, size))
