"""topk_scores Triton kernel: tiled matmul with a running top-k held in registers as packed int64 keys.

Each score is packed with its id into one int64 key ``(orderable float32 bits << 32) | (0xFFFFFFFF - id)`` so that
comparing keys = comparing (score desc, id asc) and all keys are distinct. Program (query block, split of N) walks its
split in tiles of BN items: scores for the tile come from ``tl.dot`` (fp32 accumulate), and only tiles whose best key
beats the current k-th key of some row in the block are merged (excluded ids are masked first): the tile is sorted
ascending, ``max(running_desc, tile_asc)`` holds the top BN of the union (bitonic merge step), one more sort restores
order. Each split writes its top-k keys to a [B, S, k] workspace; a torch top-k over the S*k distinct keys per row and a
decode finish the job. [B, N] is never built; extra memory is O(B * S * k).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._tl_utils import INTERPRET, sort_rows
from .reference import LOWEST

# key of (-inf, low bits 0): below every real item; decodes to score -inf, id -1 (excluded / padding)
_NEG_INF_BITS = -8388608  # float32 -inf as int32 (0xFF800000)
PAD_KEY = (_NEG_INF_BITS ^ 0x7FFFFFFF) << 32


@triton.jit
def _topk_kernel(q_ptr, t_ptr, ex_ptr, out_ptr,
                 B, N, D, E, n_per_split, K,
                 s_qb, s_qd, s_tn, s_td, s_eb, s_ee, s_ob, s_os,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                 HAS_EX: tl.constexpr, IEEE: tl.constexpr, PAD: tl.constexpr, LOW: tl.constexpr,
                 USE_TL_SORT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    row_ok = rm < B
    cn = tl.arange(0, BN)
    ck = tl.arange(0, BK)
    n_start = pid_s * n_per_split
    n_end = tl.minimum(N, n_start + n_per_split)

    run = tl.full((BM, BN), PAD, tl.int64)  # running best keys, descending along dim 1
    thr = tl.full((BM,), PAD, tl.int64)  # k-th best key so far per row
    for n0 in range(n_start, n_end, BN):
        cols = n0 + cn
        col_ok = cols < n_end
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, D, BK):
            kk = k0 + ck
            k_ok = kk < D
            q = tl.load(q_ptr + rm.to(tl.int64)[:, None] * s_qb + kk[None, :] * s_qd,
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            t = tl.load(t_ptr + cols.to(tl.int64)[None, :] * s_tn + kk[:, None] * s_td,
                        mask=col_ok[None, :] & k_ok[:, None], other=0.0)
            if IEEE:
                acc = tl.dot(q, t, acc, input_precision="ieee")
            else:
                acc = tl.dot(q, t, acc)
        acc = tl.where((acc != acc) | (acc == float("-inf")), LOW, acc)  # (NaN test)
        bits = acc.to(tl.int32, bitcast=True)
        ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        low = tl.full((BN,), 4294967295, tl.int64) - cols.to(tl.int64)  # lower id -> larger key
        keys = (ordered.to(tl.int64) << 32) | low[None, :]
        keys = tl.where(col_ok[None, :], keys, PAD)
        better = (tl.max(keys, axis=1) > thr) & row_ok
        if tl.max(better.to(tl.int32), axis=0) > 0:
            if HAS_EX:
                for e0 in range(0, E, BE):
                    ce = e0 + tl.arange(0, BE)
                    ex = tl.load(ex_ptr + rm[:, None] * s_eb + ce[None, :] * s_ee,
                                 mask=row_ok[:, None] & (ce < E)[None, :], other=-1)
                    hit = tl.max((ex[:, :, None] == cols[None, None, :]).to(tl.int32), axis=1)
                    keys = tl.where(hit > 0, PAD, keys)
            tile_asc = sort_rows(keys, False, USE_TL_SORT)
            run = sort_rows(tl.maximum(run, tile_asc), True, USE_TL_SORT)
            thr = tl.sum(tl.where(cn[None, :] == K - 1, run, 0), axis=1)
    tl.store(out_ptr + rm.to(tl.int64)[:, None] * s_ob + pid_s * s_os + cn[None, :], run,
             mask=row_ok[:, None] & (cn < K)[None, :])


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 keys -> (float32 scores, int64 ids); keys of -inf score decode to id -1."""
    hi = (keys >> 32).to(torch.int32)
    bits = hi ^ ((hi >> 31) & 0x7FFFFFFF)
    scores = bits.view(torch.float32)
    ids = 4294967295 - (keys & 0xFFFFFFFF)
    ids = ids.masked_fill(scores == float("-inf"), -1)
    return scores, ids


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: a few splits so the split/merge path is exercised


def topk_scores_triton(queries: torch.Tensor, table: torch.Tensor, k: int,
                       exclude: torch.Tensor | None = None, *, splits: int | None = None,
                       block_n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    B, D = queries.shape
    N = table.shape[0]
    dev = queries.device
    if B == 0:
        return (torch.empty(0, k, dtype=torch.float32, device=dev), torch.empty(0, k, dtype=torch.int64, device=dev))
    BN = block_n or max(64, triton.next_power_of_2(k))
    assert BN >= k and BN & (BN - 1) == 0
    BM = 16
    BK = 32 if BN >= 512 else 64
    BK = min(BK, max(16, triton.next_power_of_2(D)))
    grid_m = triton.cdiv(B, BM)
    n_tiles = triton.cdiv(N, BN)
    if splits is None:
        target = 4 * _num_sms(dev)
        splits = max(1, min(target // grid_m, triton.cdiv(n_tiles, 8)))
        # keep the [B, S, k] workspace under ~64 MiB
        splits = max(1, min(splits, (64 << 20) // max(1, B * k * 8)))
    splits = max(1, min(splits, n_tiles))
    n_per_split = triton.cdiv(n_tiles, splits) * BN
    splits = triton.cdiv(N, n_per_split)
    out = torch.empty(B, splits, k, dtype=torch.int64, device=dev)
    has_ex = exclude is not None and exclude.shape[1] > 0
    ex = exclude if has_ex else out  # dummy pointer when unused
    E = exclude.shape[1] if has_ex else 0
    BE = 16 if BN <= 256 else 4
    _topk_kernel[(grid_m, splits)](
        queries, table, ex, out, B, N, D, E, n_per_split, k,
        queries.stride(0), queries.stride(1), table.stride(0), table.stride(1),
        ex.stride(0), ex.stride(1), out.stride(0), out.stride(1),
        BM=BM, BN=BN, BK=BK, BE=BE, HAS_EX=has_ex, IEEE=queries.dtype == torch.float32,
        PAD=PAD_KEY, LOW=LOWEST, USE_TL_SORT=not INTERPRET, num_warps=8 if BN >= 256 else 4)
    keys = out.view(B, splits * k)
    if splits > 1:
        keys = torch.topk(keys, k, dim=1, sorted=True).values
    return decode_keys(keys)
