"""KV-cache policies on constructed attention: VL-Cache's layer budgets follow attention density, and a token that
the prompt's last rows (the question) attend to survives VL-Cache but not H2O's accumulated-attention ranking (which
favours tokens the early rows attended to) nor StreamingLLM's sinks + recent window."""
from __future__ import annotations

import torch

from services.generation.kvpolicy import CachePolicy, compress

D, M, TAU = 8, 64, 8


def _e(i: int) -> torch.Tensor:
    v = torch.zeros(D)
    v[i] = 1.0
    return v


def _needle_case(seed: int, needle: int):
    g = torch.Generator().manual_seed(seed)
    keys = 0.1 * torch.randn(1, 1, M, D, generator=g)
    keys[..., 0] = 0.0
    heavy = [5, 6, 7, 8]
    for j in heavy:  # what the early rows look at
        keys[0, 0, j] += 6.0 * _e(1)
    keys[0, 0, needle] += 6.0 * _e(0)  # what the question (last rows) looks at
    q = 0.1 * torch.randn(1, 1, M, D, generator=g)
    q[0, 0, : M - TAU] += 4.0 * _e(1)
    q[0, 0, M - TAU:] += 4.0 * _e(0)
    values = torch.arange(M, dtype=torch.float32).view(1, 1, M, 1).expand(1, 1, M, D).contiguous()
    return keys, values, q, heavy


def _kept(c) -> set[int]:
    n = int(c.lengths[0, 0])
    return {int(x) for x in c.v[0, 0, :n, 0]}


def test_the_question_s_needle_survives_vl_cache_only():
    for seed in range(5):
        needle = 20 + 5 * seed
        keys, values, q, heavy = _needle_case(seed, needle)
        kept = {}
        for policy in ("vl_cache", "h2o", "streaming_llm"):
            pol = CachePolicy(policy, alpha=0.1, window=2, observation_window=TAU)
            c = compress(pol, keys, values, q[:, :, M - TAU:], q, 1 / D ** 0.5)
            assert int(c.budgets.sum()) == round(0.1 * M)
            kept[policy] = _kept(c)
        assert needle in kept["vl_cache"], kept
        assert needle not in kept["h2o"] and set(heavy) <= kept["h2o"], kept
        assert needle not in kept["streaming_llm"] and {0, 1, 2, 3, M - 1} <= kept["streaming_llm"], kept


def test_denser_layers_get_larger_budgets_and_budgets_sum_to_alpha_L_m():
    g = torch.Generator().manual_seed(0)
    L = 3
    keys = 0.05 * torch.randn(L, 2, M, D, generator=g)
    q = 0.05 * torch.randn(L, 4, TAU, D, generator=g)  # GQA: 4 query heads over 2 KV heads
    # layer 1 peaked on a few tokens (sparse), layer 2 in between, layer 0 diffuse (dense)
    keys[1, :, :3] += 8.0 * _e(0)
    q[1] += 3.0 * _e(0)
    keys[2, :, :20] += 6.0 * _e(0)
    q[2] += 2.5 * _e(0)
    values = torch.randn(L, 2, M, D, generator=g)
    for alpha in (0.1, 0.25, 0.5):
        c = compress(CachePolicy("vl_cache", alpha, window=2, observation_window=TAU), keys, values, q, None,
                     1 / D ** 0.5)
        b = c.budgets.tolist()
        assert sum(b) == int(alpha * L * M + 0.5)
        d = c.density.tolist()
        assert d[0] > d[2] > d[1] and b[0] > b[2] > b[1], (d, b)
        assert c.lengths.tolist() == [[n, n] for n in b]
