"""Rewards as differentiable functions R(x) -> [n] (higher is better), a weighted sum of terms chosen per request:

  distance     Euclidean: -||x - target||^2; SO(3): tr(T^T R) - 3 = -||R - T||_F^2 / 2 with T from a quaternion
  log_density  log of an isotropic Gaussian mixture with the given centres and std (a known density; Euclidean)
  predictor    a registered property predictor (models.Predictor), trained by a job on labelled samples"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from services.design.flows import geometry as so3


@dataclass
class Term:
    kind: str
    weight: float = 1.0
    target: torch.Tensor | None = None     # distance: [d] (Euclidean) / [4] quaternion (SO(3)); log_density: [K*d]
    scale: float = 1.0                     # log_density: the mixture's std
    module: nn.Module | None = None        # predictor
    name: str = ""


@dataclass
class Reward:
    geometry: str
    dim: int
    terms: list[Term] = field(default_factory=list)

    def term_value(self, term: Term, x: torch.Tensor) -> torch.Tensor:
        if term.kind == "distance":
            if self.geometry == "so3":
                T = so3.from_quat(term.target.to(x.dtype))
                return (T[None] * x).sum((-1, -2)) - 3.0
            return -((x - term.target.to(x.dtype)) ** 2).sum(-1)
        if term.kind == "log_density":
            c = term.target.to(x.dtype).reshape(-1, self.dim)
            var = term.scale ** 2
            sq = ((x[:, None] - c[None]) ** 2).sum(-1)
            return (torch.logsumexp(-0.5 * sq / var, 1) - math.log(len(c))
                    - 0.5 * self.dim * math.log(2 * math.pi * var))
        if term.kind == "predictor":
            return term.module.to(x.dtype)(x)
        raise ValueError(f"unknown reward term {term.kind!r}")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape[0], dtype=x.dtype)
        for term in self.terms:
            total = total + term.weight * self.term_value(term, x)
        return total
