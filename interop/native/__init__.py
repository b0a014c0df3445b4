"""ctypes bindings where no maintained Python binding exists (libva, Level Zero, dma-buf ioctls, OpenCL USM)."""
