"""topk_scores reference: chunked matrix product + running top-k merge (pure torch; the spec and the CPU path).

Semantics (shared with the Triton kernel):
- scores = queries @ table.T, accumulated in float32 (half inputs are upcast chunk by chunk).
- Per row, the k highest scores in descending order; equal scores -> lower item id first.
- A NaN score (from non-finite inputs) and a -inf score rank as the lowest *finite* float32 (-3.4028e38), so every real
  item ranks above an excluded one; ``+inf`` stays ``+inf``.
- Excluded items (``exclude[b]``, padded with -1) never appear. When a row has fewer than k items left, its trailing
  slots are padding: score ``-inf`` and id ``-1``.
The product is computed over ``chunk`` table rows at a time, so [B, N] is never built (memory O(B * chunk + B * k)).
"""

from __future__ import annotations

import torch

LOWEST = torch.finfo(torch.float32).min
# B * chunk float32 elements per step (16 MiB): big enough for a fast matmul, small enough to stay in cache-ish memory.
DEFAULT_CHUNK_ELEMS = 1 << 22


def sanitize_scores_(s: torch.Tensor) -> torch.Tensor:
    """NaN and -inf -> lowest finite float32, in place (so -inf is reserved for excluded items / padding)."""
    return torch.nan_to_num_(s, nan=LOWEST, neginf=LOWEST, posinf=float("inf"))


def _exact_chunk_topk(s: torch.Tensor, kc: int) -> torch.Tensor:
    """Column indices (ascending) of the top-kc entries of each row of s, ties at the boundary -> lowest index."""
    vals, idx = torch.topk(s, kc, dim=1, sorted=True)  # sorted=True is the faster CPU path for small k
    thr = vals[:, -1:]
    n_ge = (s >= thr).sum(dim=1)
    if bool((n_ge == kc).all()):
        return idx.sort(dim=1).values  # no ties straddle the boundary: topk's set is the exact set
    # Ties at the threshold: keep everything above it and the lowest-index tied entries up to kc.
    gt = s > thr
    need = kc - gt.sum(dim=1, keepdim=True)
    eq = s == thr
    sel = gt | (eq & (eq.cumsum(dim=1) <= need))
    return sel.nonzero()[:, 1].view(s.shape[0], kc)  # row-major nonzero: ascending columns per row


def topk_scores_reference(queries: torch.Tensor, table: torch.Tensor, k: int,
                          exclude: torch.Tensor | None = None, *,
                          chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    B, _ = queries.shape
    N = table.shape[0]
    dev = queries.device
    if chunk is None:
        chunk = max(k, min(N, DEFAULT_CHUNK_ELEMS // max(B, 1)), 1)
    q = queries.float()
    best_s = torch.empty(B, 0, dtype=torch.float32, device=dev)
    best_i = torch.empty(B, 0, dtype=torch.int64, device=dev)
    if B == 0:
        return (torch.empty(0, k, dtype=torch.float32, device=dev), torch.empty(0, k, dtype=torch.int64, device=dev))

    ex_rows = ex_cols = None
    if exclude is not None and exclude.numel() > 0:
        valid = exclude >= 0
        ex_rows = torch.arange(B, device=dev).unsqueeze(1).expand_as(exclude)[valid]
        ex_cols = exclude[valid]

    for lo in range(0, N, chunk):
        hi = min(N, lo + chunk)
        s = q @ table[lo:hi].float().T  # [B, hi - lo]
        sanitize_scores_(s)
        if ex_cols is not None:
            m = (ex_cols >= lo) & (ex_cols < hi)
            s[ex_rows[m], ex_cols[m] - lo] = float("-inf")
        kc = min(k, hi - lo)
        cols = _exact_chunk_topk(s, kc)  # ascending ids within the chunk
        cand_s = torch.cat([best_s, s.gather(1, cols)], dim=1)
        cand_i = torch.cat([best_i, cols + lo], dim=1)
        # Candidates are in ascending id order among equal scores (kept best ids < this chunk's ids, each part
        # id-ordered among ties), so a stable descending sort gives "score desc, id asc".
        order = torch.sort(cand_s, dim=1, descending=True, stable=True).indices[:, :k]
        best_s = cand_s.gather(1, order)
        best_i = cand_i.gather(1, order)
    best_i = best_i.masked_fill(best_s == float("-inf"), -1)
    return best_s, best_i


def topk_scores_naive(queries: torch.Tensor, table: torch.Tensor, k: int,
                      exclude: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 full-product oracle (tests only): builds [B, N]; ties by a stable sort on the full row."""
    s = queries.double() @ table.double().T
    s = s.masked_fill(torch.isnan(s) | (s == float("-inf")), float(LOWEST))
    if exclude is not None:
        for b in range(exclude.shape[0]):
            ids = exclude[b][exclude[b] >= 0]
            s[b, ids] = float("-inf")
    vals, idx = torch.sort(s, dim=1, descending=True, stable=True)
    vals, idx = vals[:, :k], idx[:, :k]
    idx = idx.masked_fill(vals == float("-inf"), -1)
    return vals, idx
