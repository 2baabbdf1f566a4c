"""topk_scores: fused ``queries @ table.T`` + per-row top-k over a large table, with per-row exclusion lists.

    scores, ids = topk_scores(queries, table, k, exclude=None, *, backend="auto")

queries [B, d] and table [N, d] share one float dtype (float32, float16, bfloat16) and one device; 1 <= k <= N
(k <= 1024 on the Triton path). exclude is None or a [B, E] int64 tensor of item ids to drop per row, padded with -1.
Returns scores [B, k] float32 (descending) and ids [B, k] int64; equal scores -> lower id first. Rows left with fewer
than k items after exclusion end in padding slots (score -inf, id -1). NaN/-inf scores rank as the lowest finite
float32. backend: "auto" (CUDA -> Triton, else the chunked torch reference), "reference", or "triton" (CPU tensors
run under TRITON_INTERPRET=1, for tests). [B, N] is never materialised on either path.
"""

from __future__ import annotations

import torch

from .._checks import (
    check_int,
    check_interpreter,
    check_same_device,
    check_tensor,
    resolve_backend,
)
from .reference import topk_scores_reference

MAX_K_TRITON = 1024
MAX_N = 2**31 - 2  # ids are packed into 32 bits inside the Triton kernel

__all__ = ["MAX_K_TRITON", "topk_scores", "topk_scores_reference"]


def topk_scores(queries: torch.Tensor, table: torch.Tensor, k: int, exclude: torch.Tensor | None = None, *,
                backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    check_tensor("queries", queries, ndim=2)
    check_tensor("table", table, ndim=2)
    if table.dtype != queries.dtype:
        raise ValueError(f"table dtype {table.dtype} must match queries dtype {queries.dtype}")
    B, d = queries.shape
    N, d_t = table.shape
    if d_t != d:
        raise ValueError(f"table has d={d_t} columns but queries has d={d}; they must match")
    if d < 1:
        raise ValueError("queries must have d >= 1 columns")
    if N < 1:
        raise ValueError("table must have at least one row (N >= 1)")
    if N > MAX_N:
        raise ValueError(f"table has N={N} rows; at most {MAX_N} are supported")
    k = check_int("k", k, lo=1, hi=N)
    if exclude is not None:
        check_tensor("exclude", exclude, ndim=2, dtypes=(torch.int64,))
        if exclude.shape[0] != B:
            raise ValueError(f"exclude has {exclude.shape[0]} rows but queries has B={B}; they must match")
    device = check_same_device(queries=queries, table=table, exclude=exclude)
    if exclude is not None and exclude.numel() > 0:
        lo, hi = int(exclude.min()), int(exclude.max())
        if lo < -1 or hi >= N:
            raise ValueError(f"exclude ids must lie in [0, N={N}) or be -1 padding; got range [{lo}, {hi}]")
    which = resolve_backend(backend, device)
    if which == "reference":
        return topk_scores_reference(queries, table, k, exclude)
    if k > MAX_K_TRITON:
        if backend == "triton":
            raise ValueError(f"k={k} exceeds the Triton kernel's limit of {MAX_K_TRITON}; use backend='reference'")
        return topk_scores_reference(queries, table, k, exclude)
    check_interpreter(device)
    from .triton import topk_scores_triton

    return topk_scores_triton(queries, table, k, exclude)
