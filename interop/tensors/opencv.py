"""OpenCV tensors: ``cv2.Mat`` (host memory, MemoryType.OPENCV) and ``cv2.UMat`` (OpenCL memory, OPENCV_UMAT).

OpenCV owns the process's shared OpenCL context (``UMatContext``): opencv-python cannot adopt a foreign
context, so pyopencl and dpctl wrap OpenCV's (docs/opencl.md). A UMat's ``cl_mem`` is the whole allocation;
a ROI UMat shares its parent's cl_mem and carries a byte ``offset``.

opencv-python's ``cv2.UMat`` exposes no size, type or step, so ``umat_info()`` finds them without copying the
data: it reads the first row (width and element type) and lets OpenCV count the rows over the first column.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..backends import (
    Backend,
    BackendReport,
    Wrapper,
    class_in,
    lazy_module,
    register_backend,
    register_wrapper,
)
from ..context import Context, register_default_context
from ..errors import (
    BackendUnavailableError,
    ContextMismatchError,
    InvalidTensorError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo, contiguous_strides
from ..tensor import Tensor
from ..types import FrameFormat, MemoryType
from .cpu import frame_from_array, info_of, view_bytes

_lock = threading.Lock()


cv2 = lazy_module("cv2", "opencv")


# ---- contexts -------------------------------------------------------------------------------------------------


class OpenCVContext(Context):
    """Host memory seen through OpenCV (cv2.Mat). There is one."""

    memory_type = MemoryType.OPENCV

    def __init__(self) -> None:
        super().__init__(native=None, device="cpu")

    def key(self) -> Any:
        return "opencv"


OPENCV_CONTEXT = OpenCVContext()
register_default_context(MemoryType.OPENCV, lambda: OPENCV_CONTEXT)


class UMatContext(Context):
    """OpenCV's OpenCL execution context: ``cl_context`` and ``cl_queue`` (ints, in-order queue), ``device`` the
    OpenCV device name. Equal to another UMatContext on the same cl_context."""

    memory_type = MemoryType.OPENCV_UMAT

    def __init__(self, cl_context: int, cl_queue: int, device: str):
        super().__init__(native=cl_context, device=device)
        self.cl_context = int(cl_context)
        self.cl_queue = int(cl_queue)

    def key(self) -> Any:
        return self.cl_context

    def __repr__(self) -> str:
        return f"<UMatContext cl_context={self.cl_context:#x} device={self._device!r}>"


def _default_umat_context() -> UMatContext:
    c = cv2()
    if not c.ocl.haveOpenCL():
        raise BackendUnavailableError(
            "OpenCV sees no OpenCL device (import interop before cv2 so the runtime set-up can point OpenCV at the "
            "OpenCL runtime; OPENCV_OPENCL_DEVICE selects the device)", backend="opencv_umat", extra="opencl")
    c.ocl.setUseOpenCL(True)
    c.UMat(1, 1, c.CV_8UC1, 0)  # makes OpenCV create its context and queue now
    ctx, queue = int(c.UMat.context()), int(c.UMat.queue())
    if not ctx:
        raise BackendUnavailableError("OpenCV did not create an OpenCL context", backend="opencv_umat", extra="opencl")
    return UMatContext(ctx, queue, c.ocl.Device.getDefault().name())


register_default_context(MemoryType.OPENCV_UMAT, _default_umat_context)


# ---- dtypes ---------------------------------------------------------------------------------------------------

_DEPTHS = {"uint8": "CV_8U", "int8": "CV_8S", "uint16": "CV_16U", "int16": "CV_16S", "int32": "CV_32S",
           "float32": "CV_32F", "float64": "CV_64F", "float16": "CV_16F"}


def cv_type(dtype: np.dtype, channels: int) -> int:
    c = cv2()
    name = _DEPTHS.get(np.dtype(dtype).name)
    if name is None:
        raise InvalidTensorError(f"OpenCV has no element type for {dtype}: use one of {', '.join(_DEPTHS)}")
    if not 1 <= channels <= 512:
        raise InvalidTensorError(f"OpenCV images have 1..512 channels, not {channels}")
    return int(c.CV_MAKETYPE(getattr(c, name), channels))


# ---- Mat ------------------------------------------------------------------------------------------------------


class OpenCVTensor(Tensor):
    """A ``cv2.Mat`` (numpy subclass in OpenCV 5): host memory, CPU-reachable."""

    memory_type = MemoryType.OPENCV
    HANDLE_KEYS = {"data": "data_ptr"}

    def __init__(self, mat: Any, *, parent: Any = None, writable: bool | None = None):
        if not isinstance(mat, np.ndarray):
            raise UnsupportedTypeError(f"OpenCVTensor wraps a cv2.Mat, not {type(mat).__name__}")
        w = mat.flags.writeable if writable is None else bool(writable) and mat.flags.writeable
        super().__init__(mat, info_of(mat), context=OPENCV_CONTEXT, parent=parent, writable=w)

    def _host_address(self) -> int | None:
        return int(self._native.__array_interface__["data"][0])

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        arr = view_bytes(self._native.view(np.ndarray), offset, info, writable=self._writable)
        return OpenCVTensor(as_mat(arr), parent=self, writable=self._writable)


def as_mat(arr: np.ndarray) -> Any:
    """A cv2.Mat over the same memory as ``arr`` (zero-copy). A 3-D (H, W, C) array is an image of C channels, as
    OpenCV reads plain numpy arrays (``wrap_channels``), not a 3-D matrix."""
    return cv2().Mat(arr, wrap_channels=arr.ndim == 3 and arr.shape[2] <= 512)


# ---- UMat -----------------------------------------------------------------------------------------------------


_ALL = (-(1 << 31), (1 << 31) - 1)  # cv::Range::all()


def _row_count(u: Any, dtype: np.dtype) -> int:
    """Rows of a UMat, counted by OpenCV over its first column, so no ROI constructor can fail.

    (opencv-python 5.0 leaks the parent UMat, buffer included, each time a ROI constructor raises, so the
    layout is never found by trial.) 8-/16-bit images: a one-bin histogram over the full value range (cheap);
    other types: elements equal or unequal to themselves (NaN included), counted (several OpenCV calls: slower).
    """
    c = cv2()
    strip = c.UMat(u, _ALL, (0, 1))
    if dtype in (np.dtype(np.uint8), np.dtype(np.uint16)):
        hi = 256 if dtype == np.uint8 else 65536
        return int(c.calcHist([strip], [0], None, [1], [0, hi]).get().ravel()[0])
    s = c.extractChannel(strip, 0)
    return int(c.countNonZero(c.bitwise_or(c.compare(s, s, c.CMP_EQ), c.compare(s, s, c.CMP_NE))))


def umat_info(u: Any) -> TensorInfo:
    """Shape, dtype and strides of a 2-D UMat, found without copying its data.

    The first row is read (``cols x channels`` elements: the width and the element type), the rows are counted
    by OpenCV over the first column (``_row_count``), and the step is the offset between the ROIs of rows 0
    and 1. Pass ``info=`` to wrap() to skip this (a few OpenCV calls per wrap).
    """
    c = cv2()
    try:
        row = c.UMat(u, (0, 1), _ALL).get()
    except Exception as e:
        raise InvalidTensorError("cannot find the layout of this UMat (is it empty?): pass info= to wrap()") from e
    cols = row.shape[1]
    channels = row.shape[2] if row.ndim == 3 else 1
    pixel = row.dtype.itemsize * channels
    rows = _row_count(u, row.dtype)
    step = int(c.UMat(u, (1, 2), (0, 1)).offset) - int(u.offset) if rows > 1 else cols * pixel
    shape = (rows, cols) if channels == 1 else (rows, cols, channels)
    inner = contiguous_strides(shape, row.dtype.itemsize)
    return TensorInfo(shape, row.dtype, (step,) + inner[1:])


class UMatTensor(Tensor):
    """A ``cv2.UMat``: OpenCL memory in OpenCV's context. ``cl_mem`` is the whole allocation's handle,
    ``offset`` the byte offset of element 0 (non-zero for ROI UMats)."""

    memory_type = MemoryType.OPENCV_UMAT
    HANDLE_KEYS = {"cl_mem": "cl_mem", "offset": "offset"}

    def __init__(self, umat: Any, info: TensorInfo | None = None, *, context: UMatContext | None = None,
                 parent: Any = None, writable: bool = True):
        c = cv2()
        if not isinstance(umat, c.UMat):
            raise UnsupportedTypeError(f"UMatTensor wraps a cv2.UMat, not {type(umat).__name__}")
        own = Context.default(MemoryType.OPENCV_UMAT)
        if context is not None and context != own:
            raise ContextMismatchError(f"a UMat lives in OpenCV's context {own!r}, not {context!r}")
        if info is None:
            info = umat_info(umat)
        elif info.ndim not in (2, 3):
            raise InvalidTensorError(f"a UMat is shaped (H, W) or (H, W, C), not {info.shape}")
        super().__init__(umat, info, context=own, parent=parent, writable=writable)
        self._offset = int(umat.offset)

    @property
    def cl_mem(self) -> int:
        """cl_mem of the whole allocation (OpenCV marks its host copy stale: treat it as a write access)."""
        self._check()
        return int(self._native.handle(cv2().ACCESS_RW))

    def cl_mem_for(self, writes: bool) -> int:
        c = cv2()
        self._check()
        return int(self._native.handle(c.ACCESS_RW if writes else c.ACCESS_READ))

    @property
    def offset(self) -> int:
        return self._offset

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        self._check()
        step = self._info.strides[0]
        pixel = self._info.strides[1]
        y, x = offset // step, (offset % step) // pixel
        h, w = info.shape[0], info.shape[1]
        roi = cv2().UMat(self._native, (y, y + h), (x, x + w))
        return UMatTensor(roi, TensorInfo(info.shape, info.dtype, (step,) + tuple(info.strides[1:])), parent=self,
                          writable=self._writable)


def new_umat(info: TensorInfo) -> Any:
    """An uninitialised UMat for a (H, W) or (H, W, C) tensor (OpenCV picks the step)."""
    if info.ndim not in (2, 3):
        raise InvalidTensorError(f"a UMat is shaped (H, W) or (H, W, C), not {info.shape}")
    channels = info.shape[2] if info.ndim == 3 else 1
    return cv2().UMat(info.shape[0], info.shape[1], cv_type(info.dtype, channels))


# ---- wrap() ---------------------------------------------------------------------------------------------------


def _is_mat(cls: type) -> bool:
    return any(c.__name__ == "Mat" and c.__module__ == "cv2" for c in cls.__mro__)


def wrap_mat(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
             context: Context | None = None) -> Tensor | Frame:
    if context is not None and context.memory_type is not MemoryType.OPENCV:
        raise UnsupportedTypeError(f"a cv2.Mat is OPENCV memory; it cannot belong to {context!r}")
    mat = obj
    if info is not None:
        mat = as_mat(view_bytes(obj.view(np.ndarray), 0, info))
    if format is not None:
        f = frame_from_array(mat.view(np.ndarray), format)
        planes = [OpenCVTensor(as_mat(t.native), parent=mat) for t in f.tensors]
        return Frame(planes, format, f.width, f.height, native=mat)
    return OpenCVTensor(mat)


def wrap_umat(obj: Any, *, info: TensorInfo | None = None, format: FrameFormat | None = None,
              context: Context | None = None) -> Tensor | Frame:
    if context is not None and not isinstance(context, UMatContext):
        raise UnsupportedTypeError(f"a cv2.UMat belongs to OpenCV's UMatContext, not {context!r}")
    t = UMatTensor(obj, info, context=context)  # type: ignore[arg-type]
    if format is not None:
        from ..info import plane_layout

        if len(plane_layout(format)) != 1:
            raise UnsupportedTypeError(f"wrap(UMat, format=) takes packed formats only, not {format.name}")
        return Frame([t], format, t.info.shape[1], t.info.shape[0], native=obj)
    return t


register_wrapper(Wrapper("cv2.Mat", _is_mat, wrap_mat, priority=5))
register_wrapper(Wrapper("cv2.UMat", lambda c: class_in(c, "cv2", "UMat"), wrap_umat, priority=5))


# ---- doctor ---------------------------------------------------------------------------------------------------


def _probe_mat() -> list[BackendReport]:
    why = BACKEND.missing()
    if why is not None:
        return [BackendReport(BACKEND.title, False, reason=f"{why} (opencv-python-headless)")]
    return [BackendReport(BACKEND.title, True, f"opencv {cv2().__version__}", ["cpu"], "A")]


def _probe_umat() -> list[BackendReport]:
    why = UMAT_BACKEND.missing()
    if why is not None:
        return [BackendReport(UMAT_BACKEND.title, False, reason=f"{why} (opencv-python-headless)")]
    c = cv2()
    try:
        ucx = Context.default(MemoryType.OPENCV_UMAT)
        assert isinstance(ucx, UMatContext)
        d = c.ocl.Device.getDefault()
        return [BackendReport(UMAT_BACKEND.title, True, f"opencv {c.__version__}", [d.name()], "A", details={
            "OpenCL": d.OpenCLVersion(), "vendor": d.vendorName(), "cl_context": f"{ucx.cl_context:#x}",
            "owner": "OpenCV owns the shared OpenCL context; pyopencl and dpctl wrap it"})]
    except Exception as e:
        return [BackendReport(UMAT_BACKEND.title, True, f"opencv {c.__version__}", reason=str(e))]


BACKEND = register_backend(Backend("opencv", "OpenCV Mat", (MemoryType.OPENCV,), tier="A", extra="opencv",
                                   requires=("cv2",), probe=_probe_mat))
# The UMat's OpenCL context is the one pyopencl and dpctl wrap: it is made before theirs (after Level Zero's pin).
UMAT_BACKEND = register_backend(Backend("opencv_umat", "OpenCV UMat (OpenCL)", (MemoryType.OPENCV_UMAT,), tier="A",
                                        extra="opencv", requires=("cv2",), probe=_probe_umat))


def _probe() -> list[BackendReport]:
    """The Mat row and the UMat row, as doctor shows them."""
    return BACKEND.rows() + UMAT_BACKEND.rows()
