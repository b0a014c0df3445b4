"""Helpers the tests share: requirements (the skip policy), devices, fakes, clips, OpenCL kernels."""
