"""One decode step of attention over a variable-length KV cache (pure torch; the spec, CPU path, baseline).

    out[b, h] = softmax_j(q[b, h] . k[b, g, j] * scale, j < lengths[b, g]) @ v[b, g, :lengths[b, g]]
with g = h // (H / Hkv) (grouped-query attention; Hkv = H is plain multi-head). Lengths vary per sequence *and* per
KV head (after VL-Cache compression each head keeps its own tokens). Positions j >= lengths are ignored whatever they
hold. A head with length 0 attends to nothing: its output is 0. Scores and the softmax are computed in float32;
the output has q's dtype.
"""

from __future__ import annotations

import math

import torch


def decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               lengths: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    B, H, D = q.shape
    Hkv, M = k_cache.shape[1], k_cache.shape[2]
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qg = q.float().view(B, Hkv, G, D)
    s = torch.einsum("bhgd,bhmd->bhgm", qg, k_cache.float()) * scale  # [B, Hkv, G, M]
    valid = torch.arange(M, device=q.device)[None, None, :] < lengths[:, :, None]  # [B, Hkv, M]
    s = s.masked_fill(~valid[:, :, None, :], float("-inf"))
    mx = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - mx.clamp_min(torch.finfo(torch.float32).min))  # rows with no key: exp(-inf) = 0
    denom = p.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhgm,bhmd->bhgd", p, v_cache.float()) / denom.clamp_min(1e-30)
    return out.reshape(B, H, v_cache.shape[-1]).to(q.dtype)


def decode_attention_naive(q, k_cache, v_cache, lengths, scale=None):
    """float64 loop over (b, h) with explicit slicing (tests only)."""
    B, H, D = q.shape
    Hkv = k_cache.shape[1]
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    out = torch.zeros(B, H, v_cache.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            g = h // G
            n = int(lengths[b, g])
            if n == 0:
                continue
            s = (k_cache[b, g, :n].double() @ q[b, h].double()) * scale
            out[b, h] = torch.softmax(s, 0) @ v_cache[b, g, :n].double()
    return out
