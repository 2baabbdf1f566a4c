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
  decoding; kvpress pins an older transformers, so it serves only as the outside reference in its own venv,
  benchmarks/generation/kvpress_reference.py): scores = attention accumulated
  over *all* prompt rows, the same budget for every layer, heavy hitters + recent window.
- streaming_llm (our own implementation of StreamingLLM): `sinks` first tokens + the most recent tokens, the same
  budget for every layer.
- none: the full cache, untouched.

alpha = 1 keeps every token in its order for every policy, so the decode is bitwise the same as with none.

Models that mix sliding-window and global layers (Gemma 3: five 512-token sliding layers per global one): a sliding
layer holds only the prompt's last `held[l]` = min(m, window - 1) tokens after prefill (what transformers' cache
keeps), so those are its only candidates. The policies budget what the layers hold: T = round(alpha * sum(held)),
h2o and streaming_llm give each layer the same fraction alpha of what it holds, and VL-Cache gives each layer a budget
proportional to its count of kept tail-attention entries (density over the tokens it holds x held: the paper's rule
when every layer holds m; kernels.kv_cache.layer_budgets(capacity=...)). A sliding layer's tail statistics are
computed over the tokens it holds with a causal mask (the few older keys the band mask still shows the first tail
rows are gone from its cache, so they cannot be kept anyway)."""
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
    positions: torch.Tensor | None = None  # [L, Hkv, n_max] prompt positions of the kept tokens (-1 padded)


def _group_scores(scores: torch.Tensor, hkv: int) -> torch.Tensor:
    L, H, m = scores.shape
    return scores.view(L, hkv, H // hkv, m).sum(dim=2)


# score of a position a layer does not hold (finite: kv_compress wants finite scores; real scores are >= 0)
NOT_HELD = -1e30


def _tail_stats(q: torch.Tensor, keys: torch.Tensor, held: torch.Tensor, p: float, scale: float):
    """(scores [L, H, m], density [L]), each layer's over the last held[l] tokens it holds; the rows of q are the
    prompt's last q.shape[2] positions (clipped to what each layer holds)."""
    L, H, tau, _ = q.shape
    m = keys.shape[2]
    scores = torch.full((L, H, m), NOT_HELD, dtype=torch.float32)
    density = torch.zeros(L, dtype=torch.float32)
    for n in sorted({int(x) for x in held}):
        layers = [i for i in range(L) if int(held[i]) == n]
        rows = min(tau, n)
        b = kv_budget_qk(q[layers][:, :, tau - rows:].contiguous(), keys[layers][:, :, m - n:].contiguous(), 1.0, p,
                         scale)
        scores[layers, :, m - n:] = b.scores
        density[layers] = b.density
    return scores, density


def compress(policy: CachePolicy, keys: torch.Tensor, values: torch.Tensor, q_tail: torch.Tensor | None,
             q_all: torch.Tensor | None, scale: float, held: torch.Tensor | None = None) -> Compressed:
    """keys/values [L, Hkv, m, D] of one prompt; q_tail [L, H, tau, D] (vl_cache) / q_all [L, H, m, D] (h2o);
    held [L]: tokens each layer holds, its last held[l] positions (default: all m; a sliding layer's other positions
    are never kept)."""
    L, hkv, m, _ = keys.shape
    held = torch.full((L,), m, dtype=torch.int64) if held is None else held.long()
    window = min(policy.window, m)
    if policy.policy in ("vl_cache", "h2o"):
        q = q_tail if policy.policy == "vl_cache" else q_all
        scores, density = _tail_stats(q, keys, held, policy.p, scale)
        scores = _group_scores(scores, hkv)
        if policy.policy == "h2o":
            budgets = layer_budgets(torch.ones(L), policy.alpha, m, capacity=held)
            density = None
        else:
            budgets = layer_budgets(density, policy.alpha, m, capacity=held)
    elif policy.policy == "streaming_llm":
        budgets = layer_budgets(torch.ones(L), policy.alpha, m, capacity=held)
        pos = torch.arange(m, dtype=torch.float32)
        s = torch.where(pos < policy.sinks, torch.full_like(pos, 2.0), pos / m)  # sinks, then the most recent
        # a layer that holds only its last held[l] positions has no sinks: the prompt's first tokens are gone
        scores = s.expand(L, hkv, m).masked_fill(pos < (m - held)[:, None, None], NOT_HELD).contiguous()
        density, window = None, 0
    else:
        raise ValueError(f"unknown policy {policy.policy!r}")
    c: CompressedKV = kv_compress(keys.contiguous(), values.contiguous(), scores.float(), budgets.to(torch.int64),
                                  window)
    return Compressed(c.k, c.v, c.lengths, budgets, density, c.positions)
