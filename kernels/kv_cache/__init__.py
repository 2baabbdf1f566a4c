"""kv_cache: VL-Cache-style KV-cache compression (budgets from attention sparsity, score-based gather).

    b = kv_budget(attn_tail, alpha, p=0.01, *, redistribute=True, backend="auto")        # -> KVBudget
    b = kv_budget_qk(q_tail, keys, alpha, p=0.01, scale=None, *, redistribute=True, backend="auto")
    c = kv_compress(k, v, b.scores, b.budgets, window, *, backend="auto")                 # -> CompressedKV

attn_tail [L, H, tau, m]: the attention probabilities of the prompt's last tau rows (any strides, float dtype).
kv_budget_qk computes the same statistics from q_tail [L, H, tau, D] and keys [L, Hkv, m, D] (causal softmax, GQA
when H % Hkv == 0) without materialising softmax(QK^T) on the Triton path (tau <= m, D <= 256).
k [L, H, m, D], v [L, H, m, Dv]: one sequence's prompt cache; scores [L, H, m] float (finite); budgets [L] or [L, H]
int64 in [0, m]; window >= 0. Definitions (density, budgets that sum exactly, compression order): reference.py.
The token selection (a stable sort) runs in torch on every backend; the Triton path gathers with a kernel.
"""

from __future__ import annotations

import torch

from .._checks import (
    check_float,
    check_int,
    check_interpreter,
    check_same_device,
    check_tensor,
    resolve_backend,
)
from .reference import (
    CompressedKV,
    KVBudget,
    kv_compress_reference,
    layer_budgets,
    qk_tail_stats_reference,
    select_positions,
    tail_stats_reference,
)

__all__ = [
    "CompressedKV",
    "KVBudget",
    "kv_budget",
    "kv_budget_qk",
    "kv_compress",
    "kv_compress_reference",
    "layer_budgets",
    "qk_tail_stats_reference",
    "tail_stats_reference",
]


def _check_alpha_p(alpha, p):
    alpha = check_float("alpha", alpha, lo=0.01, hi=1.0)
    p = check_float("p", p, lo=0.0, hi=1.0, lo_open=True)
    return alpha, p


def kv_budget(attn_tail: torch.Tensor, alpha: float, p: float = 0.01, *, redistribute: bool = True,
              backend: str = "auto") -> KVBudget:
    check_tensor("attn_tail", attn_tail, ndim=4)
    L, H, tau, m = attn_tail.shape
    if min(L, H, tau, m) < 1:
        raise ValueError(f"attn_tail must be [L, H, tau, m] with every size >= 1, got {tuple(attn_tail.shape)}")
    alpha, p = _check_alpha_p(alpha, p)
    which = resolve_backend(backend, attn_tail.device)
    if which == "reference":
        scores, density = tail_stats_reference(attn_tail, p)
    else:
        check_interpreter(attn_tail.device)
        from .triton import attn_tail_stats_triton

        scores, density = attn_tail_stats_triton(attn_tail, p)
    return KVBudget(layer_budgets(density, alpha, m, redistribute=redistribute), scores, density)


def kv_budget_qk(q_tail: torch.Tensor, keys: torch.Tensor, alpha: float, p: float = 0.01,
                 scale: float | None = None, *, redistribute: bool = True, backend: str = "auto") -> KVBudget:
    check_tensor("q_tail", q_tail, ndim=4)
    check_tensor("keys", keys, ndim=4)
    if keys.dtype != q_tail.dtype:
        raise ValueError(f"keys dtype {keys.dtype} must match q_tail dtype {q_tail.dtype}")
    L, H, tau, D = q_tail.shape
    Lk, Hkv, m, Dk = keys.shape
    if Lk != L:
        raise ValueError(f"keys has L={Lk} layers but q_tail has L={L}")
    if Dk != D:
        raise ValueError(f"keys head dim {Dk} must match q_tail head dim {D}")
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"keys has {Hkv} heads; q_tail's {H} heads must be a multiple of it")
    if min(L, H, tau, D, m) < 1:
        raise ValueError("q_tail and keys need every dimension >= 1")
    if tau > m:
        raise ValueError(f"q_tail has tau={tau} rows but keys only m={m} tokens (tau <= m)")
    if scale is not None:
        scale = check_float("scale", scale)
    alpha, p = _check_alpha_p(alpha, p)
    device = check_same_device(q_tail=q_tail, keys=keys)
    which = resolve_backend(backend, device)
    if which == "triton" and D > 256:
        if backend == "triton":
            raise ValueError(f"q_tail head dim {D} > 256 is too large for backend='triton'")
        which = "reference"
    if which == "reference":
        scores, density = qk_tail_stats_reference(q_tail, keys, p, scale)
    else:
        for name, t in (("q_tail", q_tail), ("keys", keys)):
            if t.stride(-1) != 1:
                raise ValueError(f"{name} must have unit stride in its last dimension for backend='triton'")
        check_interpreter(device)
        from .triton import qk_tail_stats_triton

        scores, density = qk_tail_stats_triton(q_tail, keys, p, scale)
    return KVBudget(layer_budgets(density, alpha, m, redistribute=redistribute), scores, density)


def kv_compress(k: torch.Tensor, v: torch.Tensor, scores: torch.Tensor, budgets: torch.Tensor, window: int, *,
                backend: str = "auto") -> CompressedKV:
    check_tensor("k", k, ndim=4)
    check_tensor("v", v, ndim=4)
    if v.dtype != k.dtype:
        raise ValueError(f"v dtype {v.dtype} must match k dtype {k.dtype}")
    L, H, m, _ = k.shape
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v shape {tuple(v.shape)} must match k shape {tuple(k.shape)} except the last dimension")
    check_tensor("scores", scores, ndim=3, dtypes=(torch.float32, torch.float16, torch.bfloat16, torch.float64))
    if tuple(scores.shape) != (L, H, m):
        raise ValueError(f"scores must have shape (L, H, m) = {(L, H, m)}, got {tuple(scores.shape)}")
    check_tensor("budgets", budgets, dtypes=(torch.int64, torch.int32))
    if tuple(budgets.shape) not in ((L,), (L, H)):
        raise ValueError(f"budgets must have shape (L,) or (L, H) with L={L}, H={H}; got {tuple(budgets.shape)}")
    window = check_int("window", window, lo=0)
    device = check_same_device(k=k, v=v, scores=scores, budgets=budgets)
    if budgets.numel() and (int(budgets.min()) < 0 or int(budgets.max()) > m):
        raise ValueError(f"budgets must lie in [0, m={m}]")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite")
    which = resolve_backend(backend, device)
    if which == "reference":
        return kv_compress_reference(k, v, scores, budgets, window)
    for name, t in (("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride in its last dimension for backend='triton'")
    check_interpreter(device)
    from .triton import gather_triton

    positions, lengths = select_positions(scores, budgets, window)
    kc, vc = gather_triton(k, v, positions)
    return CompressedKV(kc, vc, lengths, positions)
