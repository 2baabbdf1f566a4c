"""Per-request KV-cache compression of the prompt's cache, after prefill: none | vl_cache | h2o | streaming_llm.

All policies keep the same number of tokens for the same alpha, T = round(alpha * L * m) over the L layers (per KV
head), and always the `window` most recent prompt tokens; generated tokens are appended and all kept.

- vl_cache (VL-Cache, /work/shared/algorithms/generation.md): the last `observation_window` (tau) prompt rows'
  attention (computed from their queries and the prompt keys by kernels.kv_budget_qk, never materialised on the
  Triton path) gives per-layer density d_l (entries >= p * row max) and token scores s_j (column sums over those
  rows); layer budgets beta_l = clip(d_l / sum d * alpha * L, 0.01, 1) (redistributed so they sum to alpha * L,
  kernels.kv_cache.layer_budgets); per layer the top-scoring tokens plus the recent window are gathered
  (kernels.kv_compress). With GQA the scores of the query heads of one KV head are summed.
- h2o (our own implementation of H2O's heavy-hitter selection, one-shot on the prompt: the paper also evicts during
  decoding; kvpress does not install beside transformers 5.24, so it is not used): scores = attention accumulated
  over *all* prompt rows, the same budget for every layer, heavy hitters + recent window.
- streaming_llm (our own implementation of StreamingLLM): `sinks` first tokens + the most recent tokens, the same
  budget for every layer.
- none: the full cache, untouched.

alpha = 1 keeps every token in its order for every policy, so the decode is bitwise the same as with none."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.kv_cache import CompressedKV, kv_budget_qk, kv_compress, layer_budgets

POLICIES = ("none", "vl_cache", "h2o", "streaming_llm")


@dataclass(frozen=True)
class CachePolicy:
    policy: str = "none"
    alpha: float = 1.0             # global retention in (0, 1]
    window: int = 8                # recent prompt tokens always kept (per layer and head)
    observation_window: int = 16   # VL-Cache: last prompt rows whose attention sets budgets and scores
    p: float = 0.01                # VL-Cache: sparsity threshold relative to the row maximum
    sinks: int = 4                 # StreamingLLM: attention-sink tokens kept at the start

    @property
    def compresses(self) -> bool:
        return self.policy != "none"


@dataclass
class Compressed:
    k: torch.Tensor        # [L, Hkv, n_max, D]
    v: torch.Tensor        # [L, Hkv, n_max, Dv]
    lengths: torch.Tensor  # [L, Hkv] int64
    budgets: torch.Tensor  # [L] int64
    density: torch.Tensor | None = None  # [L] (vl_cache)


def _group_scores(scores: torch.Tensor, hkv: int) -> torch.Tensor:
    L, H, m = scores.shape
    return scores.view(L, hkv, H // hkv, m).sum(dim=2)


def compress(policy: CachePolicy, keys: torch.Tensor, values: torch.Tensor, q_tail: torch.Tensor | None,
             q_all: torch.Tensor | None, scale: float) -> Compressed:
    """keys/values [L, Hkv, m, D] of one prompt; q_tail [L, H, tau, D] (vl_cache) / q_all [L, H, m, D] (h2o)."""
    L, hkv, m, _ = keys.shape
    window = min(policy.window, m)
    if policy.policy == "vl_cache":
        b = kv_budget_qk(q_tail.contiguous(), keys.contiguous(), policy.alpha, policy.p, scale)
        budgets, scores, density = b.budgets, _group_scores(b.scores, hkv), b.density
    elif policy.policy == "h2o":
        b = kv_budget_qk(q_all.contiguous(), keys.contiguous(), policy.alpha, policy.p, scale)
        budgets = layer_budgets(torch.ones(L), policy.alpha, m)
        scores, density = _group_scores(b.scores, hkv), None
    elif policy.policy == "streaming_llm":
        budgets = layer_budgets(torch.ones(L), policy.alpha, m)
        pos = torch.arange(m, dtype=torch.float32)
        s = torch.where(pos < policy.sinks, torch.full_like(pos, 2.0), pos / m)  # sinks, then the most recent
        scores, density, window = s.expand(L, hkv, m).contiguous(), None, 0
    else:
        raise ValueError(f"unknown policy {policy.policy!r}")
    c: CompressedKV = kv_compress(keys.contiguous(), values.contiguous(), scores.float(), budgets.to(torch.int64),
                                  window)
    return Compressed(c.k, c.v, c.lengths, budgets, density)
