"""pairwise_kernel: ARD RBF / Matern-5/2 covariance for GP surrogates, fused so [n, m, d] is never built.

    K = pairwise_kernel(X, Y, lengthscales, kind="rbf", *, backend="auto")     # [n, m] float32

X [n, d] and Y [m, d] share a float dtype and device (unit stride along d on the Triton path); lengthscales is a [d]
positive float tensor (any float dtype) on the same device; kind is "rbf" or "matern52". Differentiable w.r.t. the
lengthscales on every backend (Triton: a fused backward kernel). Gradients w.r.t. X or Y: when X or Y requires grad,
"auto" uses the reference (torch autograd); forcing backend="triton" then raises ValueError.
"""

from __future__ import annotations

import torch

from .._checks import (
    check_interpreter,
    check_same_device,
    check_tensor,
    resolve_backend,
)
from .reference import KINDS, lengthscale_grad_reference, pairwise_kernel_reference

__all__ = ["KINDS", "lengthscale_grad_reference", "pairwise_kernel", "pairwise_kernel_reference"]


class _PairwiseTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, Y, lengthscales, kind):
        from .triton import pairwise_kernel_triton

        ctx.save_for_backward(X, Y, lengthscales)
        ctx.kind = kind
        return pairwise_kernel_triton(X, Y, lengthscales, kind)

    @staticmethod
    def backward(ctx, grad_K):
        from .triton import lengthscale_grad_triton

        X, Y, ls = ctx.saved_tensors
        g = lengthscale_grad_triton(X, Y, ls, ctx.kind, grad_K) if ctx.needs_input_grad[2] else None
        return None, None, None if g is None else g.to(ls.dtype), None


def pairwise_kernel(X: torch.Tensor, Y: torch.Tensor, lengthscales: torch.Tensor, kind: str = "rbf", *,
                    backend: str = "auto") -> torch.Tensor:
    check_tensor("X", X, ndim=2)
    check_tensor("Y", Y, ndim=2)
    if Y.dtype != X.dtype:
        raise ValueError(f"Y dtype {Y.dtype} must match X dtype {X.dtype}")
    if Y.shape[1] != X.shape[1]:
        raise ValueError(f"Y has d={Y.shape[1]} columns but X has d={X.shape[1]}; they must match")
    d = X.shape[1]
    if d < 1:
        raise ValueError("X must have d >= 1 columns")
    check_tensor("lengthscales", lengthscales, ndim=1, dtypes=(torch.float32, torch.float64, torch.float16,
                                                               torch.bfloat16))
    if lengthscales.shape[0] != d:
        raise ValueError(f"lengthscales has {lengthscales.shape[0]} entries but X has d={d}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    device = check_same_device(X=X, Y=Y, lengthscales=lengthscales)
    if not bool((lengthscales > 0).all()) or not bool(torch.isfinite(lengthscales).all()):
        raise ValueError("lengthscales must be finite and > 0")
    which = resolve_backend(backend, device)
    xy_grad = torch.is_grad_enabled() and (X.requires_grad or Y.requires_grad)
    if which == "triton" and xy_grad:
        if backend == "triton":
            raise ValueError("backend='triton' has no gradient w.r.t. X or Y; detach them or use 'reference'")
        which = "reference"
    if which == "reference":
        return pairwise_kernel_reference(X, Y, lengthscales, kind)
    for name, t in (("X", X), ("Y", Y)):
        if t.shape[0] > 0 and t.stride(1) != 1:
            raise ValueError(f"{name} must have unit stride along d for backend='triton' (call .contiguous())")
    check_interpreter(device)
    return _PairwiseTriton.apply(X, Y, lengthscales, kind)
