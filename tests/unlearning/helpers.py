"""Shared fixtures-as-functions for the unlearning tests: small synthetic data sets as artifacts."""
from __future__ import annotations

import torch

from services.common.jobcontext import InMemoryJobContext
from services.unlearning.data import encode_dataset
from services.unlearning.synthetic import blobs, regression


def blob_split(n: int = 1500, dim: int = 20, num_classes: int = 2, seed: int = 1, n_eval: int = 1000):
    X, y = blobs(n + n_eval, dim, num_classes, seed=seed)
    return (X[:n], y[:n]), (X[n:], y[n:])


def regression_split(n: int = 2000, dim: int = 20, seed: int = 1):
    return regression(n, dim, noise=0.1, seed=seed)


def forget_indices(n: int, f: int, seed: int = 5) -> torch.Tensor:
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g)[:f]


def masks(n: int, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    forget = torch.zeros(n, dtype=torch.bool)
    forget[idx] = True
    return ~forget, forget


def ctx_with_data(params: dict | None = None, *, n: int = 1500, dim: int = 20, num_classes: int = 2,
                  seed: int = 1) -> tuple[InMemoryJobContext, str, str, list[str]]:
    """A context holding a training set (record ids "rec-<i>") and a held-out set."""
    (X, y), (Xe, ye) = blob_split(n, dim, num_classes, seed)
    ids = [f"rec-{i}" for i in range(n)]
    ctx = InMemoryJobContext(params=dict(params or {}))
    ds = ctx.add_artifact(encode_dataset(X.float(), y, ids), name="train.safetensors")
    ev = ctx.add_artifact(encode_dataset(Xe.float(), ye), name="eval.safetensors")
    return ctx, ds, ev, ids
