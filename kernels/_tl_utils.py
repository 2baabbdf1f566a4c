"""Small Triton helpers shared by the kernels (triton only; no project imports)."""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.language.standard import _log2

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") in ("1", "true", "True")


@triton.jit
def _indicator(n_dims: tl.constexpr, j: tl.constexpr):
    ar = tl.arange(0, 2)
    ar = tl.reshape(ar, [1] * (n_dims - j - 1) + [2] + [1] * j)
    return ar


@triton.jit
def _compare_and_swap(x, flip, i: tl.constexpr):
    # The partner along the i-th innermost size-2 axis is (pair sum) - x: a plain sum reduction (exact under
    # two's-complement wraparound for ints), which the interpreter runs through numpy instead of the per-element
    # Python combine that tl.sort's xor_sum reduction costs it.
    n_dims: tl.constexpr = _log2(x.numel)
    y = tl.sum(x, axis=n_dims - 1 - i, keep_dims=True) - x
    is_right = _indicator(n_dims, i)
    return tl.where((x > y) != (flip ^ is_right).to(tl.int1), y, x)


@triton.jit
def _merge_hypercube(x, stage: tl.constexpr, order: tl.constexpr):
    if order == 2:
        flip = _indicator(_log2(x.numel), stage)
    else:
        flip = order
    for i in tl.static_range(stage):
        x = _compare_and_swap(x, flip, stage - 1 - i)
    return x


@triton.jit
def bitonic_sort_rows(x, DESC: tl.constexpr):
    """Sort a 2-D integer tensor (power-of-two sizes) along its last axis. Same network as tl.sort."""
    log_n: tl.constexpr = _log2(x.shape[1])
    n_dims: tl.constexpr = _log2(x.numel)
    h = tl.reshape(x, [2] * n_dims)
    for i in tl.static_range(1, log_n + 1):
        h = _merge_hypercube(h, i, 2 if i < log_n else DESC)
    return tl.reshape(h, x.shape)


@triton.jit
def sort_rows(x, DESC: tl.constexpr, USE_TL_SORT: tl.constexpr):
    """tl.sort when compiled (USE_TL_SORT), the interpreter-friendly network otherwise."""
    if USE_TL_SORT:
        y = tl.sort(x, dim=1, descending=DESC)
    else:
        y = bitonic_sort_rows(x, DESC)
    return y
