"""VL-Cache kernels in Triton.

- _attn_stats_kernel: program (l*H + h, block of BN tokens) walks the tau tail rows of a materialised attn_tail in
  blocks of BT, counts entries >= p * row max (row maxima from a torch amax pass) and writes the column sums of its
  tokens. Counts go to a [L*H, blocks] buffer summed in torch (deterministic).
- qk path (softmax(QK^T) never materialised): _qk_rowstats_kernel computes each tail row's max logit and
  log-sum-exp with an online pass over the keys (causal: tail row i sits at position m - tau + i);
  _qk_colstats_kernel recomputes QK^T per [BT, BN] tile, forms A = exp(s - lse), and accumulates column sums and
  kept counts (A >= p * exp(max - lse)) exactly as above. GQA: head h reads KV head h // (H / Hkv).
- _gather_kernel: copies the kept rows (positions from the torch selection, -1 = padding -> zeros) of k and v into
  the compact cache.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_stats_kernel(a_ptr, rmax_ptr, sc_ptr, cnt_ptr, H, tau, m, p,
                       s_al, s_ah, s_at, s_am, BT: tl.constexpr, BN: tl.constexpr):
    lh = tl.program_id(0)
    nb = tl.program_id(1)
    layer = lh // H
    head = lh % H
    cols = nb * BN + tl.arange(0, BN)
    c_ok = cols < m
    colsum = tl.zeros((BN,), tl.float32)
    cnt = tl.zeros((BN,), tl.int32)
    base = a_ptr + layer.to(tl.int64) * s_al + head.to(tl.int64) * s_ah
    for t0 in range(0, tau, BT):
        rows = t0 + tl.arange(0, BT)
        r_ok = rows < tau
        msk = r_ok[:, None] & c_ok[None, :]
        a = tl.load(base + rows[:, None] * s_at + cols[None, :] * s_am, mask=msk, other=0.0).to(tl.float32)
        rmax = tl.load(rmax_ptr + lh * tau + rows, mask=r_ok, other=0.0)
        kept = (a >= p * rmax[:, None]) & msk
        cnt += tl.sum(kept.to(tl.int32), axis=0)
        colsum += tl.sum(a, axis=0)
    tl.store(sc_ptr + lh.to(tl.int64) * m + cols, colsum, mask=c_ok)
    tl.store(cnt_ptr + lh * tl.num_programs(1) + nb, tl.sum(cnt, axis=0))


def attn_tail_stats_triton(attn_tail: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    L, H, tau, m = attn_tail.shape
    rmax = attn_tail.amax(dim=-1).float().contiguous()  # [L, H, tau]
    BN = 128
    BT = min(32, triton.next_power_of_2(max(tau, 1)))
    nblocks = triton.cdiv(m, BN)
    scores = torch.empty(L, H, m, dtype=torch.float32, device=attn_tail.device)
    cnt = torch.empty(L * H, nblocks, dtype=torch.int32, device=attn_tail.device)
    _attn_stats_kernel[(L * H, nblocks)](attn_tail, rmax, scores, cnt, H, tau, m, p, *attn_tail.stride(),
                                         BT=BT, BN=BN)
    kept = cnt.view(L, H * nblocks).sum(dim=1, dtype=torch.float64)
    return scores, (kept / (H * tau * m)).float()


@triton.jit
def _qk_tile(q, k_base, cols, c_ok, cd, D, s_km, scale, IEEE: tl.constexpr):
    kt = tl.load(k_base + cols[None, :] * s_km + cd[:, None], mask=c_ok[None, :] & (cd < D)[:, None],
                 other=0.0).to(tl.float32)
    if IEEE:
        s = tl.dot(q, kt, input_precision="ieee")
    else:
        s = tl.dot(q, kt)
    return s * scale


@triton.jit
def _qk_rowstats_kernel(q_ptr, k_ptr, mx_ptr, lse_ptr, H, G, tau, m, D, scale,
                        s_ql, s_qh, s_qt, s_kl, s_kh, s_km,
                        BT: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, IEEE: tl.constexpr):
    lh = tl.program_id(0)
    layer = lh // H
    head = lh % H
    rows = tl.program_id(1) * BT + tl.arange(0, BT)
    r_ok = rows < tau
    cd = tl.arange(0, BD)
    q = tl.load(q_ptr + layer.to(tl.int64) * s_ql + head.to(tl.int64) * s_qh + rows[:, None] * s_qt + cd[None, :],
                mask=r_ok[:, None] & (cd < D)[None, :], other=0.0).to(tl.float32)
    k_base = k_ptr + layer.to(tl.int64) * s_kl + (head // G).to(tl.int64) * s_kh
    qpos = m - tau + rows
    m_i = tl.full((BT,), float("-inf"), tl.float32)
    l_i = tl.zeros((BT,), tl.float32)
    for n0 in range(0, m, BN):
        cols = n0 + tl.arange(0, BN)
        c_ok = cols < m
        s = _qk_tile(q, k_base, cols, c_ok, cd, D, s_km, scale, IEEE)
        s = tl.where(c_ok[None, :] & (cols[None, :] <= qpos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    tl.store(mx_ptr + lh * tau + rows, m_i, mask=r_ok)
    tl.store(lse_ptr + lh * tau + rows, m_i + tl.log(l_i), mask=r_ok)


@triton.jit
def _qk_colstats_kernel(q_ptr, k_ptr, mx_ptr, lse_ptr, sc_ptr, cnt_ptr, H, G, tau, m, D, scale, p,
                        s_ql, s_qh, s_qt, s_kl, s_kh, s_km,
                        BT: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, IEEE: tl.constexpr):
    lh = tl.program_id(0)
    nb = tl.program_id(1)
    layer = lh // H
    head = lh % H
    cols = nb * BN + tl.arange(0, BN)
    c_ok = cols < m
    cd = tl.arange(0, BD)
    k_base = k_ptr + layer.to(tl.int64) * s_kl + (head // G).to(tl.int64) * s_kh
    colsum = tl.zeros((BN,), tl.float32)
    cnt = tl.zeros((BN,), tl.int32)
    for t0 in range(0, tau, BT):
        rows = t0 + tl.arange(0, BT)
        r_ok = rows < tau
        q = tl.load(q_ptr + layer.to(tl.int64) * s_ql + head.to(tl.int64) * s_qh + rows[:, None] * s_qt
                    + cd[None, :], mask=r_ok[:, None] & (cd < D)[None, :], other=0.0).to(tl.float32)
        s = _qk_tile(q, k_base, cols, c_ok, cd, D, s_km, scale, IEEE)
        mx = tl.load(mx_ptr + lh * tau + rows, mask=r_ok, other=0.0)
        lse = tl.load(lse_ptr + lh * tau + rows, mask=r_ok, other=0.0)
        valid = r_ok[:, None] & c_ok[None, :] & (cols[None, :] <= (m - tau + rows)[:, None])
        a = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        amax = tl.exp(mx - lse)
        kept = (a >= p * amax[:, None]) & r_ok[:, None] & c_ok[None, :]
        cnt += tl.sum(kept.to(tl.int32), axis=0)
        colsum += tl.sum(a, axis=0)
    tl.store(sc_ptr + lh.to(tl.int64) * m + cols, colsum, mask=c_ok)
    tl.store(cnt_ptr + lh * tl.num_programs(1) + nb, tl.sum(cnt, axis=0))


def qk_tail_stats_triton(q_tail, keys, p: float, scale: float | None = None):
    L, H, tau, D = q_tail.shape
    Hkv, m = keys.shape[1], keys.shape[2]
    G = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    BD = max(16, triton.next_power_of_2(D))
    BT = min(64, max(16, triton.next_power_of_2(tau)))
    BN = 64 if BD <= 128 else 32
    ieee = q_tail.dtype == torch.float32
    dev = q_tail.device
    mx = torch.empty(L, H, tau, dtype=torch.float32, device=dev)
    lse = torch.empty_like(mx)
    strides = (q_tail.stride(0), q_tail.stride(1), q_tail.stride(2), keys.stride(0), keys.stride(1), keys.stride(2))
    _qk_rowstats_kernel[(L * H, triton.cdiv(tau, BT))](q_tail, keys, mx, lse, H, G, tau, m, D, scale, *strides,
                                                       BT=BT, BN=BN, BD=BD, IEEE=ieee)
    nblocks = triton.cdiv(m, BN)
    scores = torch.empty(L, H, m, dtype=torch.float32, device=dev)
    cnt = torch.empty(L * H, nblocks, dtype=torch.int32, device=dev)
    _qk_colstats_kernel[(L * H, nblocks)](q_tail, keys, mx, lse, scores, cnt, H, G, tau, m, D, scale, p, *strides,
                                          BT=BT, BN=BN, BD=BD, IEEE=ieee)
    kept = cnt.view(L, H * nblocks).sum(dim=1, dtype=torch.float64)
    return scores, (kept / (H * tau * m)).float()


@triton.jit
def _gather_kernel(src_ptr, pos_ptr, dst_ptr, H, M, D, s_sl, s_sh, s_sm, s_dl, s_dh, s_dm,
                   BM: tl.constexpr, BD: tl.constexpr):
    lh = tl.program_id(0)
    layer = lh // H
    head = lh % H
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    r_ok = rows < M
    pos = tl.load(pos_ptr + lh.to(tl.int64) * M + rows, mask=r_ok, other=-1)
    src = src_ptr + layer.to(tl.int64) * s_sl + head.to(tl.int64) * s_sh
    dst = dst_ptr + layer.to(tl.int64) * s_dl + head.to(tl.int64) * s_dh
    for d0 in range(0, D, BD):
        cd = d0 + tl.arange(0, BD)
        d_ok = cd < D
        x = tl.load(src + pos[:, None].to(tl.int64) * s_sm + cd[None, :], mask=(pos >= 0)[:, None] & d_ok[None, :],
                    other=0.0)
        tl.store(dst + rows[:, None] * s_dm + cd[None, :], x, mask=r_ok[:, None] & d_ok[None, :])


def gather_triton(k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
    L, H, M = positions.shape
    positions = positions.contiguous()
    outs = []
    for src in (k, v):
        D = src.shape[-1]
        dst = torch.empty(L, H, M, D, dtype=src.dtype, device=src.device)
        if M > 0:
            BD = min(128, triton.next_power_of_2(D))
            BM = 32
            _gather_kernel[(L * H, triton.cdiv(M, BM))](src, positions, dst, H, M, D, src.stride(0), src.stride(1),
                                                        src.stride(2), dst.stride(0), dst.stride(1), dst.stride(2),
                                                        BM=BM, BD=BD)
        outs.append(dst)
    return outs[0], outs[1]
