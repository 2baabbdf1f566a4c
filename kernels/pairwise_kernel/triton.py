"""Pairwise ARD kernel in Triton: tiled like a matmul, [n, m, d] never built.

Forward: program (i-block, j-block) loops over d in chunks, accumulating x'.y' with tl.dot (inputs upcast to fp32,
input_precision="ieee": no tf32, GP fits need the accuracy) and the squared norms of the scaled, centred rows;
then r^2 = |x'|^2 + |y'|^2 - 2 x'.y' (clamped at 0) and the kernel function are applied on the tile and stored.
Backward (lengthscales): program (i-block, j-block) recomputes r^2 for its tile, forms W = G * F(r) (see reference.py),
and for each d chunk adds  sum_i x'_ik^2 rowsum(W)_i + sum_j y'_jk^2 colsum(W)_j - 2 sum_i x'_ik (W y')_ik  to its own
row of a [programs, d] buffer (summed in torch: deterministic, no atomics); finally divided by l_k.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_r2(x_ptr, y_ptr, c_ptr, ls_ptr, ri, rj, i_ok, j_ok, D, s_x, s_y,
             BI: tl.constexpr, BJ: tl.constexpr, BD: tl.constexpr, IEEE: tl.constexpr):
    xy = tl.zeros((BI, BJ), dtype=tl.float32)
    xx = tl.zeros((BI,), dtype=tl.float32)
    yy = tl.zeros((BJ,), dtype=tl.float32)
    for d0 in range(0, D, BD):
        cd = d0 + tl.arange(0, BD)
        d_ok = cd < D
        c = tl.load(c_ptr + cd, mask=d_ok, other=0.0)
        ls = tl.load(ls_ptr + cd, mask=d_ok, other=1.0)
        x = tl.load(x_ptr + ri.to(tl.int64)[:, None] * s_x + cd[None, :], mask=i_ok[:, None] & d_ok[None, :], other=0.0)
        y = tl.load(y_ptr + rj.to(tl.int64)[:, None] * s_y + cd[None, :], mask=j_ok[:, None] & d_ok[None, :], other=0.0)
        x = tl.where(d_ok[None, :], (x.to(tl.float32) - c[None, :]) / ls[None, :], 0.0)
        y = tl.where(d_ok[None, :], (y.to(tl.float32) - c[None, :]) / ls[None, :], 0.0)
        xx += tl.sum(x * x, axis=1)
        yy += tl.sum(y * y, axis=1)
        if IEEE:
            xy = tl.dot(x, tl.trans(y), xy, input_precision="ieee")
        else:
            xy = tl.dot(x, tl.trans(y), xy)
    return tl.maximum(xx[:, None] + yy[None, :] - 2.0 * xy, 0.0)


@triton.jit
def _fwd_kernel(x_ptr, y_ptr, c_ptr, ls_ptr, k_ptr, n, m, D, s_x, s_y, s_k,
                KIND: tl.constexpr, BI: tl.constexpr, BJ: tl.constexpr, BD: tl.constexpr, IEEE: tl.constexpr):
    ri = tl.program_id(0) * BI + tl.arange(0, BI)
    rj = tl.program_id(1) * BJ + tl.arange(0, BJ)
    i_ok = ri < n
    j_ok = rj < m
    r2 = _tile_r2(x_ptr, y_ptr, c_ptr, ls_ptr, ri, rj, i_ok, j_ok, D, s_x, s_y, BI, BJ, BD, IEEE)
    # 2.23606797749979 = sqrt(5), written as a literal: @jit code cannot read a plain module global
    if KIND == 0:
        kv = tl.exp(-0.5 * r2)
    else:
        r = tl.sqrt(r2)
        kv = (1.0 + 2.23606797749979 * r + (5.0 / 3.0) * r2) * tl.exp(-2.23606797749979 * r)
    tl.store(k_ptr + ri.to(tl.int64)[:, None] * s_k + rj[None, :], kv.to(k_ptr.dtype.element_ty),
             mask=i_ok[:, None] & j_ok[None, :])


@triton.jit
def _bwd_ls_kernel(x_ptr, y_ptr, c_ptr, ls_ptr, g_ptr, part_ptr, n, m, D, s_x, s_y, s_g,
                   KIND: tl.constexpr, BI: tl.constexpr, BJ: tl.constexpr, BD: tl.constexpr,
                   IEEE: tl.constexpr):
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    ri = pid_i * BI + tl.arange(0, BI)
    rj = pid_j * BJ + tl.arange(0, BJ)
    i_ok = ri < n
    j_ok = rj < m
    r2 = _tile_r2(x_ptr, y_ptr, c_ptr, ls_ptr, ri, rj, i_ok, j_ok, D, s_x, s_y, BI, BJ, BD, IEEE)
    if KIND == 0:
        f = tl.exp(-0.5 * r2)
    else:
        r = tl.sqrt(r2)
        f = (5.0 / 3.0) * (1.0 + 2.23606797749979 * r) * tl.exp(-2.23606797749979 * r)
    g = tl.load(g_ptr + ri.to(tl.int64)[:, None] * s_g + rj[None, :], mask=i_ok[:, None] & j_ok[None, :], other=0.0)
    w = tl.where(i_ok[:, None] & j_ok[None, :], g.to(tl.float32) * f, 0.0)
    rw = tl.sum(w, axis=1)
    cw = tl.sum(w, axis=0)
    row = pid_i * tl.num_programs(1) + pid_j
    for d0 in range(0, D, BD):
        cd = d0 + tl.arange(0, BD)
        d_ok = cd < D
        c = tl.load(c_ptr + cd, mask=d_ok, other=0.0)
        ls = tl.load(ls_ptr + cd, mask=d_ok, other=1.0)
        x = tl.load(x_ptr + ri.to(tl.int64)[:, None] * s_x + cd[None, :], mask=i_ok[:, None] & d_ok[None, :], other=0.0)
        y = tl.load(y_ptr + rj.to(tl.int64)[:, None] * s_y + cd[None, :], mask=j_ok[:, None] & d_ok[None, :], other=0.0)
        x = tl.where(i_ok[:, None] & d_ok[None, :], (x.to(tl.float32) - c[None, :]) / ls[None, :], 0.0)
        y = tl.where(j_ok[:, None] & d_ok[None, :], (y.to(tl.float32) - c[None, :]) / ls[None, :], 0.0)
        if IEEE:
            wy = tl.dot(w, y, input_precision="ieee")
        else:
            wy = tl.dot(w, y)
        s = tl.sum(x * x * rw[:, None], axis=0) + tl.sum(y * y * cw[:, None], axis=0) - 2.0 * tl.sum(x * wy, axis=0)
        tl.store(part_ptr + row * D + cd, s, mask=d_ok)


def _blocks(D: int) -> tuple[int, int, int]:
    BD = min(64, max(16, triton.next_power_of_2(D)))
    return 64, 64, BD


def _centre(X, Y):
    return torch.cat([X.float(), Y.float()]).mean(dim=0).contiguous()


def pairwise_kernel_triton(X, Y, lengthscales, kind: str) -> torch.Tensor:
    n, D = X.shape
    m = Y.shape[0]
    BI, BJ, BD = _blocks(D)
    K = torch.empty(n, m, dtype=torch.float32, device=X.device)
    if n == 0 or m == 0:
        return K
    c = _centre(X, Y)
    ls = lengthscales.float().contiguous()
    grid = (triton.cdiv(n, BI), triton.cdiv(m, BJ))
    _fwd_kernel[grid](X, Y, c, ls, K, n, m, D, X.stride(0), Y.stride(0), K.stride(0),
                      KIND=0 if kind == "rbf" else 1, BI=BI, BJ=BJ, BD=BD, IEEE=True)
    return K


def lengthscale_grad_triton(X, Y, lengthscales, kind: str, grad_K: torch.Tensor) -> torch.Tensor:
    n, D = X.shape
    m = Y.shape[0]
    BI, BJ, BD = _blocks(D)
    if n == 0 or m == 0:
        return torch.zeros_like(lengthscales, dtype=torch.float32)
    c = _centre(X, Y)
    ls = lengthscales.float().contiguous()
    G = grad_K.float().contiguous()
    grid = (triton.cdiv(n, BI), triton.cdiv(m, BJ))
    part = torch.empty(grid[0] * grid[1], D, dtype=torch.float32, device=X.device)
    _bwd_ls_kernel[grid](X, Y, c, ls, G, part, n, m, D, X.stride(0), Y.stride(0), G.stride(0),
                         KIND=0 if kind == "rbf" else 1, BI=BI, BJ=BJ, BD=BD, IEEE=True)
    return part.sum(dim=0) / ls
