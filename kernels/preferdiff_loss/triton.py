"""PreferDiff loss in Triton: one pass over the four [B, d] inputs forward, one fused pass backward.

Forward kernel: each program takes BLOCK_B rows, loops over d in chunks accumulating <p,t>, |p|^2, |t|^2 for the
positive and the negative pair, and writes its partial sums of (cos - 1)^2 to a [programs, 2] buffer (summed in
torch: deterministic, no atomics). The scalar loss is a handful of torch ops on two numbers. Backward kernel: the same
row statistics are recomputed, then the four gradients are written chunk by chunk:
    dcos/da = b / (na nb) - cos * a / na^2   (a, b the pair; na = max(|a|, eps); the second term is 0 if |a| <= eps)
scaled by dL/dL_pos * 2 (cos - 1) / B (resp. L_neg).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _row_stats(a_ptr, b_ptr, rows, row_ok, D, s_a, s_b, BD: tl.constexpr):
    dot = tl.zeros([rows.shape[0]], dtype=tl.float32)
    aa = tl.zeros([rows.shape[0]], dtype=tl.float32)
    bb = tl.zeros([rows.shape[0]], dtype=tl.float32)
    for d0 in range(0, D, BD):
        cd = d0 + tl.arange(0, BD)
        msk = row_ok[:, None] & (cd < D)[None, :]
        a = tl.load(a_ptr + rows.to(tl.int64)[:, None] * s_a + cd[None, :], mask=msk, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + rows.to(tl.int64)[:, None] * s_b + cd[None, :], mask=msk, other=0.0).to(tl.float32)
        dot += tl.sum(a * b, axis=1)
        aa += tl.sum(a * a, axis=1)
        bb += tl.sum(b * b, axis=1)
    return dot, tl.sqrt(aa), tl.sqrt(bb)


@triton.jit
def _fwd_kernel(pp, tp, pn, tn, part_ptr, B, D, s_pp, s_tp, s_pn, s_tn, EPS,
                BB: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BB + tl.arange(0, BB)
    row_ok = rows < B
    dot, nt, npr = _row_stats(tp, pp, rows, row_ok, D, s_tp, s_pp, BD)
    c = dot / (tl.maximum(nt, EPS) * tl.maximum(npr, EPS))
    e_pos = tl.sum(tl.where(row_ok, (c - 1.0) * (c - 1.0), 0.0), axis=0)
    dot, nt, npr = _row_stats(tn, pn, rows, row_ok, D, s_tn, s_pn, BD)
    c = dot / (tl.maximum(nt, EPS) * tl.maximum(npr, EPS))
    e_neg = tl.sum(tl.where(row_ok, (c - 1.0) * (c - 1.0), 0.0), axis=0)
    tl.store(part_ptr + pid * 2, e_pos)
    tl.store(part_ptr + pid * 2 + 1, e_neg)


@triton.jit
def _bwd_pair(a_ptr, b_ptr, ga_ptr, gb_ptr, rows, row_ok, D, s_a, s_b, s_ga, s_gb, coef, EPS,
              BD: tl.constexpr):
    dot, na_raw, nb_raw = _row_stats(a_ptr, b_ptr, rows, row_ok, D, s_a, s_b, BD)
    na = tl.maximum(na_raw, EPS)
    nb = tl.maximum(nb_raw, EPS)
    c = dot / (na * nb)
    g = coef * 2.0 * (c - 1.0)  # dL/dcos_i
    inv = g / (na * nb)
    ca = tl.where(na_raw > EPS, g * c / (na * na), 0.0)
    cb = tl.where(nb_raw > EPS, g * c / (nb * nb), 0.0)
    for d0 in range(0, D, BD):
        cd = d0 + tl.arange(0, BD)
        msk = row_ok[:, None] & (cd < D)[None, :]
        a = tl.load(a_ptr + rows.to(tl.int64)[:, None] * s_a + cd[None, :], mask=msk, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + rows.to(tl.int64)[:, None] * s_b + cd[None, :], mask=msk, other=0.0).to(tl.float32)
        ga = inv[:, None] * b - ca[:, None] * a
        gb = inv[:, None] * a - cb[:, None] * b
        tl.store(ga_ptr + rows.to(tl.int64)[:, None] * s_ga + cd[None, :], ga.to(ga_ptr.dtype.element_ty), mask=msk)
        tl.store(gb_ptr + rows.to(tl.int64)[:, None] * s_gb + cd[None, :], gb.to(gb_ptr.dtype.element_ty), mask=msk)


@triton.jit
def _bwd_kernel(pp, tp, pn, tn, gpp, gtp, gpn, gtn, coef_ptr, B, D,
                s_pp, s_tp, s_pn, s_tn, EPS, BB: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BB + tl.arange(0, BB)
    row_ok = rows < B
    c_pos = tl.load(coef_ptr)  # dL/dL_pos / B (already times grad_output)
    c_neg = tl.load(coef_ptr + 1)
    # gradient buffers are contiguous copies of the inputs' shapes: row stride D
    _bwd_pair(tp, pp, gtp, gpp, rows, row_ok, D, s_tp, s_pp, D, D, c_pos, EPS, BD)
    _bwd_pair(tn, pn, gtn, gpn, rows, row_ok, D, s_tn, s_pn, D, D, c_neg, EPS, BD)


def _blocks(B: int, D: int) -> tuple[int, int]:
    BD = min(256, max(16, triton.next_power_of_2(D)))
    BB = max(1, min(64, 4096 // BD))
    return BB, BD


def cos_err_sums_triton(pred_pos, target_pos, pred_neg, target_neg, eps: float) -> torch.Tensor:
    """[2] float32: (sum_i (cos_pos_i - 1)^2, sum_i (cos_neg_i - 1)^2)."""
    B, D = pred_pos.shape
    BB, BD = _blocks(B, D)
    grid = triton.cdiv(B, BB)
    part = torch.empty(grid, 2, dtype=torch.float32, device=pred_pos.device)
    _fwd_kernel[(grid,)](pred_pos, target_pos, pred_neg, target_neg, part, B, D,
                         pred_pos.stride(0), target_pos.stride(0), pred_neg.stride(0), target_neg.stride(0), eps,
                         BB=BB, BD=BD)
    return part.sum(dim=0)


def preferdiff_grads_triton(pred_pos, target_pos, pred_neg, target_neg, coef: torch.Tensor, eps: float):
    """Gradients of sum_i coef[0] (cos_pos_i - 1)^2 + coef[1] (cos_neg_i - 1)^2 w.r.t. the four inputs."""
    B, D = pred_pos.shape
    BB, BD = _blocks(B, D)
    outs = [torch.empty(B, D, dtype=x.dtype, device=x.device)
            for x in (pred_pos, target_pos, pred_neg, target_neg)]
    _bwd_kernel[(triton.cdiv(B, BB),)](pred_pos, target_pos, pred_neg, target_neg, *outs,
                                      coef.contiguous(), B, D, pred_pos.stride(0), target_pos.stride(0),
                                      pred_neg.stride(0), target_neg.stride(0), eps, BB=BB, BD=BD)
    return outs
