"""preferdiff_loss: the PreferDiff cosine-error preference loss, fused forward and backward.

    loss = preferdiff_loss(pred_pos, target_pos, pred_neg, target_neg, lam=0.4, gamma=5.0, *, backend="auto")

All four inputs are [B, d] (B >= 1, d >= 1) in one float dtype on one device, each with unit stride along d (row
stride free). Returns a float32 scalar, differentiable w.r.t. all four inputs (gradients in the inputs' dtypes).
See reference.py for the formula and where the batch mean is taken (as in lswhim/PreferDiff).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import (
    check_float,
    check_interpreter,
    check_same_device,
    check_tensor,
    resolve_backend,
)
from .reference import EPS, preferdiff_loss_reference

__all__ = ["preferdiff_loss", "preferdiff_loss_reference"]

_NAMES = ("pred_pos", "target_pos", "pred_neg", "target_neg")


class _PreferDiffTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred_pos, target_pos, pred_neg, target_neg, lam, gamma, eps):
        from .triton import cos_err_sums_triton

        B = pred_pos.shape[0]
        sums = cos_err_sums_triton(pred_pos, target_pos, pred_neg, target_neg, eps)
        l_pos, l_neg = sums[0] / B, sums[1] / B
        z = -gamma * (l_pos - l_neg)
        loss = -(1.0 - lam) * F.logsigmoid(z) + lam * l_pos
        ctx.save_for_backward(pred_pos, target_pos, pred_neg, target_neg, z)
        ctx.lam, ctx.gamma, ctx.eps = lam, gamma, eps
        return loss, l_pos, l_neg

    @staticmethod
    def backward(ctx, g_loss, g_pos, g_neg):
        from .triton import preferdiff_grads_triton

        pred_pos, target_pos, pred_neg, target_neg, z = ctx.saved_tensors
        B = pred_pos.shape[0]
        s = torch.sigmoid(-z)  # d(-logsigmoid(z))/dz = -sigmoid(-z); dz/dL_pos = -gamma
        d_pos = g_loss * ((1.0 - ctx.lam) * ctx.gamma * s + ctx.lam) + g_pos
        d_neg = -g_loss * (1.0 - ctx.lam) * ctx.gamma * s + g_neg
        coef = (torch.stack([d_pos, d_neg]) / B).float()
        gpp, gtp, gpn, gtn = preferdiff_grads_triton(pred_pos, target_pos, pred_neg, target_neg, coef, ctx.eps)
        return gpp, gtp, gpn, gtn, None, None, None


def preferdiff_loss(pred_pos: torch.Tensor, target_pos: torch.Tensor, pred_neg: torch.Tensor,
                    target_neg: torch.Tensor, lam: float = 0.4, gamma: float = 5.0, *, eps: float = EPS,
                    return_terms: bool = False, backend: str = "auto"):
    tensors = dict(zip(_NAMES, (pred_pos, target_pos, pred_neg, target_neg), strict=True))
    for name, t in tensors.items():
        check_tensor(name, t, ndim=2)
    shape, dtype = pred_pos.shape, pred_pos.dtype
    for name, t in tensors.items():
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but pred_pos has {tuple(shape)}; they must match")
        if t.dtype != dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but pred_pos has {dtype}; they must match")
    if shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"pred_pos must be [B, d] with B >= 1 and d >= 1, got {tuple(shape)}")
    lam = check_float("lam", lam, lo=0.0, hi=1.0)
    gamma = check_float("gamma", gamma)
    eps = check_float("eps", eps, lo=0.0, lo_open=True)
    device = check_same_device(**tensors)
    which = resolve_backend(backend, device)
    if which == "reference":
        return preferdiff_loss_reference(pred_pos, target_pos, pred_neg, target_neg, lam, gamma, eps=eps,
                                         return_terms=return_terms)
    for name, t in tensors.items():
        if t.stride(1) != 1:
            raise ValueError(f"{name} must have unit stride along d for backend='triton' (call .contiguous())")
    check_interpreter(device)
    loss, l_pos, l_neg = _PreferDiffTriton.apply(pred_pos, target_pos, pred_neg, target_neg, lam, gamma, eps)
    return (loss, l_pos, l_neg) if return_terms else loss
