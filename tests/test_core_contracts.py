"""Core contracts of issue 15: wrap(format=) honours or refuses every array layout, released tensors and frames
refuse use (data_ptr, handle) but still repr, TensorInfo's cache never skips validation, Frame checks its size
against its planes, arguments are validated to their documented types, and the error classes subclass the
builtins a caller would catch."""

from __future__ import annotations

import errno
import inspect
import mmap
from fractions import Fraction

import numpy as np
import pytest

import interop
import interop.errors as E
from interop import (
    Frame,
    FrameFormat,
    InteropError,
    InvalidTensorError,
    MemoryType,
    Tensor,
    TensorInfo,
    UnsupportedTypeError,
)
from interop.info import plane_layout, stacked_height
from interop.tensors.cpu import CPUTensor, frame_from_array

U8 = np.uint8

# ---- wrap(array, format=) and array layouts ---------------------------------------------------------------

PLANAR = [f for f in FrameFormat if len(plane_layout(f)) > 1]
PACKED = [f for f in FrameFormat if len(plane_layout(f)) == 1]


def _planar_base(fmt: FrameFormat, w: int = 8, h: int = 4) -> np.ndarray:
    dt = plane_layout(fmt)[0].dtype
    rows = next(r for r in range(h, 4 * h) if _stacks(fmt, r) == h)  # the planes one after another at the pitch
    return np.arange(rows * w, dtype=dt).reshape(rows, w)


def _stacks(fmt: FrameFormat, rows: int) -> int | None:
    try:
        return stacked_height(fmt, rows)
    except InvalidTensorError:
        return None


def _packed_base(fmt: FrameFormat, w: int = 8, h: int = 4) -> np.ndarray:
    spec = plane_layout(fmt)[0]
    shape = (h, w) if spec.channels == 0 else (h, w, spec.channels)
    return np.arange(int(np.prod(shape)), dtype=spec.dtype).reshape(shape)


def _layouts(a: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "column stride": a[:, ::2],
        "negative rows": a[::-1],
        "negative columns": a[:, ::-1],
        "fortran order": np.asfortranarray(a),
        "transposed": a.T if a.ndim == 2 else a.transpose(1, 0, 2),
    }


def test_issue_example_column_stride_is_refused_not_misread():
    arr = np.arange(48, dtype=U8).reshape(6, 8)[:, ::2]
    for fmt in (FrameFormat.I420, FrameFormat.NV12):
        with pytest.raises(InvalidTensorError, match="ascontiguousarray"):
            interop.wrap(arr, format=fmt)


@pytest.mark.parametrize("fmt", PLANAR, ids=lambda f: f.name)
def test_planar_formats_read_the_array_or_refuse(fmt):
    base = _planar_base(fmt)
    f = interop.wrap(base, format=fmt)  # the tight buffer: Y is the first H rows
    np.testing.assert_array_equal(np.asarray(f[0]), base[:4])
    for name, arr in _layouts(base).items():
        try:
            out = interop.wrap(arr, format=fmt)
        except InteropError as e:
            assert isinstance(e, InvalidTensorError), (name, e)
            continue
        h = out.height  # accepted: the luma plane must be exactly the first rows of the array, as numpy sees them
        np.testing.assert_array_equal(np.asarray(out[0]), arr[:h], err_msg=f"{fmt.name} {name}")


def test_planar_padded_pitch_still_accepted():
    buf = np.arange(6 * 16, dtype=U8).reshape(6, 16)[:, :8]  # pitch 16, width 8: a padded NV12 buffer
    f = interop.wrap(buf, format=FrameFormat.NV12)
    assert (f.width, f.height) == (8, 4) and f[0].strides == (16, 1)
    np.testing.assert_array_equal(np.asarray(f[0]), buf[:4])


@pytest.mark.parametrize("fmt", PACKED, ids=lambda f: f.name)
def test_packed_formats_honour_strides_or_refuse(fmt):
    base = _packed_base(fmt)
    for name, arr in _layouts(base).items():
        try:
            out = interop.wrap(arr, format=fmt)
        except InteropError as e:
            assert isinstance(e, InvalidTensorError), (name, e)
            continue
        got = np.asarray(out[0])
        np.testing.assert_array_equal(got, arr, err_msg=f"{fmt.name} {name}")
        assert (out.width, out.height) == (arr.shape[1], arr.shape[0])


def test_frame_from_array_with_size_refuses_a_strided_view():
    buf = np.zeros((12, 16), U8)[:, ::2]
    with pytest.raises(InvalidTensorError, match="strided view"):
        frame_from_array(buf, FrameFormat.NV12, 8, 8)


def test_wrap_info_refuses_a_strided_view():
    arr = np.arange(64, dtype=U8).reshape(8, 8)[:, ::2]
    with pytest.raises(InvalidTensorError, match="strided view"):
        interop.wrap(arr, info=TensorInfo((32,), U8))


# ---- buffer-protocol objects ----------------------------------------------------------------------------


def test_wrap_non_contiguous_memoryview():
    mv = memoryview(np.zeros((4, 4), U8)[:, ::2])
    with pytest.raises(E.InteropBufferError, match="numpy.asarray") as ei:
        interop.wrap(mv)
    assert isinstance(ei.value, BufferError)


def test_wrap_closed_mmap_and_released_memoryview():
    m = mmap.mmap(-1, 4096)
    m.close()
    with pytest.raises(InvalidTensorError, match="keep the buffer open"):
        interop.wrap(m)
    mv = memoryview(bytearray(16))
    mv.release()
    with pytest.raises(InvalidTensorError, match="keep the buffer open"):
        interop.wrap(mv)


# ---- released tensors and frames ------------------------------------------------------------------------


def test_data_ptr_and_handle_of_released_tensor():
    t = interop.wrap(np.zeros(16, U8))
    assert t.data_ptr == t.handle("data") != 0
    t.release()
    with pytest.raises(InvalidTensorError, match="map or wrap the source again"):
        t.data_ptr  # noqa: B018
    with pytest.raises(InvalidTensorError, match="map or wrap the source again"):
        t.handle("data")
    with pytest.raises(InvalidTensorError):
        t.handle()


def test_data_ptr_rule_is_inherited_by_every_subclass():
    class Host(Tensor):
        memory_type = MemoryType.CPU

        def _host_address(self) -> int:
            return 4096

    t = Host(None, TensorInfo((4,), U8))
    assert t.data_ptr == 4096
    t.release()
    with pytest.raises(InvalidTensorError):
        t.data_ptr  # noqa: B018
    from interop.backends import load_all

    load_all()
    seen, todo = [], list(Tensor.__subclasses__())
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    overriding = [c.__qualname__ for c in seen if "data_ptr" in vars(c) and c.__module__.startswith("interop")]
    assert not overriding, f"these tensor classes override data_ptr and must check release themselves: {overriding}"


def test_repr_of_released_tensor_and_frame():
    t = interop.wrap(np.zeros(4, U8))
    t.release()
    assert "released" in repr(t)
    f = interop.wrap(np.zeros((4, 4, 3), U8), format=FrameFormat.RGB)
    f.release()
    assert "released" in repr(f)
    g = interop.wrap(np.zeros((6, 4), U8), format=FrameFormat.NV12)
    g[1].release()  # one plane released behind the frame's back
    assert "released" in repr(g)


def test_dlpack_refusals_are_typed_buffer_errors():
    a = np.zeros(4, U8)
    a.flags.writeable = False
    t = interop.wrap(a)
    with pytest.raises(E.InteropBufferError) as ei:
        t.__dlpack__()  # a legacy capsule cannot say read-only
    assert isinstance(ei.value, BufferError)
    with pytest.raises(E.InteropBufferError):
        t.__dlpack__(stream=1)
    t.release()
    with pytest.raises(InvalidTensorError):
        t.__dlpack__(max_version=(1, 0))
    with pytest.raises(InvalidTensorError):
        t.__dlpack_device__()


# ---- TensorInfo cache ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [(4.0, 4), (True, 4), (np.float64(4), 4), (np.True_, 4), (4, 4.0)],
                         ids=["float", "bool", "np.float64", "np.bool_", "float-last"])
def test_tensorinfo_cache_never_skips_validation(bad):
    TensorInfo((4, 4))  # cached first: an equal-hashing bad key must not find it
    TensorInfo((1, 4))
    with pytest.raises(InvalidTensorError, match="must be an integer"):
        TensorInfo(bad)
    TensorInfo((4, 4), U8, (4, 1))
    with pytest.raises(InvalidTensorError, match="must be an integer"):
        TensorInfo((4, 4), U8, (4.0, 1))
    with pytest.raises(InvalidTensorError, match="must be an integer"):
        TensorInfo((4, 4), U8, (4, True))


def test_tensorinfo_cache_still_interns_and_takes_numpy_ints():
    assert TensorInfo((3, 5), U8) is TensorInfo((3, 5), U8)
    assert TensorInfo((np.int64(3), np.int32(5)), U8) == TensorInfo((3, 5), U8)
    with pytest.raises(InvalidTensorError, match="tuple of integers"):
        TensorInfo({4, 2})
    with pytest.raises(InvalidTensorError, match="tuple of integers"):
        TensorInfo("44")


# ---- Frame: size against planes, constructor arguments -----------------------------------------------------


def _planes(w: int, h: int, pitch: int | None = None) -> list[Tensor]:
    p = pitch or w
    cw, ch = -(-w // 2), -(-h // 2)
    y = np.zeros((h, p), U8)[:, :w]
    uv = np.zeros((ch, max(p // 2, cw), 2), U8)[:, :cw]  # rows of pitch bytes, cw pixel pairs used
    return [CPUTensor(y), CPUTensor(uv)]


def test_frame_refuses_size_that_disagrees_with_planes():
    planes = _planes(8, 6)
    assert Frame(planes, FrameFormat.NV12, 8, 6).width == 8
    for w, h in ((100, 100), (8, 4), (6, 6), (16, 6)):
        with pytest.raises(InvalidTensorError, match="must be shaped"):
            Frame(planes, FrameFormat.NV12, w, h)
    gray = interop.wrap(np.zeros((4, 4), U8))
    with pytest.raises(InvalidTensorError, match="must be shaped"):
        Frame([gray], FrameFormat.GRAY8, 100, 100)
    with pytest.raises(InvalidTensorError, match="must be shaped"):
        Frame([gray], FrameFormat.RGB)  # a 2-D plane is no packed RGB plane


def test_frame_size_check_keeps_legitimate_layouts():
    assert Frame(_planes(7, 5), FrameFormat.NV12, 7, 5).height == 5  # odd size: chroma rounded up
    f = Frame(_planes(8, 6, pitch=16), FrameFormat.NV12, 8, 6)  # padded pitch
    c = f.crop(2, 2, 4, 2)
    assert (c.width, c.height) == (4, 2) and c[1].shape == (1, 2, 2)
    y, u, v = (np.zeros(s, U8) for s in ((5, 7), (3, 4), (3, 4)))
    Frame([CPUTensor(a) for a in (y, u, v)], FrameFormat.I420, 7, 5)
    # OpenVINO's device-side planes: (1, rows, pitch in pixels, C), width/height the visible size
    ov = [CPUTensor(np.zeros((1, 6, 16, 1), U8)), CPUTensor(np.zeros((1, 3, 8, 2), U8))]
    Frame(ov, FrameFormat.NV12, 8, 6)
    with pytest.raises(InvalidTensorError, match="must be shaped"):
        Frame(ov, FrameFormat.NV12, 8, 8)


@pytest.mark.parametrize("kw,exc", [
    ({"tensors": None}, UnsupportedTypeError),
    ({"tensors": 5}, UnsupportedTypeError),
    ({"tensors": "Y"}, UnsupportedTypeError),
    ({"tensors": "plane"}, UnsupportedTypeError),
    ({"tensors": []}, InvalidTensorError),
    ({"tensors": [np.zeros((4, 4), U8)]}, InvalidTensorError),
    ({"format": "GRAY8"}, UnsupportedTypeError),
    ({"width": 4.0}, InvalidTensorError),
    ({"width": True}, InvalidTensorError),
    ({"height": "4"}, InvalidTensorError),
    ({"context": 5}, UnsupportedTypeError),
    ({"context": MemoryType.CPU}, UnsupportedTypeError),
    ({"colorspace": "bt709"}, UnsupportedTypeError),
    ({"color_range": 1}, UnsupportedTypeError),
    ({"pts": 1.5}, InvalidTensorError),
    ({"pts": True}, InvalidTensorError),
    ({"time_base": 0.04}, UnsupportedTypeError),
    ({"metadata": [("a", 1)]}, UnsupportedTypeError),
], ids=lambda v: repr(v) if not isinstance(v, dict) else ",".join(f"{k}={v[k]!r:.20}" for k in v))
def test_frame_constructor_arguments(kw, exc):
    plane = interop.wrap(np.zeros((4, 4), U8))
    args = {"tensors": [plane], "format": FrameFormat.GRAY8, "width": 4, "height": 4}
    if kw.get("tensors") == "plane":
        kw = {"tensors": plane}
    args.update(kw)
    with pytest.raises(exc):
        Frame(args.pop("tensors"), args.pop("format"), args.pop("width"), args.pop("height"), **args)


def test_frame_setters_validate():
    f = Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, pts=np.int64(3),
              time_base=Fraction(1, 25), colorspace=interop.ColorSpace.BT709)
    assert f.pts == 3 and f.time_base == Fraction(1, 25)
    with pytest.raises(UnsupportedTypeError):
        f.time_base = 0.04  # type: ignore[assignment]
    with pytest.raises(UnsupportedTypeError):
        f.colorspace = "bt709"  # type: ignore[assignment]
    with pytest.raises(InvalidTensorError):
        f.pts = "3"  # type: ignore[assignment]


# ---- arguments of wrap / map / Tensor / MemoryType ----------------------------------------------------------


@pytest.mark.parametrize("bad", [None, 3, 1.5, b"cpu", ["cpu"]])
def test_memory_type_parse_refuses_non_strings(bad):
    with pytest.raises(UnsupportedTypeError, match="choose one of"):
        MemoryType.parse(bad)
    assert MemoryType.parse(MemoryType.DMA) is MemoryType.DMA


@pytest.mark.parametrize("bad", ["yes", 1, 0, None, 1.0])
def test_map_allow_copy_must_be_a_bool(bad):
    with pytest.raises(UnsupportedTypeError, match="True or False"):
        interop.map(np.zeros(4, U8), MemoryType.CPU, allow_copy=bad)
    assert interop.map(np.zeros(4, U8), MemoryType.CPU, allow_copy=np.True_) is not None


def test_tensor_constructor_arguments():
    with pytest.raises(UnsupportedTypeError, match="context"):
        CPUTensor(np.zeros(4, U8), context=MemoryType.CPU)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedTypeError, match="writable"):
        CPUTensor(np.zeros(4, U8), writable="no")  # type: ignore[arg-type]
    with pytest.raises(InvalidTensorError, match="TensorInfo"):
        Tensor(None, (4,))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedTypeError, match="writable"):
        Tensor(None, TensorInfo((4,), U8), writable=1)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedTypeError, match="key name"):
        interop.wrap(np.zeros(4, U8)).handle(0)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [(True, 0, 1, 1), (0, 0, 1, np.True_)])
def test_region_refuses_booleans(args):
    with pytest.raises(InvalidTensorError, match="boolean"):
        interop.wrap(np.zeros((4, 4), U8)).region(*args)


# ---- error classes --------------------------------------------------------------------------------------


def test_every_error_is_an_interop_error_and_its_builtin():
    builtin = {
        E.InvalidTensorError: ValueError, E.UnsupportedTypeError: TypeError, E.ContextMismatchError: ValueError,
        E.WrongMemoryError: ValueError, E.BackendUnavailableError: ImportError, E.ResourceError: OSError,
        E.UnsupportedFormatError: ValueError, E.InteropTimeoutError: TimeoutError, E.InteropBufferError: BufferError,
        E.ModelFileError: ValueError,
    }
    classes = [c for _, c in inspect.getmembers(E, inspect.isclass) if issubclass(c, BaseException)]
    for c in classes:
        assert issubclass(c, InteropError), c
    for c, b in builtin.items():
        assert issubclass(c, b), (c, b)
    assert issubclass(E.CopyRequiredError, E.NoRouteError)


def test_resource_error_carries_errno():
    e = E.ResourceError(errno.EMFILE, "no fd left: release frames or raise `ulimit -n`")
    assert isinstance(e, OSError) and isinstance(e, InteropError)
    assert e.errno == errno.EMFILE and "ulimit" in str(e)
    with pytest.raises(OSError) as ei:
        raise e
    assert ei.value.errno == errno.EMFILE


def test_timeout_error_is_caught_as_timeout():
    with pytest.raises(TimeoutError):
        raise E.InteropTimeoutError("no free buffer within 1.0 s: release frames")


def test_every_kind_refuses_data_ptr_and_handles_once_released():
    """Each tensor kind this machine can make: data_ptr and every handle(key) raise after release, repr says so."""
    from tests.reliability import backends as B

    ok, _missing = B.probe_factories()
    assert not B.broken(), B.broken()
    assert "cpu-tensor" in ok
    for kind in ok:
        obj = B.make(kind, np.random.default_rng(0)).obj
        planes = obj.tensors if isinstance(obj, Frame) else [obj]
        obj.release()
        for t in planes:
            with pytest.raises(InvalidTensorError):
                t.data_ptr  # noqa: B018
            for key in type(t).HANDLE_KEYS:
                with pytest.raises(InvalidTensorError):
                    t.handle(key)
            assert "released" in repr(t), (kind, repr(t))
        assert "released" in repr(obj), (kind, repr(obj))
