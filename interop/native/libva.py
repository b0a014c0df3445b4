"""ctypes bindings to the system libva (libva.so.2, libva-drm.so.2, libva-x11.so.2): the calls interop needs.

Displays come from a DRM render node (``vaGetDisplayDRM``) or, for tests, an X11 display (``vaGetDisplay``), and
are initialised at once. Surfaces are plain ``int`` ids (``VASurfaceID``), never pointers to them. Import and
export use DRM PRIME 2 descriptors (per-object fds with 64-bit format modifiers, per-plane offsets and pitches);
the legacy DRM PRIME import (``VASurfaceAttribExternalBuffers``) is there for drivers without PRIME 2 import.
Every failing call raises :class:`VAError` carrying the status, the function and ``vaErrorStr``'s text.

Structures are checked field by field against the real headers (tests/fakes/va/layout.c). Nothing here is
imported by ``import interop``; libva itself is loaded on first use.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendUnavailableError, InteropError, InvalidTensorError, UnsupportedFormatError

# ---- constants (va.h, va_drmcommon.h of libva 2.17; the layout test compares them with the headers) ----------

VA_STATUS_SUCCESS = 0x00000000
VA_STATUS_ERROR_OPERATION_FAILED = 0x00000001
VA_STATUS_ERROR_ALLOCATION_FAILED = 0x00000002
VA_STATUS_ERROR_INVALID_SURFACE = 0x00000006
VA_STATUS_ERROR_INVALID_PARAMETER = 0x00000012
VA_STATUS_ERROR_SURFACE_BUSY = 0x00000010
VA_STATUS_ERROR_ATTR_NOT_SUPPORTED = 0x0000000A
VA_STATUS_ERROR_UNIMPLEMENTED = 0x00000014
VA_STATUS_ERROR_INVALID_IMAGE_FORMAT = 0x00000016
VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE = 0x00000024
VA_STATUS_ERROR_UNKNOWN = 0xFFFFFFFF

VA_INVALID_ID = 0xFFFFFFFF

VA_RT_FORMAT_YUV420 = 0x00000001
VA_RT_FORMAT_YUV420_10 = 0x00000100
VA_RT_FORMAT_RGB32 = 0x00020000


def fourcc(code: str) -> int:
    """The little-endian fourcc of a 4-character code (VA and DRM use the same packing)."""
    if len(code) != 4:
        raise ValueError(f"a fourcc has 4 characters, not {code!r}")
    b = code.encode("ascii")
    return b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24


def fourcc_str(value: int) -> str:
    """'NV12' for 0x3231564E; unprintable codes as hex."""
    chars = bytes((value >> s) & 0xFF for s in (0, 8, 16, 24))
    return chars.decode("ascii") if all(32 <= c < 127 for c in chars) else f"0x{value:08x}"


VA_FOURCC_NV12 = fourcc("NV12")
VA_FOURCC_I420 = fourcc("I420")
VA_FOURCC_YV12 = fourcc("YV12")
VA_FOURCC_P010 = fourcc("P010")
VA_FOURCC_BGRX = fourcc("BGRX")
VA_FOURCC_BGRA = fourcc("BGRA")
VA_FOURCC_RGBX = fourcc("RGBX")
VA_FOURCC_RGBA = fourcc("RGBA")

#: VA fourcc -> render-target format for vaCreateSurfaces
RT_FORMAT = {VA_FOURCC_NV12: VA_RT_FORMAT_YUV420, VA_FOURCC_I420: VA_RT_FORMAT_YUV420, VA_FOURCC_YV12: VA_RT_FORMAT_YUV420,
             VA_FOURCC_P010: VA_RT_FORMAT_YUV420_10, VA_FOURCC_BGRX: VA_RT_FORMAT_RGB32, VA_FOURCC_BGRA: VA_RT_FORMAT_RGB32,
             VA_FOURCC_RGBX: VA_RT_FORMAT_RGB32, VA_FOURCC_RGBA: VA_RT_FORMAT_RGB32}

# VAGenericValueType
VAGenericValueTypeInteger = 1
VAGenericValueTypeFloat = 2
VAGenericValueTypePointer = 3
VAGenericValueTypeFunc = 4

# VASurfaceAttribType
VASurfaceAttribNone = 0
VASurfaceAttribPixelFormat = 1
VASurfaceAttribMinWidth = 2
VASurfaceAttribMaxWidth = 3
VASurfaceAttribMinHeight = 4
VASurfaceAttribMaxHeight = 5
VASurfaceAttribMemoryType = 6
VASurfaceAttribExternalBufferDescriptor = 7
VASurfaceAttribUsageHint = 8
VASurfaceAttribDRMFormatModifiers = 9

VA_SURFACE_ATTRIB_GETTABLE = 0x00000001
VA_SURFACE_ATTRIB_SETTABLE = 0x00000002

VA_SURFACE_ATTRIB_MEM_TYPE_VA = 0x00000001
VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME = 0x20000000
VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2 = 0x40000000

VA_SURFACE_EXTBUF_DESC_ENABLE_TILING = 0x00000001

VA_EXPORT_SURFACE_READ_ONLY = 0x0001
VA_EXPORT_SURFACE_WRITE_ONLY = 0x0002
VA_EXPORT_SURFACE_READ_WRITE = 0x0003
VA_EXPORT_SURFACE_SEPARATE_LAYERS = 0x0004
VA_EXPORT_SURFACE_COMPOSED_LAYERS = 0x0008

# VASurfaceStatus
VASurfaceRendering = 1
VASurfaceDisplaying = 2
VASurfaceReady = 4
VASurfaceSkipped = 8

DRM_FORMAT_MOD_LINEAR = 0
DRM_FORMAT_MOD_INVALID = 0x00FFFFFFFFFFFFFF

# ---- structures -------------------------------------------------------------------------------------------------

VAStatus = ctypes.c_int
VADisplay = ctypes.c_void_p
VASurfaceID = ctypes.c_uint32
VAImageID = ctypes.c_uint32
VABufferID = ctypes.c_uint32


class _GenericValueUnion(ctypes.Union):
    _fields_ = [("i", ctypes.c_int32), ("f", ctypes.c_float), ("p", ctypes.c_void_p), ("fn", ctypes.c_void_p)]


class VAGenericValue(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("value", _GenericValueUnion)]


class VASurfaceAttrib(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("flags", ctypes.c_uint32), ("value", VAGenericValue)]


class VASurfaceAttribExternalBuffers(ctypes.Structure):
    _fields_ = [("pixel_format", ctypes.c_uint32), ("width", ctypes.c_uint32), ("height", ctypes.c_uint32),
                ("data_size", ctypes.c_uint32), ("num_planes", ctypes.c_uint32), ("pitches", ctypes.c_uint32 * 4),
                ("offsets", ctypes.c_uint32 * 4), ("buffers", ctypes.POINTER(ctypes.c_size_t)),
                ("num_buffers", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("private_data", ctypes.c_void_p)]


class VADRMPRIMEObject(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("size", ctypes.c_uint32), ("drm_format_modifier", ctypes.c_uint64)]


class VADRMPRIMELayer(ctypes.Structure):
    _fields_ = [("drm_format", ctypes.c_uint32), ("num_planes", ctypes.c_uint32), ("object_index", ctypes.c_uint32 * 4),
                ("offset", ctypes.c_uint32 * 4), ("pitch", ctypes.c_uint32 * 4)]


class VADRMPRIMESurfaceDescriptor(ctypes.Structure):
    _fields_ = [("fourcc", ctypes.c_uint32), ("width", ctypes.c_uint32), ("height", ctypes.c_uint32),
                ("num_objects", ctypes.c_uint32), ("objects", VADRMPRIMEObject * 4), ("num_layers", ctypes.c_uint32),
                ("layers", VADRMPRIMELayer * 4)]


class VADRMFormatModifierList(ctypes.Structure):
    _fields_ = [("num_modifiers", ctypes.c_uint32), ("modifiers", ctypes.POINTER(ctypes.c_uint64))]


class VAImageFormat(ctypes.Structure):
    _fields_ = [("fourcc", ctypes.c_uint32), ("byte_order", ctypes.c_uint32), ("bits_per_pixel", ctypes.c_uint32),
                ("depth", ctypes.c_uint32), ("red_mask", ctypes.c_uint32), ("green_mask", ctypes.c_uint32),
                ("blue_mask", ctypes.c_uint32), ("alpha_mask", ctypes.c_uint32), ("va_reserved", ctypes.c_uint32 * 4)]


class VAImage(ctypes.Structure):
    _fields_ = [("image_id", VAImageID), ("format", VAImageFormat), ("buf", VABufferID), ("width", ctypes.c_uint16),
                ("height", ctypes.c_uint16), ("data_size", ctypes.c_uint32), ("num_planes", ctypes.c_uint32),
                ("pitches", ctypes.c_uint32 * 3), ("offsets", ctypes.c_uint32 * 3),
                ("num_palette_entries", ctypes.c_int32), ("entry_bytes", ctypes.c_int32),
                ("component_order", ctypes.c_int8 * 4), ("va_reserved", ctypes.c_uint32 * 4)]


#: every Structure of this module, for the layout test
STRUCTURES: dict[str, type[ctypes.Structure]] = {
    "VAGenericValue": VAGenericValue, "VASurfaceAttrib": VASurfaceAttrib,
    "VASurfaceAttribExternalBuffers": VASurfaceAttribExternalBuffers,
    "VADRMPRIMESurfaceDescriptor": VADRMPRIMESurfaceDescriptor, "VADRMFormatModifierList": VADRMFormatModifierList,
    "VAImageFormat": VAImageFormat, "VAImage": VAImage,
}

# ---- errors -----------------------------------------------------------------------------------------------------


class VAError(InteropError):
    """A libva call failed. ``status`` is the VAStatus (unsigned), ``function`` the call."""

    def __init__(self, function: str, status: int, detail: str = ""):
        self.function = function
        self.status = status & 0xFFFFFFFF
        text = error_str(self.status)
        super().__init__(f"{function} failed: {text} (VAStatus 0x{self.status:x}){': ' + detail if detail else ''}")


# ---- library loading ----------------------------------------------------------------------------------------

_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}

_INSTALL = "install libva (Debian/Ubuntu: apt-get install libva2 libva-drm2; a driver such as intel-media-va-driver)"


def _load(name: str) -> ctypes.CDLL:
    lib = _libs.get(name)
    if lib is not None:  # loaded: no lock (finalisers call this, maybe while this thread loads another library)
        return lib
    with _lock:
        lib = _libs.get(name)
        if lib is None:
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                raise BackendUnavailableError(f"cannot load {name} ({e}): {_INSTALL}", backend="vaapi") from e
            _declare(name, lib)
            _libs[name] = lib
        return lib


def _fn(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


def _declare(name: str, lib: ctypes.CDLL) -> None:
    P = ctypes.POINTER
    if name == "libva.so.2":
        _fn(lib, "vaErrorStr", ctypes.c_char_p, VAStatus)
        _fn(lib, "vaInitialize", VAStatus, VADisplay, P(ctypes.c_int), P(ctypes.c_int))
        _fn(lib, "vaTerminate", VAStatus, VADisplay)
        _fn(lib, "vaQueryVendorString", ctypes.c_char_p, VADisplay)
        _fn(lib, "vaDisplayIsValid", ctypes.c_int, VADisplay)
        _fn(lib, "vaCreateSurfaces", VAStatus, VADisplay, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, P(VASurfaceID),
            ctypes.c_uint, P(VASurfaceAttrib), ctypes.c_uint)
        _fn(lib, "vaDestroySurfaces", VAStatus, VADisplay, P(VASurfaceID), ctypes.c_int)
        _fn(lib, "vaExportSurfaceHandle", VAStatus, VADisplay, VASurfaceID, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)
        _fn(lib, "vaSyncSurface", VAStatus, VADisplay, VASurfaceID)
        _fn(lib, "vaQuerySurfaceStatus", VAStatus, VADisplay, VASurfaceID, P(ctypes.c_int))
        _fn(lib, "vaDeriveImage", VAStatus, VADisplay, VASurfaceID, P(VAImage))
        _fn(lib, "vaDestroyImage", VAStatus, VADisplay, VAImageID)
        _fn(lib, "vaMapBuffer", VAStatus, VADisplay, VABufferID, P(ctypes.c_void_p))
        _fn(lib, "vaUnmapBuffer", VAStatus, VADisplay, VABufferID)
        _fn(lib, "vaSetErrorCallback", ctypes.c_void_p, VADisplay, ctypes.c_void_p, ctypes.c_void_p)
        _fn(lib, "vaSetInfoCallback", ctypes.c_void_p, VADisplay, ctypes.c_void_p, ctypes.c_void_p)
    elif name == "libva-drm.so.2":
        _fn(lib, "vaGetDisplayDRM", VADisplay, ctypes.c_int)
    elif name == "libva-x11.so.2":
        _fn(lib, "vaGetDisplay", VADisplay, ctypes.c_void_p)
    elif name == "libX11.so.6":
        _fn(lib, "XOpenDisplay", ctypes.c_void_p, ctypes.c_char_p)
        _fn(lib, "XCloseDisplay", ctypes.c_int, ctypes.c_void_p)


def libva() -> ctypes.CDLL:
    """The loaded libva.so.2 (BackendUnavailableError naming the package when it is missing)."""
    return _load("libva.so.2")


def available() -> str | None:
    """None when libva.so.2 loads here, else why not."""
    try:
        libva()
        _load("libva-drm.so.2")
    except BackendUnavailableError as e:
        return str(e)
    return None


def error_str(status: int) -> str:
    """vaErrorStr's text for a status (works without a display)."""
    try:
        s = libva().vaErrorStr(ctypes.c_int(ctypes.c_uint32(status).value).value)
    except BackendUnavailableError:
        return "libva not loaded"
    return s.decode(errors="replace") if s else "unknown libva error"


def _check(function: str, status: int, detail: str = "") -> None:
    if status != VA_STATUS_SUCCESS:
        raise VAError(function, status, detail)


# ---- descriptors (Python side of VADRMPRIMESurfaceDescriptor, with 64-bit modifiers kept whole) -------------------


@dataclass(frozen=True)
class PrimeObject:
    """One DRM object of a surface: a dma-buf fd, its size and its 64-bit format modifier."""

    fd: int
    size: int
    modifier: int = DRM_FORMAT_MOD_LINEAR


@dataclass(frozen=True)
class PrimePlane:
    """One plane: which object holds it, where it starts in that object and its row pitch, in bytes."""

    object_index: int
    offset: int
    pitch: int


@dataclass(frozen=True)
class PrimeLayer:
    """One layer: a DRM format (fourcc) and its planes."""

    drm_format: int
    planes: tuple[PrimePlane, ...]


@dataclass
class PrimeDescriptor:
    """A surface as DRM PRIME 2 objects and layers (what vaExportSurfaceHandle gives and PRIME 2 import takes).

    From :meth:`Display.export_prime2` the fds are new and owned by this descriptor: take them (``take_fds``) or
    ``close()`` it. For import the fds stay the caller's; the driver keeps its own reference.
    """

    fourcc: int
    width: int
    height: int
    objects: list[PrimeObject]
    layers: list[PrimeLayer]
    owns_fds: bool = False
    _closed: bool = field(default=False, repr=False)

    @property
    def planes(self) -> list[PrimePlane]:
        """Every plane of every layer, in order."""
        return [p for layer in self.layers for p in layer.planes]

    def close(self) -> None:
        """Close the fds this descriptor owns (exported ones). Idempotent."""
        if self.owns_fds and not self._closed:
            self._closed = True
            for o in self.objects:
                try:
                    os.close(o.fd)
                except OSError:
                    pass

    def to_c(self) -> VADRMPRIMESurfaceDescriptor:
        if not 1 <= len(self.objects) <= 4 or not 1 <= len(self.layers) <= 4:
            raise InteropError(f"a PRIME 2 descriptor has 1-4 objects and 1-4 layers, not {len(self.objects)} and {len(self.layers)}")
        d = VADRMPRIMESurfaceDescriptor(fourcc=self.fourcc, width=self.width, height=self.height,
                                        num_objects=len(self.objects), num_layers=len(self.layers))
        for i, o in enumerate(self.objects):
            d.objects[i].fd = o.fd
            d.objects[i].size = o.size
            d.objects[i].drm_format_modifier = o.modifier
        for i, layer in enumerate(self.layers):
            if not 1 <= len(layer.planes) <= 4:
                raise InteropError(f"a PRIME 2 layer has 1-4 planes, not {len(layer.planes)}")
            c = d.layers[i]
            c.drm_format = layer.drm_format
            c.num_planes = len(layer.planes)
            for j, p in enumerate(layer.planes):
                if not 0 <= p.object_index < len(self.objects):
                    raise InteropError(f"plane {j} of layer {i} names object {p.object_index}, there are {len(self.objects)}")
                c.object_index[j] = p.object_index
                c.offset[j] = p.offset
                c.pitch[j] = p.pitch
        return d

    @classmethod
    def from_c(cls, d: VADRMPRIMESurfaceDescriptor, *, owns_fds: bool) -> PrimeDescriptor:
        objects = [PrimeObject(int(d.objects[i].fd), int(d.objects[i].size), int(d.objects[i].drm_format_modifier))
                   for i in range(min(int(d.num_objects), 4))]
        layers = []
        for i in range(min(int(d.num_layers), 4)):
            c = d.layers[i]
            layers.append(PrimeLayer(int(c.drm_format), tuple(PrimePlane(int(c.object_index[j]), int(c.offset[j]), int(c.pitch[j]))
                                                             for j in range(min(int(c.num_planes), 4)))))
        return cls(int(d.fourcc), int(d.width), int(d.height), objects, layers, owns_fds=owns_fds)


@dataclass(frozen=True)
class ImageInfo:
    """A VAImage as plain ints: id, its buffer, fourcc, size, data size and per-plane pitches/offsets."""

    image_id: int
    buf: int
    fourcc: int
    width: int
    height: int
    data_size: int
    pitches: tuple[int, ...]
    offsets: tuple[int, ...]


# ---- displays -----------------------------------------------------------------------------------------------------


def _int_attr(kind: int, value: int) -> VASurfaceAttrib:
    a = VASurfaceAttrib(type=kind, flags=VA_SURFACE_ATTRIB_SETTABLE)
    a.value.type = VAGenericValueTypeInteger
    a.value.value.i = ctypes.c_int32(ctypes.c_uint32(value).value).value
    return a


def _ptr_attr(kind: int, obj: ctypes.Structure) -> VASurfaceAttrib:
    a = VASurfaceAttrib(type=kind, flags=VA_SURFACE_ATTRIB_SETTABLE)
    a.value.type = VAGenericValueTypePointer
    a.value.value.p = ctypes.addressof(obj)
    return a


def _terminate(handle: int, fd: int, x11: int) -> None:
    # finaliser: must not refer to the Display object
    try:
        libva().vaTerminate(handle)
    finally:
        if fd >= 0:
            os.close(fd)
        if x11:
            _load("libX11.so.6").XCloseDisplay(x11)


class Display:
    """An initialised VADisplay. ``handle`` is the VADisplay pointer as an int.

    ``close()`` (or the end of a ``with`` block, or garbage collection) calls vaTerminate, which frees every surface
    the display still has; objects built on a display keep it alive. Surface ids are only valid on their display.
    """

    def __init__(self, handle: int, *, device: str, fd: int = -1, x11: int = 0):
        self._fd = fd
        self._x11 = x11
        self.device = device
        self._closed = False
        if not handle:
            if fd >= 0:
                os.close(fd)
            if x11:
                _load("libX11.so.6").XCloseDisplay(x11)
            raise VAError("vaGetDisplay", VA_STATUS_ERROR_UNKNOWN, f"libva gave no display for {device}")
        self.handle = int(handle)
        major, minor = ctypes.c_int(), ctypes.c_int()
        st = libva().vaInitialize(self.handle, ctypes.byref(major), ctypes.byref(minor))
        if st != VA_STATUS_SUCCESS:
            try:
                libva().vaTerminate(self.handle)
            finally:
                if fd >= 0:
                    os.close(fd)
                if x11:
                    _load("libX11.so.6").XCloseDisplay(x11)
            raise VAError("vaInitialize", st, f"on {device} (driver {os.environ.get('LIBVA_DRIVER_NAME', 'chosen by libva')})")
        self.version = (major.value, minor.value)
        v = libva().vaQueryVendorString(self.handle)
        self.vendor = v.decode(errors="replace") if v else ""
        self._finalizer = weakref.finalize(self, _terminate, self.handle, fd, x11)

    # -- opening ------------------------------------------------------------------------------------------------
    @classmethod
    def open_drm(cls, path: str = "/dev/dri/renderD128") -> Display:
        """Open a DRM render node and initialise VA on it (the driver is chosen by libva or LIBVA_DRIVER_NAME)."""
        lib = _load("libva-drm.so.2")
        libva()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise BackendUnavailableError(f"cannot open the DRM render node {path}: {e}", backend="vaapi") from e
        return cls(lib.vaGetDisplayDRM(fd) or 0, device=path, fd=fd)

    @classmethod
    def open_x11(cls, name: str | None = None) -> Display:
        """Initialise VA on an X11 display (used with a fake driver under Xvfb; ``name`` defaults to $DISPLAY)."""
        x = _load("libX11.so.6")
        lib = _load("libva-x11.so.2")
        libva()
        dpy = x.XOpenDisplay(name.encode() if name else None)
        if not dpy:
            raise BackendUnavailableError(f"cannot open the X11 display {name or os.environ.get('DISPLAY')!r}", backend="vaapi")
        return cls(lib.vaGetDisplay(dpy) or 0, device=f"x11:{name or os.environ.get('DISPLAY', '')}", x11=dpy)

    # -- lifetime -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """vaTerminate (frees the display's surfaces) and close the render node. Idempotent."""
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed or not self._finalizer.alive

    def _h(self) -> int:
        if self.closed:
            raise InteropError(f"the VA display {self.device} was closed")
        return self.handle

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<va.Display {self.device} {self.vendor!r}{' closed' if self.closed else ''}>"

    # -- surfaces ---------------------------------------------------------------------------------------------------
    def _create(self, rt_format: int, width: int, height: int, count: int, attribs: list[VASurfaceAttrib], what: str) -> list[int]:
        ids = (VASurfaceID * count)()
        arr = (VASurfaceAttrib * len(attribs))(*attribs) if attribs else None
        st = libva().vaCreateSurfaces(self._h(), rt_format, width, height, ids, count, arr, len(attribs))
        _check("vaCreateSurfaces", st, what)
        return [int(i) for i in ids]

    def create_surfaces(self, width: int, height: int, fourcc: int = VA_FOURCC_NV12, count: int = 1, *,
                        modifiers: Sequence[int] | None = None) -> list[int]:
        """Allocate ``count`` surfaces of a pixel format; ``modifiers`` lists DRM format modifiers the driver may use."""
        if fourcc not in RT_FORMAT:
            raise UnsupportedFormatError(f"no VA render-target format known for fourcc {fourcc_str(fourcc)}")
        attribs = [_int_attr(VASurfaceAttribPixelFormat, fourcc)]
        keep: list[Any] = []
        if modifiers:
            mods = (ctypes.c_uint64 * len(modifiers))(*modifiers)
            ml = VADRMFormatModifierList(num_modifiers=len(modifiers), modifiers=mods)
            keep += [mods, ml]
            attribs.append(_ptr_attr(VASurfaceAttribDRMFormatModifiers, ml))
        return self._create(RT_FORMAT[fourcc], width, height, count, attribs, f"{count} {fourcc_str(fourcc)} {width}x{height}")

    def import_prime2(self, desc: PrimeDescriptor) -> int:
        """Import a DRM PRIME 2 descriptor as a new surface. The fds stay the caller's (the driver takes its own)."""
        if desc.fourcc not in RT_FORMAT:
            raise UnsupportedFormatError(f"no VA render-target format known for fourcc {fourcc_str(desc.fourcc)}")
        c = desc.to_c()
        attribs = [_int_attr(VASurfaceAttribPixelFormat, desc.fourcc),
                   _int_attr(VASurfaceAttribMemoryType, VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2),
                   _ptr_attr(VASurfaceAttribExternalBufferDescriptor, c)]
        return self._create(RT_FORMAT[desc.fourcc], desc.width, desc.height, 1, attribs,
                            f"DRM PRIME 2 import of {fourcc_str(desc.fourcc)} {desc.width}x{desc.height}")[0]

    def import_external(self, fourcc: int, width: int, height: int, fd: int, pitches: Sequence[int],
                        offsets: Sequence[int], data_size: int, *, tiled: bool = False) -> int:
        """Legacy DRM PRIME import (VASurfaceAttribExternalBuffers): every plane in one fd; no modifier can be given."""
        if fourcc not in RT_FORMAT:
            raise UnsupportedFormatError(f"no VA render-target format known for fourcc {fourcc_str(fourcc)}")
        if not 1 <= len(pitches) == len(offsets) <= 4:
            raise InvalidTensorError("give 1-4 pitches and as many offsets (one per plane)")
        bufs = (ctypes.c_size_t * 1)(fd)
        ext = VASurfaceAttribExternalBuffers(pixel_format=fourcc, width=width, height=height, data_size=data_size,
                                             num_planes=len(pitches), buffers=bufs, num_buffers=1,
                                             flags=VA_SURFACE_EXTBUF_DESC_ENABLE_TILING if tiled else 0)
        for i, (p, o) in enumerate(zip(pitches, offsets)):
            ext.pitches[i] = p
            ext.offsets[i] = o
        attribs = [_int_attr(VASurfaceAttribPixelFormat, fourcc),
                   _int_attr(VASurfaceAttribMemoryType, VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME),
                   _ptr_attr(VASurfaceAttribExternalBufferDescriptor, ext)]
        return self._create(RT_FORMAT[fourcc], width, height, 1, attribs,
                            f"DRM PRIME import of {fourcc_str(fourcc)} {width}x{height}")[0]

    def destroy_surfaces(self, ids: Sequence[int]) -> None:
        arr = (VASurfaceID * len(ids))(*ids)
        _check("vaDestroySurfaces", libva().vaDestroySurfaces(self._h(), arr, len(ids)), f"surfaces {list(ids)}")

    def export_prime2(self, surface: int, flags: int = VA_EXPORT_SURFACE_READ_WRITE | VA_EXPORT_SURFACE_COMPOSED_LAYERS) -> PrimeDescriptor:
        """vaExportSurfaceHandle(DRM PRIME 2): new fds owned by the returned descriptor, modifiers as 64-bit ints."""
        d = VADRMPRIMESurfaceDescriptor()
        for o in d.objects:
            o.fd = -1
        st = libva().vaExportSurfaceHandle(self._h(), surface, VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2, flags, ctypes.byref(d))
        _check("vaExportSurfaceHandle", st, f"surface {surface}")
        return PrimeDescriptor.from_c(d, owns_fds=True)

    def sync_surface(self, surface: int) -> None:
        """Wait until every operation on the surface (decode, processing) has finished."""
        _check("vaSyncSurface", libva().vaSyncSurface(self._h(), surface), f"surface {surface}")

    def surface_status(self, surface: int) -> int:
        st = ctypes.c_int()
        _check("vaQuerySurfaceStatus", libva().vaQuerySurfaceStatus(self._h(), surface, ctypes.byref(st)), f"surface {surface}")
        return st.value

    # -- images ---------------------------------------------------------------------------------------------------------
    def derive_image(self, surface: int) -> ImageInfo:
        """vaDeriveImage: an image sharing the surface's memory (destroy it with destroy_image before the surface)."""
        im = VAImage()
        _check("vaDeriveImage", libva().vaDeriveImage(self._h(), surface, ctypes.byref(im)), f"surface {surface}")
        n = min(int(im.num_planes), 3)
        return ImageInfo(int(im.image_id), int(im.buf), int(im.format.fourcc), int(im.width), int(im.height),
                         int(im.data_size), tuple(int(im.pitches[i]) for i in range(n)),
                         tuple(int(im.offsets[i]) for i in range(n)))

    def destroy_image(self, image_id: int) -> None:
        _check("vaDestroyImage", libva().vaDestroyImage(self._h(), image_id), f"image {image_id}")

    def map_buffer(self, buf: int) -> int:
        """vaMapBuffer: the buffer's address in this process."""
        p = ctypes.c_void_p()
        _check("vaMapBuffer", libva().vaMapBuffer(self._h(), buf, ctypes.byref(p)), f"buffer {buf}")
        if not p.value:
            raise VAError("vaMapBuffer", VA_STATUS_ERROR_OPERATION_FAILED, f"buffer {buf} mapped at NULL")
        return int(p.value)

    def unmap_buffer(self, buf: int) -> None:
        _check("vaUnmapBuffer", libva().vaUnmapBuffer(self._h(), buf), f"buffer {buf}")
