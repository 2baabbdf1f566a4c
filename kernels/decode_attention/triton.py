"""Split-KV decode attention (flash-decoding) in Triton.

Stage 1: program (b, kv-head g, split s) loads the G query heads that share g as a [G, D] block, walks its slice of the
cache (only up to lengths[b, g]; slices beyond it exit at once) in BLOCK_N rows with an online softmax, and writes the
unnormalised partial output [G, Dv], its running max and its sum of exponentials. Stage 2 (torch, tiny): rescale the
partials by exp(m_s - max_s m_s) and normalise. Heads with length 0 give 0.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, len_ptr, o_ptr, m_ptr, l_ptr,
                   Hkv, D, Dv, n_per_split, scale,
                   s_qb, s_qh, s_kb, s_kh, s_km, s_vb, s_vh, s_vm, s_lb,
                   G: tl.constexpr, BG: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # b * batch stride can pass 2^31 for long caches
    g = tl.program_id(1).to(tl.int64)
    sp = tl.program_id(2)
    S = tl.num_programs(2)
    n = tl.load(len_ptr + b * s_lb + g)
    rg = tl.arange(0, BG)
    g_ok = rg < G
    cd = tl.arange(0, BD)
    cdv = tl.arange(0, BDV)
    q = tl.load(q_ptr + b * s_qb + (g * G + rg)[:, None] * s_qh + cd[None, :],
                mask=g_ok[:, None] & (cd < D)[None, :], other=0.0).to(tl.float32)
    m_i = tl.full((BG,), float("-inf"), tl.float32)
    l_i = tl.zeros((BG,), tl.float32)
    acc = tl.zeros((BG, BDV), tl.float32)
    start = sp * n_per_split
    end = tl.minimum(n, start + n_per_split)
    for n0 in range(start, end, BN):
        rn = n0 + tl.arange(0, BN)
        n_ok = rn < end
        kt = tl.load(k_ptr + b * s_kb + g * s_kh + rn[None, :] * s_km + cd[:, None],
                     mask=n_ok[None, :] & (cd < D)[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, :, None] * kt[None, :, :], axis=1) * scale  # [BG, BN]
        s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        v = tl.load(v_ptr + b * s_vb + g * s_vh + rn[:, None] * s_vm + cdv[None, :],
                    mask=n_ok[:, None] & (cdv < Dv)[None, :], other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    base = (b * Hkv + g) * S + sp
    tl.store(o_ptr + (base * BG + rg)[:, None] * Dv + cdv[None, :], acc, mask=g_ok[:, None] & (cdv < Dv)[None, :])
    tl.store(m_ptr + base * BG + rg, m_i, mask=g_ok)
    tl.store(l_ptr + base * BG + rg, l_i, mask=g_ok)


def decode_attention_triton(q, k_cache, v_cache, lengths, scale: float | None = None,
                            splits: int | None = None) -> torch.Tensor:
    B, H, D = q.shape
    Hkv, M = k_cache.shape[1], k_cache.shape[2]
    Dv = v_cache.shape[3]
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    BG = triton.next_power_of_2(G)
    BD = triton.next_power_of_2(D)
    BDV = triton.next_power_of_2(Dv)
    BN = max(16, min(64, 8192 // (BG * max(BD, BDV))))
    if splits is None:
        if q.device.type == "cuda":
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
            splits = max(1, min(triton.cdiv(M, 256), triton.cdiv(2 * sms, B * Hkv)))
        else:
            splits = 2
    splits = max(1, min(splits, triton.cdiv(max(M, 1), BN)))
    n_per_split = triton.cdiv(triton.cdiv(max(M, 1), splits), BN) * BN
    lengths = lengths.to(torch.int32).contiguous()
    o = torch.empty(B, Hkv, splits, BG, Dv, dtype=torch.float32, device=q.device)
    mx = torch.empty(B, Hkv, splits, BG, dtype=torch.float32, device=q.device)
    denom = torch.empty_like(mx)
    _decode_kernel[(B, Hkv, splits)](
        q, k_cache, v_cache, lengths, o, mx, denom, Hkv, D, Dv, n_per_split, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), lengths.stride(0),
        G=G, BG=BG, BN=BN, BD=BD, BDV=BDV)
    o, mx, denom = o[:, :, :, :G], mx[:, :, :, :G], denom[:, :, :, :G]
    top = mx.amax(dim=2, keepdim=True)
    w = torch.exp(mx - top.clamp_min(torch.finfo(torch.float32).min))  # splits that saw nothing: exp(-inf) = 0
    w = torch.nan_to_num(w, nan=0.0)
    num = (o * w[..., None]).sum(dim=2)  # [B, Hkv, G, Dv]
    den = (denom * w).sum(dim=2)[..., None]
    out = num / den.clamp_min(1e-30)
    return out.reshape(B, H, Dv).to(q.dtype)
