"""VL-Cache-style KV-cache compression (pure torch; the spec, the CPU path, the benchmark baseline).

Definitions (see /work/shared/algorithms/generation.md):
- Tail statistics. attn_tail [L, H, tau, m] holds the attention probabilities of the prompt's last tau query rows over
  all m prompt tokens (causally masked entries are 0). An entry is *kept* when A_qj >= p * max_j A_qj. Layer density
  d_l = kept entries / (H * tau * m) (so masked entries count as removed; sparsity = 1 - d_l, averaged over heads and
  rows). Token scores s[l, h, j] = sum_q A[l, h, q, j] (column sums over the tail rows, per head).
- Layer budgets. Fraction beta_l = clip(c * L * d_l / sum(d), 0.01, 1). VL-Cache uses c = alpha. With
  ``redistribute=True`` (the default) c is solved so that sum_l beta_l = alpha * L, i.e. retention a clipped layer
  cannot use is handed to the others: whenever no clip binds at c = alpha this is exactly VL-Cache's formula, and at
  alpha = 1 every layer keeps all m tokens. Integer token budgets n_l (per head of layer l) come from the reals
  beta_l * m by largest-remainder apportionment (ties -> lower layer): |n_l - beta_l m| < 1, 0 <= n_l <= m, and
  sum_l n_l = T exactly, T = floor(alpha * L * m + 1/2) with redistribution, T = floor(sum_l beta_l m + 1/2) without.
  alpha must lie in [0.01, 1] (the clip range).
- Layers of different sizes (a model that mixes sliding-window and global attention layers: a sliding layer holds at
  most its window). With ``capacity`` c_l (tokens per head layer l holds) the same rule is applied to token counts:
  n_l = clip(c * C * d_l * c_l / sum(d * c), lo * c_l, hi * c_l) with C = sum c, so a layer's budget is proportional to
  its count of kept tail entries (d_l * c_l), as VL-Cache's is when every layer holds m; c is solved so that
  sum n_l = alpha * C, and the integer budgets sum to floor(alpha * C + 1/2), each in [0, c_l]. With every c_l = m
  this is exactly the rule above.
- Compression. For each (l, h): the most recent w = min(window, n_l) tokens are kept, plus the n_l - w highest-scoring
  of the older tokens (ties -> earlier position). Kept tokens stay in their original order. The compact cache is
  [L, H, max n, D] zero-padded, with lengths [L, H] and the kept positions [L, H, max n] (-1 padded).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


class KVBudget(NamedTuple):
    budgets: torch.Tensor  # [L] int64 tokens kept per head of each layer
    scores: torch.Tensor  # [L, H, m] float32 column sums of the tail attention
    density: torch.Tensor  # [L] float32 fraction of tail entries >= p * row max


class CompressedKV(NamedTuple):
    k: torch.Tensor  # [L, H, max_len, D]
    v: torch.Tensor  # [L, H, max_len, Dv]
    lengths: torch.Tensor  # [L, H] int64
    positions: torch.Tensor  # [L, H, max_len] int64, -1 padded


def tail_stats_reference(attn_tail: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores [L, H, m], density [L]) from materialised tail attention rows; one layer at a time in float32."""
    L, H, tau, m = attn_tail.shape
    scores = torch.empty(L, H, m, dtype=torch.float32, device=attn_tail.device)
    kept = torch.empty(L, dtype=torch.float64, device=attn_tail.device)
    for layer in range(L):
        a = attn_tail[layer].float()
        rowmax = a.amax(dim=-1, keepdim=True)
        kept[layer] = (a >= p * rowmax).sum(dtype=torch.float64)
        scores[layer] = a.sum(dim=1)
    return scores, (kept / (H * tau * m)).float()


def qk_tail_stats_reference(q_tail: torch.Tensor, keys: torch.Tensor, p: float,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Same statistics from the tail queries [L, H, tau, D] and the prompt keys [L, Hkv, m, D] (causal softmax)."""
    L, H, tau, D = q_tail.shape
    Hkv, m = keys.shape[1], keys.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    G = H // Hkv
    pos_q = torch.arange(m - tau, m, device=q_tail.device)
    causal = torch.arange(m, device=q_tail.device)[None, :] <= pos_q[:, None]  # [tau, m]
    scores = torch.empty(L, H, m, dtype=torch.float32, device=q_tail.device)
    density = torch.empty(L, dtype=torch.float32, device=q_tail.device)
    for layer in range(L):
        kl = keys[layer].float().repeat_interleave(G, dim=0)  # [H, m, D]
        s = torch.einsum("htd,hmd->htm", q_tail[layer].float(), kl) * scale
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
        sc, de = tail_stats_reference(a[None], p)
        scores[layer], density[layer] = sc[0], de[0]
    return scores, density


def _largest_remainder(reals: torch.Tensor, total: int, cap: torch.Tensor) -> torch.Tensor:
    n = torch.minimum(torch.floor(reals).long().clamp_min(0), cap)
    rem = total - int(n.sum())
    frac = reals - n.double()
    L = reals.numel()
    if rem > 0:
        order = sorted(range(L), key=lambda i: (-float(frac[i]), i))
        for i in order:
            if rem == 0:
                break
            if n[i] < cap[i]:
                n[i] += 1
                rem -= 1
    elif rem < 0:
        order = sorted(range(L), key=lambda i: (float(frac[i]), -i))
        for i in order:
            if rem == 0:
                break
            if n[i] > 0:
                n[i] -= 1
                rem += 1
    return n


def layer_budgets(density: torch.Tensor, alpha: float, m: int, *, redistribute: bool = True,
                  lo: float = 0.01, hi: float = 1.0, capacity: torch.Tensor | None = None) -> torch.Tensor:
    """Integer token budgets [L] (int64, on density's device) from layer densities; see the module docstring.
    capacity [L]: tokens each layer holds (default: every layer holds m)."""
    d = density.detach().double().cpu()
    L = d.numel()
    cap = (torch.full((L,), m, dtype=torch.int64) if capacity is None
           else capacity.detach().cpu().long().clamp(0, m))
    c_ = cap.double()
    C = float(c_.sum())
    mass = d * c_
    w = mass / mass.sum() * C / c_.clamp_min(1) if float(mass.sum()) > 0 else torch.ones(L, dtype=torch.float64)
    if redistribute:
        target = alpha * C
        c_lo, c_hi = 0.0, 1.0 / float(w[w > 0].min()) if bool((w > 0).any()) else 1.0
        for _ in range(200):
            c_mid = 0.5 * (c_lo + c_hi)
            if float(((w * c_mid).clamp(lo, hi) * c_).sum()) < target:
                c_lo = c_mid
            else:
                c_hi = c_mid
        c = c_hi
        # exact c for the clipped sets bisection found (removes the bisection's last-bit error)
        beta = (w * c).clamp(lo, hi)
        free = (w * c > lo) & (w * c < hi)
        if bool(free.any()):
            fixed = float((beta[~free] * c_[~free]).sum())
            c_exact = (target - fixed) / float((w[free] * c_[free]).sum())
            cand = (w * c_exact).clamp(lo, hi)
            if bool((((w * c_exact) > lo) & ((w * c_exact) < hi) == free).all()):
                beta = cand
        total = math.floor(alpha * C + 0.5)
    else:
        beta = (w * alpha).clamp(lo, hi)
        total = math.floor(float((beta * c_).sum()) + 0.5)
    return _largest_remainder(beta * c_, total, cap).to(density.device)


def select_positions(scores: torch.Tensor, budgets: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Kept positions [L, H, max n] (ascending, -1 padded) and lengths [L, H] (see module docstring)."""
    L, H, m = scores.shape
    b = budgets if budgets.dim() == 2 else budgets[:, None].expand(L, H)
    b = b.to(scores.device).long()
    w = b.clamp(max=window)
    pos = torch.arange(m, device=scores.device)
    s = scores.float().masked_fill(pos[None, None, :] >= (m - w)[:, :, None], float("inf"))
    order = torch.sort(s, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, pos.expand(L, H, m).contiguous())
    keep = rank < b[:, :, None]
    max_len = int(b.max()) if b.numel() else 0
    kept = torch.where(keep, pos, m).sort(dim=-1).values[:, :, :max_len]
    return kept.masked_fill(kept == m, -1), b.clone()


def gather_reference(k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    idx = positions.clamp_min(0)[..., None]
    valid = (positions >= 0)[..., None]
    kc = torch.gather(k, 2, idx.expand(*idx.shape[:3], k.shape[-1]))
    vc = torch.gather(v, 2, idx.expand(*idx.shape[:3], v.shape[-1]))
    return kc.masked_fill(~valid, 0), vc.masked_fill(~valid, 0)


def kv_compress_reference(k, v, scores, budgets, window) -> CompressedKV:
    positions, lengths = select_positions(scores, budgets, window)
    kc, vc = gather_reference(k, v, positions)
    return CompressedKV(kc, vc, lengths, positions)
