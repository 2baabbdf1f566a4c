"""ARD RBF / Matern-5/2 covariance between two point sets (pure torch; the spec, the CPU path, the baseline).

    r^2_ij = sum_k ((x_ik - y_jk) / l_k)^2
    rbf:       K = exp(-r^2 / 2)
    matern52:  K = (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)
No outputscale: multiply by it outside. r^2 is formed as |x'|^2 + |y'|^2 - 2 x'.y' on scaled inputs (a matmul, never
[n, m, d]) after subtracting a common centre (translation invariance; it shrinks the cancellation of that expansion),
clamped at 0. Differentiable by autograd w.r.t. X, Y and the lengthscales. Gradient w.r.t. the lengthscales used by
the fused backward (same formula):
    dK_ij/dl_k = F_ij * (x_ik - y_jk)^2 / l_k^3,  F = K (rbf),  F = 5/3 (1 + sqrt5 r) exp(-sqrt5 r) (matern52)
"""

from __future__ import annotations

import math

import torch

KINDS = ("rbf", "matern52")
SQRT5 = math.sqrt(5.0)


def scaled_sqdist(X: torch.Tensor, Y: torch.Tensor, lengthscales: torch.Tensor) -> torch.Tensor:
    X = X.float()
    Y = Y.float()
    ls = lengthscales.float()
    with torch.no_grad():
        centre = torch.cat([X, Y]).mean(dim=0) if X.shape[0] + Y.shape[0] > 0 else X.new_zeros(X.shape[1])
    Xs = (X - centre) / ls
    Ys = (Y - centre) / ls
    r2 = (Xs * Xs).sum(1)[:, None] + (Ys * Ys).sum(1)[None, :] - 2.0 * (Xs @ Ys.T)
    return r2.clamp_min(0.0)


def kernel_from_r2(r2: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "rbf":
        return torch.exp(-0.5 * r2)
    # sqrt at 0 has an infinite derivative; the clamp keeps autograd finite (dK/dr -> 0 there)
    r = torch.sqrt(r2.clamp_min(1e-30))
    return (1.0 + SQRT5 * r + (5.0 / 3.0) * r2) * torch.exp(-SQRT5 * r)


def pairwise_kernel_reference(X: torch.Tensor, Y: torch.Tensor, lengthscales: torch.Tensor,
                              kind: str = "rbf") -> torch.Tensor:
    return kernel_from_r2(scaled_sqdist(X, Y, lengthscales), kind)


def lengthscale_grad_reference(X, Y, lengthscales, kind, grad_K) -> torch.Tensor:
    """sum_ij G_ij dK_ij/dl_k without [n, m, d]: expand (x-y)^2 into row/column sums and one matmul."""
    X, Y, ls, G = X.float(), Y.float(), lengthscales.float(), grad_K.float()
    centre = torch.cat([X, Y]).mean(dim=0)
    Xs = (X - centre) / ls
    Ys = (Y - centre) / ls
    r2 = ((Xs * Xs).sum(1)[:, None] + (Ys * Ys).sum(1)[None, :] - 2.0 * (Xs @ Ys.T)).clamp_min(0.0)
    if kind == "rbf":
        F = torch.exp(-0.5 * r2)
    else:
        r = r2.sqrt()
        F = (5.0 / 3.0) * (1.0 + SQRT5 * r) * torch.exp(-SQRT5 * r)
    W = G * F
    s = (Xs * Xs * W.sum(1)[:, None]).sum(0) + (Ys * Ys * W.sum(0)[:, None]).sum(0) - 2.0 * (Xs * (W @ Ys)).sum(0)
    return s / ls


def pairwise_kernel_naive(X, Y, lengthscales, kind):
    """float64 [n, m, d] textbook formula (tests only)."""
    diff = (X.double()[:, None, :] - Y.double()[None, :, :]) / lengthscales.double()
    r2 = (diff ** 2).sum(-1)
    if kind == "rbf":
        return torch.exp(-0.5 * r2)
    r = r2.sqrt()
    return (1 + SQRT5 * r + 5.0 / 3.0 * r2) * torch.exp(-SQRT5 * r)
