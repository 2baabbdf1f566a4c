"""Input validation shared by the public ops (torch only; no project imports).

Every public op validates before dispatching, so a bad call raises ``ValueError`` naming the argument instead of
segfaulting inside a kernel or returning garbage.
"""

from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BACKENDS = ("auto", "reference", "triton")


def check_tensor(name: str, x, *, ndim: int | None = None, dtypes=FLOAT_DTYPES) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")  # (API: ValueError)
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if dtypes is not None and x.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"{name} must have dtype in ({allowed}), got {str(x.dtype).replace('torch.', '')}")
    return x


def check_same_device(**tensors) -> torch.device:
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name} is on {dev} but {first_name} is on {first}; all tensors must share one device")
    return first


def check_int(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_floating_point:
            value = int(value)
        else:
            raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def check_float(name: str, value, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")  # (API: ValueError)
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def resolve_backend(backend, device: torch.device) -> str:
    """'auto' -> 'triton' for CUDA tensors, 'reference' otherwise; 'triton' on CPU runs under the interpreter."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "reference"
    if backend == "triton" and device.type not in ("cuda", "cpu"):
        raise ValueError(f"backend='triton' needs CUDA tensors (or CPU under TRITON_INTERPRET=1), got {device}")
    return backend


def check_interpreter(device: torch.device) -> None:
    """Triton on CPU tensors only works under the interpreter; say so instead of crashing in the launcher."""
    import os

    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true", "True"):
        raise ValueError("backend='triton' with CPU tensors needs TRITON_INTERPRET=1 set before triton is imported")
