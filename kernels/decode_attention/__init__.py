"""decode_attention: one decode step over a variable-length (per sequence and KV head) cache.

    out = decode_attention(q, k_cache, v_cache, lengths, scale=None, *, backend="auto")     # [B, H, Dv], q.dtype

q [B, H, D]; k_cache [B, Hkv, M, D]; v_cache [B, Hkv, M, Dv]; H % Hkv == 0 (GQA); lengths [B, Hkv] integer with
0 <= lengths <= M. One float dtype for q/k/v, one device. The last dimension of q, k_cache and v_cache must have unit
stride on the Triton path (other strides are free). scale defaults to 1/sqrt(D). Length-0 heads return 0.
Triton path limits: D, Dv <= 256, H / Hkv <= 64.
"""

from __future__ import annotations

import math

import torch

from .._checks import (
    check_interpreter,
    check_same_device,
    check_tensor,
    resolve_backend,
)
from .reference import decode_attention_reference

__all__ = ["decode_attention", "decode_attention_reference"]


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                     scale: float | None = None, *, backend: str = "auto") -> torch.Tensor:
    check_tensor("q", q, ndim=3)
    check_tensor("k_cache", k_cache, ndim=4)
    check_tensor("v_cache", v_cache, ndim=4)
    check_tensor("lengths", lengths, ndim=2, dtypes=(torch.int32, torch.int64))
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} dtype {t.dtype} must match q dtype {q.dtype}")
    B, H, D = q.shape
    Bk, Hkv, M, Dk = k_cache.shape
    if Bk != B:
        raise ValueError(f"k_cache batch {Bk} must match q batch {B}")
    if Dk != D:
        raise ValueError(f"k_cache head dim {Dk} must match q head dim {D}")
    if Hkv < 1 or H % Hkv != 0:
        raise ValueError(f"k_cache has {Hkv} heads; q's {H} heads must be a multiple of it")
    if v_cache.shape[:3] != k_cache.shape[:3]:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} must match k_cache {tuple(k_cache.shape)} "
                         "in all but the last dimension")
    if tuple(lengths.shape) != (B, Hkv):
        raise ValueError(f"lengths must have shape (B, Hkv) = {(B, Hkv)}, got {tuple(lengths.shape)}")
    if D < 1 or v_cache.shape[3] < 1:
        raise ValueError("q and v_cache need a head dimension >= 1")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)
                              or not math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    device = check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, lengths=lengths)
    if lengths.numel() > 0:
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 0 or hi > M:
            raise ValueError(f"lengths must lie in [0, M={M}], got range [{lo}, {hi}]")
    which = resolve_backend(backend, device)
    if which == "reference" or B == 0 or H == 0:
        return decode_attention_reference(q, k_cache, v_cache, lengths, scale)
    if D > 256 or v_cache.shape[3] > 256 or H // Hkv > 64:
        if backend == "triton":
            raise ValueError("q/v_cache head dim > 256 or more than 64 query heads per KV head: too large for "
                             "backend='triton'")
        return decode_attention_reference(q, k_cache, v_cache, lengths, scale)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride in its last dimension for backend='triton'")
    check_interpreter(device)
    from .triton import decode_attention_triton

    return decode_attention_triton(q, k_cache, v_cache, lengths, scale)
