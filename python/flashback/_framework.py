"""Small adapters over the array frameworks flashback accepts (PyTorch, NumPy, CuPy).

The C++ extension reads any DLPack array without copying; what it cannot do is create arrays in
the caller's framework. This module does that (outputs, index arrays, workspace), and fetches
the caller's current CUDA stream, so results come back in the framework the inputs came in.
"""

from __future__ import annotations

import sys

_FP8_NAMES = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


class Framework:
    """Operations flashback needs from an array framework (NumPy-like API by default)."""

    name = "numpy"
    upcast_dtype = "float32"  # what an fp8 q becomes (NumPy has no bfloat16)

    def __init__(self, xp):
        self.xp = xp

    # --- dtypes -------------------------------------------------------------------------
    def dtype(self, name):
        return getattr(self.xp, name)

    def dtype_name(self, x) -> str:
        return str(x.dtype)

    def is_fp8(self, x) -> bool:
        return self.dtype_name(x) in _FP8_NAMES

    def fp8_as_uint8(self, x):
        """An fp8 array viewed as uint8 plus its name for the C++ side (no copy)."""
        return x.view(self.xp.uint8), _FP8_NAMES[self.dtype_name(x)]

    # --- creation -----------------------------------------------------------------------
    def empty(self, shape, dtype, like):
        return self.xp.empty(tuple(shape), dtype=self.dtype(dtype))

    def full(self, shape, value, dtype, like):
        return self.xp.full(tuple(shape), value, dtype=self.dtype(dtype))

    def arange(self, start, stop, step, dtype, like):
        return self.xp.arange(start, stop, step, dtype=self.dtype(dtype))

    # --- transforms ---------------------------------------------------------------------
    def astype(self, x, dtype):
        return x if self.dtype_name(x) == dtype else x.astype(self.dtype(dtype))

    def last_contiguous(self, x):
        """x itself when its last dimension has stride 1 (or size <= 1), else a copy."""
        if x.ndim == 0 or x.shape[-1] <= 1 or x.strides[-1] == x.itemsize:
            return x
        return self.xp.ascontiguousarray(x)

    def reshape(self, x, shape):
        return x.reshape(tuple(shape))

    def transpose(self, x, a, b):
        return self.xp.swapaxes(x, a, b)

    def contiguous(self, x):
        return self.xp.ascontiguousarray(x)

    def broadcast_to(self, x, shape):
        return self.xp.broadcast_to(x, tuple(shape))

    def small_readonly(self, x):
        """A small array the kernels only read. NumPy exports read-only (e.g. broadcast) arrays
        through the buffer protocol only, which nanobind does not take for keyword arguments,
        so those are copied (PyTorch's expand() views cross as they are)."""
        flags = getattr(x, "flags", None)
        if flags is not None and not flags.writeable:
            return self.xp.ascontiguousarray(x)
        return x

    def repeat(self, x, n, axis):
        return self.xp.repeat(x, n, axis=axis)

    def searchsorted(self, sorted_seq, values):
        """Index i with sorted_seq[i-1] <= v < sorted_seq[i] (side='right')."""
        return self.xp.searchsorted(sorted_seq, values, side="right")

    # --- device -------------------------------------------------------------------------
    def is_cuda(self, x) -> bool:
        return False

    def current_stream(self, x) -> int:
        return 0


class Torch(Framework):
    name = "torch"
    upcast_dtype = "bfloat16"

    def dtype_name(self, x) -> str:
        return str(x.dtype).replace("torch.", "")

    def fp8_as_uint8(self, x):
        return x.view(self.xp.uint8), _FP8_NAMES[self.dtype_name(x)]

    def empty(self, shape, dtype, like):
        return self.xp.empty(tuple(shape), dtype=self.dtype(dtype), device=like.device)

    def full(self, shape, value, dtype, like):
        return self.xp.full(tuple(shape), value, dtype=self.dtype(dtype), device=like.device)

    def arange(self, start, stop, step, dtype, like):
        return self.xp.arange(start, stop, step, dtype=self.dtype(dtype), device=like.device)

    def astype(self, x, dtype):
        return x if self.dtype_name(x) == dtype else x.to(self.dtype(dtype))

    def last_contiguous(self, x):
        if x.requires_grad:  # DLPack refuses tensors that require grad; no copy either way
            x = x.detach()
        if x.dim() == 0 or x.shape[-1] <= 1 or x.stride(-1) == 1:
            return x
        return x.contiguous()

    def transpose(self, x, a, b):
        return x.transpose(a, b)

    def contiguous(self, x):
        return x.contiguous()

    def broadcast_to(self, x, shape):
        return x.expand(tuple(shape))

    def small_readonly(self, x):
        return x

    def repeat(self, x, n, axis):
        return x.repeat_interleave(n, dim=axis)

    def searchsorted(self, sorted_seq, values):
        return self.xp.searchsorted(sorted_seq, values, right=True)

    def is_cuda(self, x) -> bool:
        return x.is_cuda

    def current_stream(self, x) -> int:
        if not x.is_cuda:
            return 0
        return self.xp.cuda.current_stream(x.device).cuda_stream


class CuPy(Framework):
    name = "cupy"

    def empty(self, shape, dtype, like):
        with like.device:
            return self.xp.empty(tuple(shape), dtype=self.dtype(dtype))

    def full(self, shape, value, dtype, like):
        with like.device:
            return self.xp.full(tuple(shape), value, dtype=self.dtype(dtype))

    def arange(self, start, stop, step, dtype, like):
        with like.device:
            return self.xp.arange(start, stop, step, dtype=self.dtype(dtype))

    def is_cuda(self, x) -> bool:
        return True

    def current_stream(self, x) -> int:
        return self.xp.cuda.get_current_stream().ptr


def framework_of(x) -> Framework:
    """The framework of array x. Arrays of other DLPack frameworks are refused with a clear
    error: flashback writes outputs and caches in place, which needs a mutable array type."""
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return Torch(sys.modules["torch"])
    if module == "numpy":
        return Framework(sys.modules["numpy"])
    if module == "cupy":
        return CuPy(sys.modules["cupy"])
    raise TypeError(
        f"flashback: arrays of type {type(x).__module__}.{type(x).__name__} are not supported "
        "here (PyTorch, NumPy and CuPy are); flashback._C takes any DLPack array with "
        "caller-allocated outputs"
    )
