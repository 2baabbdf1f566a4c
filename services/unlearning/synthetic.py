"""Small synthetic data sets for the demo, the tests and the benchmark (no downloads).

- `blobs`: Gaussian class blobs in d dimensions, rows scaled to norm <= 1 like normalised encoder
  embeddings (the guard's frozen features are unit-norm).
- `regression`: a linear model plus Gaussian noise (the paper's own synthetic regime).
- `shift_labels`: the out-of-distribution forget set of the paper: the same features with shifted labels
  (classification: the next class; regression: a fixed offset).
"""
from __future__ import annotations

import torch


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def blobs(n: int, dim: int, num_classes: int = 2, *, separation: float = 2.0, seed: int = 0,
          max_norm: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    centers = torch.randn(num_classes, dim, generator=g, dtype=torch.float64)
    centers = separation * centers / centers.norm(dim=1, keepdim=True)
    y = torch.randint(num_classes, (n,), generator=g)
    X = centers[y] + torch.randn(n, dim, generator=g, dtype=torch.float64)
    X = max_norm * X / X.norm(dim=1).max()
    return X, y


def regression(n: int, dim: int, *, noise: float = 0.1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    w = torch.randn(dim, generator=g, dtype=torch.float64) / dim ** 0.5
    X = torch.randn(n, dim, generator=g, dtype=torch.float64) / dim ** 0.5
    y = X @ w + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def shift_labels(y: torch.Tensor, idx: torch.Tensor, *, num_classes: int = 2, offset: float = 10.0) -> torch.Tensor:
    """Copy of y with the labels at idx shifted: class c -> (c+1) mod C, or y + offset for real labels."""
    y = y.clone()
    if y.dtype.is_floating_point and num_classes <= 1:
        y[idx] = y[idx] + offset
    else:
        y[idx] = ((y[idx].to(torch.int64) + 1) % num_classes).to(y.dtype)
    return y
