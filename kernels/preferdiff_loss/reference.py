"""PreferDiff cosine-error preference loss (pure torch; the spec, the CPU path and the benchmark baseline).

    cos_err(a, b) = mean_i (cos(a_i, b_i) - 1)^2          (mean over the batch, as in lswhim/PreferDiff)
    L_pos = cos_err(target_pos, pred_pos);  L_neg = cos_err(target_neg, pred_neg)
    L = -(1 - lam) * logsigmoid(-gamma * (L_pos - L_neg)) + lam * L_pos

Where the mean is taken: the official ``PreferenceDiffusion.p_losses`` (diffusion.py) reduces each cosine loss to a
batch mean first (``torch.mean((dot - 1) ** 2)``) and applies logsigmoid to the difference of the two *scalars*; it is
not a per-sample preference averaged afterwards. We do the same. The official code also adds ``+ 1e-8`` inside the
logsigmoid; that constant shift (a 1e-8 change of the loss) is omitted here. cos uses F.normalize's convention:
each vector is divided by max(||x||, eps), eps = 1e-12, so a zero vector has cos 0 (not NaN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-12


def cosine_rows(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    a = a.float()
    b = b.float()
    na = a.norm(dim=1).clamp_min(eps)
    nb = b.norm(dim=1).clamp_min(eps)
    return (a * b).sum(dim=1) / (na * nb)


def cos_err(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return ((cosine_rows(a, b, eps) - 1.0) ** 2).mean()


def preferdiff_loss_reference(pred_pos, target_pos, pred_neg, target_neg, lam: float = 0.4, gamma: float = 5.0,
                              *, eps: float = EPS, return_terms: bool = False):
    """Differentiable (torch autograd) w.r.t. all four inputs; returns a float32 scalar (and L_pos, L_neg)."""
    l_pos = cos_err(target_pos, pred_pos, eps)
    l_neg = cos_err(target_neg, pred_neg, eps)
    loss = -(1.0 - lam) * F.logsigmoid(-gamma * (l_pos - l_neg)) + lam * l_pos
    return (loss, l_pos, l_neg) if return_terms else loss


def preferdiff_loss_naive(pred_pos, target_pos, pred_neg, target_neg, lam, gamma):
    """float64 textbook formula with F.normalize/F.cosine-free code paths (tests only)."""
    def ce(a, b):
        a, b = a.double(), b.double()
        c = torch.stack([torch.dot(a[i], b[i]) / (max(a[i].norm(), EPS) * max(b[i].norm(), EPS))
                         for i in range(a.shape[0])])
        return ((c - 1) ** 2).mean()

    lp, ln = ce(target_pos, pred_pos), ce(target_neg, pred_neg)
    x = -gamma * (lp - ln)
    return -(1 - lam) * (-torch.log1p(torch.exp(-x)) if x >= 0 else x - torch.log1p(torch.exp(x))) + lam * lp
