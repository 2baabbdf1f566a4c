"""Recall@K and NDCG@K over the full catalogue with the single true next item.

With one relevant item, Recall@K is the hit rate (1 if the target is in the top K) and NDCG@K = 1 / log2(rank + 2)
for a 0-based rank < K, else 0 (the ideal DCG is 1). `evaluate_both` reports both conventions from the same queries
(one sample of a diffusion model serves both): unmasked ("recall@10": nothing excluded, as RecBole's sequential
full ranking and the PreferDiff reference evaluate) and masked ("masked_recall@10": every item the user interacted
with before the target is excluded, as RecBole's masking does; not only the history window). The padding index 0 is
never ranked: tables start at item index 1."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernels.topk_scores import topk_scores

KS = (5, 10, 20)


def ranking_metrics(top_items: torch.Tensor, targets: torch.Tensor, ks: tuple[int, ...] = KS) -> dict[str, float]:
    """top_items [B, >= max(ks)] (ranked, any id space, -1 = padding), targets [B] in the same id space."""
    if top_items.shape[0] == 0:
        return {f"{m}@{k}": 0.0 for k in ks for m in ("recall", "ndcg")}
    hits = top_items == targets.view(-1, 1)  # at most one hit per row
    any_hit = hits.any(1)
    rank = torch.where(any_hit, hits.float().argmax(1), torch.full_like(targets, 10 ** 9))
    out: dict[str, float] = {}
    for k in ks:
        inside = rank < k
        out[f"recall@{k}"] = float(inside.float().mean())
        gain = torch.where(inside, 1.0 / torch.log2(rank.float().clamp(max=k) + 2.0), torch.zeros(()))
        out[f"ndcg@{k}"] = float(gain.mean())
    return out


def history_exclusion(history: torch.Tensor) -> torch.Tensor:
    """[B, L] history item indices (1..N, 0 = padding) -> table ids (0..N-1) padded with -1."""
    return torch.where(history > 0, history - 1, torch.full_like(history, -1))


def evaluate(query_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], table: torch.Tensor,
             history: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor, *,
             ks: tuple[int, ...] = KS, exclude_history: bool = False, batch_size: int = 1024) -> dict[str, float]:
    """query_fn(history, lengths) -> [b, d] queries scored against `table` [N, d] (row j = item index j + 1)."""
    kmax = min(max(ks), table.shape[0])
    tops = []
    for lo in range(0, targets.shape[0], batch_size):
        h, n = history[lo:lo + batch_size], lengths[lo:lo + batch_size]
        q = query_fn(h, n).to(table.dtype)
        ex = history_exclusion(h) if exclude_history else None
        _, ids = topk_scores(q, table, kmax, ex)
        tops.append(torch.where(ids >= 0, ids + 1, ids))
    if not tops:
        return ranking_metrics(torch.zeros((0, kmax), dtype=torch.long), targets, ks)
    return ranking_metrics(torch.cat(tops), targets, ks)


def ndcg_at(rank: int, k: int) -> float:
    """NDCG@k of one list whose single relevant item sits at 0-based `rank` (helper for tests and docs)."""
    return 1.0 / math.log2(rank + 2) if rank < k else 0.0


def evaluate_both(query_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], table: torch.Tensor,
                  history: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor, seen: torch.Tensor | None, *,
                  ks: tuple[int, ...] = KS, batch_size: int = 1024) -> dict[str, float]:
    """Unmasked metrics ("ndcg@10") and, when `seen` [B, S] (every earlier item, 0-padded) is given, masked ones
    ("masked_ndcg@10"), from one query per sample. Inputs may live on the table's device."""
    kmax = min(max(ks), table.shape[0])
    tops, tops_m = [], []
    dev = table.device
    for lo in range(0, targets.shape[0], batch_size):
        h, n = history[lo:lo + batch_size].to(dev), lengths[lo:lo + batch_size].to(dev)
        q = query_fn(h, n).to(table.dtype)
        _, ids = topk_scores(q, table, kmax, None)
        tops.append(torch.where(ids >= 0, ids + 1, ids).cpu())
        if seen is not None:
            _, ids = topk_scores(q, table, kmax, history_exclusion(seen[lo:lo + batch_size].to(dev)))
            tops_m.append(torch.where(ids >= 0, ids + 1, ids).cpu())
    if not tops:
        empty = torch.zeros((0, kmax), dtype=torch.long)
        out = ranking_metrics(empty, targets, ks)
        return {**out, **({f"masked_{k}": v for k, v in out.items()} if seen is not None else {})}
    out = ranking_metrics(torch.cat(tops), targets.cpu(), ks)
    if seen is not None:
        out.update({f"masked_{k}": v for k, v in ranking_metrics(torch.cat(tops_m), targets.cpu(), ks).items()})
    return out
