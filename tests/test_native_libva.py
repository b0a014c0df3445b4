"""interop.native.libva through the real libva.so.2 and the fake driver (tests/fakes/va), and struct layouts
checked against the real headers."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess

import numpy as np
import pytest

from interop.errors import InteropError, UnsupportedFormatError
from interop.native import libva as va
from tests.support.va_fake import DRIVER, LAYOUT, FakeVA, build

I915_Y_TILED = (0x01 << 56) | 2  # fourcc_mod_code(INTEL, 2): a modifier with bits above 32
AMD_LIKE = 0x0200000000F01B09  # a vendor-2 modifier using the upper 32 bits heavily


@pytest.fixture(scope="module")
def layout() -> dict[str, object]:
    why = build()
    if why:
        pytest.skip(why)
    return json.loads(subprocess.run([str(LAYOUT)], capture_output=True, text=True, check=True).stdout)


def _field(struct: type[ctypes.Structure], path: str) -> tuple[int, int]:
    """(offset, size) of a dotted/indexed field path such as 'objects[1].drm_format_modifier'."""
    offset, cls = 0, struct
    for part in path.split("."):
        name, _, idx = part.partition("[")
        f = getattr(cls, name)
        offset += f.offset
        ftype = dict(cls._fields_)[name]
        if idx:
            i = int(idx.rstrip("]"))
            ftype = ftype._type_
            offset += i * ctypes.sizeof(ftype)
            size = ctypes.sizeof(ftype)
        else:
            size = f.size
        cls = ftype
    return offset, size


def test_every_structure_matches_the_real_headers(layout: dict[str, object]) -> None:
    seen = set()
    for key, value in layout.items():
        if key.startswith("sizeof "):
            name = key.split()[1]
            assert ctypes.sizeof(va.STRUCTURES[name]) == value, name
            seen.add(name)
        elif "." in key and isinstance(value, list):
            name, path = key.split(".", 1)
            assert _field(va.STRUCTURES[name], path) == tuple(value), key
    assert seen == set(va.STRUCTURES), "layout.c must cover every Structure of interop.native.libva"


def test_every_constant_matches_the_real_headers(layout: dict[str, object]) -> None:
    consts = {k: v for k, v in layout.items() if not k.startswith("sizeof ") and not isinstance(v, list)}
    assert len(consts) > 40
    for name, value in consts.items():
        assert getattr(va, name) == value, name


def test_vainitialize_succeeds_through_the_real_libva(va_display: va.Display) -> None:
    maps = open("/proc/self/maps").read()
    assert str(DRIVER) in maps, "the fake driver was not loaded by libva"
    assert libva_real_path().startswith("/usr/lib"), "the system libva, not a stand-in, must have loaded the driver"
    assert va_display.version == (1, 17)
    assert va_display.vendor.startswith("interop conformance fake VA driver")


def libva_real_path() -> str:
    for line in open("/proc/self/maps"):
        if "libva.so.2" in line:
            return line.split()[-1]
    return ""


def test_create_export_import_and_destroy(fake_va: FakeVA, va_display: va.Display) -> None:
    ids = va_display.create_surfaces(322, 242, va.VA_FOURCC_NV12, 3)
    assert len(set(ids)) == 3 and all(isinstance(i, int) for i in ids)
    assert fake_va.live()[0] == 3
    info = fake_va.info(ids[0])
    assert (info["width"], info["height"], info["num_planes"]) == (322, 242, 2)

    desc = va_display.export_prime2(ids[0])
    try:
        assert desc.owns_fds and desc.fourcc == va.VA_FOURCC_NV12 and (desc.width, desc.height) == (322, 242)
        assert len(desc.layers) == 1 and desc.layers[0].drm_format == va.fourcc("NV12")
        # every plane's own offset and pitch, exactly as the driver laid them out (UV is not at pitch * height)
        assert [(p.offset, p.pitch) for p in desc.planes] == list(zip(info["offset"][:2], info["pitch"][:2]))
        assert desc.planes[1].offset != desc.planes[0].pitch * 242
        # the fd is a new one of ours, over the surface's memory: write through it, read through the driver
        fd = desc.objects[0].fd
        with mmap.mmap(fd, desc.objects[0].size) as m:
            m[desc.planes[1].offset] = 0x5A
        assert fake_va.plane(ids[0], 1, 1)[0] == 0x5A
    finally:
        desc.close()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed by desc.close() (no other fd was opened since)

    sep = va_display.export_prime2(ids[0], va.VA_EXPORT_SURFACE_READ_ONLY | va.VA_EXPORT_SURFACE_SEPARATE_LAYERS)
    try:
        assert [layer.drm_format for layer in sep.layers] == [va.fourcc("R8  "), va.fourcc("GR88")]
        assert fake_va.info(ids[0])["export_flags"] == va.VA_EXPORT_SURFACE_READ_ONLY | va.VA_EXPORT_SURFACE_SEPARATE_LAYERS
    finally:
        sep.close()

    va_display.destroy_surfaces(ids)
    assert fake_va.live()[0] == 0


def test_prime2_import_keeps_offsets_pitches_and_64bit_modifiers(fake_va: FakeVA, va_display: va.Display) -> None:
    # two objects (Y in one memfd, UV in another at an odd offset) with modifiers that need all 64 bits
    W, H = 64, 48
    y_fd = os.memfd_create("y")
    uv_fd = os.memfd_create("uv")
    os.ftruncate(y_fd, 128 * H)
    os.ftruncate(uv_fd, 8192 + 128 * H // 2)
    try:
        desc = va.PrimeDescriptor(va.VA_FOURCC_NV12, W, H,
                                  [va.PrimeObject(y_fd, 128 * H, I915_Y_TILED), va.PrimeObject(uv_fd, 0, AMD_LIKE)],
                                  [va.PrimeLayer(va.fourcc("NV12"), (va.PrimePlane(0, 0, 128), va.PrimePlane(1, 8192, 128)))])
        sid = va_display.import_prime2(desc)
        info = fake_va.info(sid)
        assert info["mem_type"] == va.VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2
        assert info["modifier"][:2] == [I915_Y_TILED, AMD_LIKE]
        assert info["offset"][:2] == [0, 8192] and info["pitch"][:2] == [128, 128] and info["plane_object"][:2] == [0, 1]
        # the driver took its own reference: our fds can go
        os.close(y_fd)
        os.close(uv_fd)
        y_fd = uv_fd = -1
        out = va_display.export_prime2(sid)
        try:
            assert [o.modifier for o in out.objects] == [I915_Y_TILED, AMD_LIKE]
            assert [(p.object_index, p.offset, p.pitch) for p in out.planes] == [(0, 0, 128), (1, 8192, 128)]
        finally:
            out.close()
        va_display.destroy_surfaces([sid])
    finally:
        for fd in (y_fd, uv_fd):
            if fd >= 0:
                os.close(fd)


def test_surfaces_allocated_with_a_modifier_list_export_it(fake_va: FakeVA, va_display: va.Display) -> None:
    sid = va_display.create_surfaces(64, 64, va.VA_FOURCC_NV12, modifiers=[I915_Y_TILED, 0])[0]
    out = va_display.export_prime2(sid)
    try:
        assert out.objects[0].modifier == I915_Y_TILED
    finally:
        out.close()
    va_display.destroy_surfaces([sid])


def test_legacy_external_buffer_import(fake_va: FakeVA, va_display: va.Display) -> None:
    fd = os.memfd_create("ext")
    os.ftruncate(fd, 65536)
    try:
        with mmap.mmap(fd, 65536) as m:
            m[20000] = 7
        sid = va_display.import_external(va.VA_FOURCC_NV12, 64, 32, fd, [64, 96], [0, 20000], 65536)
        info = fake_va.info(sid)
        assert info["mem_type"] == va.VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME
        assert (info["offset"][:2], info["pitch"][:2]) == ([0, 20000], [64, 96])
        assert fake_va.plane(sid, 1, 1)[0] == 7
        va_display.destroy_surfaces([sid])
    finally:
        os.close(fd)


def test_derive_map_gives_the_surface_memory(fake_va: FakeVA, va_display: va.Display) -> None:
    sid = va_display.create_surfaces(100, 50, va.VA_FOURCC_I420)[0]
    va_display.sync_surface(sid)
    assert fake_va.info(sid)["syncs"] == 1
    assert va_display.surface_status(sid) == va.VASurfaceReady
    im = va_display.derive_image(sid)
    info = fake_va.info(sid)
    assert im.fourcc == va.VA_FOURCC_I420 and (im.width, im.height) == (100, 50)
    assert list(im.offsets) == info["offset"][:3] and list(im.pitches) == info["pitch"][:3]
    addr = va_display.map_buffer(im.buf)
    arr = np.ctypeslib.as_array((ctypes.c_uint8 * im.data_size).from_address(addr))
    arr[im.offsets[2] + 3 * im.pitches[2] + 5] = 99  # V plane, row 3, column 5
    assert fake_va.plane(sid, 2, im.pitches[2] * 4)[3 * im.pitches[2] + 5] == 99
    assert addr + im.offsets[0] == fake_va.hooks.fakeva_plane_address(sid, 0)
    # the fake is strict like a careful driver: no destroying a surface under a mapped image
    with pytest.raises(va.VAError) as e:
        va_display.destroy_surfaces([sid])
    assert e.value.status == va.VA_STATUS_ERROR_SURFACE_BUSY
    va_display.unmap_buffer(im.buf)
    va_display.destroy_image(im.image_id)
    va_display.destroy_surfaces([sid])
    assert fake_va.live() == (0, 0, 0)


def test_errors_are_typed_and_worded_by_libva(fake_va: FakeVA, va_display: va.Display) -> None:
    with pytest.raises(va.VAError) as e:
        va_display.destroy_surfaces([12345])
    assert isinstance(e.value, InteropError)
    assert e.value.status == va.VA_STATUS_ERROR_INVALID_SURFACE and e.value.function == "vaDestroySurfaces"
    assert "invalid VASurfaceID" in str(e.value)
    assert va.error_str(va.VA_STATUS_ERROR_UNKNOWN) == "unknown libva error"
    with pytest.raises(va.VAError) as e:
        va_display.export_prime2(12345)
    assert e.value.status == va.VA_STATUS_ERROR_INVALID_SURFACE


def test_unknown_fourcc_is_an_unsupported_format(fake_va: FakeVA, va_display: va.Display) -> None:
    with pytest.raises(InteropError, match="no VA render-target format known for fourcc XYZW") as e:
        va_display.create_surfaces(64, 64, va.fourcc("XYZW"))
    assert type(e.value) is UnsupportedFormatError


def test_surface_ids_belong_to_their_display(fake_va: FakeVA) -> None:
    a, b = fake_va.open(), fake_va.open()
    try:
        sid = a.create_surfaces(64, 64)[0]
        with pytest.raises(va.VAError) as e:
            b.sync_surface(sid)
        assert e.value.status == va.VA_STATUS_ERROR_INVALID_SURFACE
        a.sync_surface(sid)
    finally:
        b.close()
        a.close()  # vaTerminate frees what the display still had
    assert fake_va.live() == (0, 0, 0)
    with pytest.raises(InteropError, match="closed"):
        a.create_surfaces(64, 64)


def test_open_drm_without_a_render_node_says_so() -> None:
    if va.available():
        pytest.skip(va.available() or "")
    path = "/dev/dri/renderD128"
    if os.path.exists(path):
        pytest.skip("this machine has a render node; the hardware tests cover it")
    with pytest.raises(InteropError, match="render node"):
        va.Display.open_drm(path)


def test_fourcc_helpers() -> None:
    assert va.fourcc("NV12") == va.VA_FOURCC_NV12 == 0x3231564E
    assert va.fourcc_str(va.VA_FOURCC_NV12) == "NV12" and va.fourcc_str(1) == "0x00000001"
