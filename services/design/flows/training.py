"""Training objectives and built-in data.

- Conditional flow matching (Lipman et al.) on vectors: x_t = t x1 + (1 - t) x0 with x0 ~ N(0, I), target
  dx_t = x1 - x0 (flow_matching's AffineProbPath with the CondOT scheduler), loss ||v(x_t, t) - dx_t||^2.
- Energy-weighted flow matching (EFM, Zhang et al. 2025): the same regression weighted by
  exp(-beta E(x1)) / E_p[exp(-beta E)], which makes the learned flow generate q(x) ~ p(x) exp(-beta E(x)) directly
  from samples of p, with no auxiliary model. The normaliser is estimated in each minibatch (self-normalised
  weights): consistent, slightly biased for small batches.
- Rotation flow matching on SO(3): R0 ~ Haar, geodesic R_t = R0 Exp(t xi) with xi = Log(R0^T R1), whose body-frame
  velocity is the constant xi; loss ||omega(R_t, t) - xi||^2. Its EFM variant weights the same regression by
  exp(-beta E(R1)), self-normalised per minibatch as above (the argument does not depend on the path: the weighted
  loss is the CFM loss under q), with the quadratic energy of the embedding E(R) = ||R - C||_F^2 / 2 =
  3 - tr(C^T R), C a centre rotation (the distance reward on SO(3) is tr(C^T R) - 3 = -E).
- Predictor regression (mean squared error on standardised labels)."""
from __future__ import annotations

import math

import torch
from flow_matching.path import AffineProbPath
from flow_matching.path.scheduler import CondOTScheduler

from services.design.flows import geometry as so3
from services.design.flows.mixture import builtin_gmm2d

PATH = AffineProbPath(scheduler=CondOTScheduler())
BUILTINS = ("gmm2d", "pointcloud", "so3_mixture")


def builtin_data(name: str, n: int, generator: torch.Generator) -> torch.Tensor:
    """gmm2d: [n, 2] from the 8-mode ring; pointcloud: [n, 18], six 3-D points on a tilted noisy circle of random
    radius and phase, flattened; so3_mixture: [n, 3, 3] rotations around four fixed centres (0.2 rad spread)."""
    if name == "gmm2d":
        return builtin_gmm2d(torch.float64).sample(n, generator).float()
    if name == "pointcloud":
        radius = 0.8 + 0.4 * torch.rand(n, 1, generator=generator, dtype=torch.float64)
        phase = 2 * math.pi * torch.rand(n, 1, generator=generator, dtype=torch.float64)
        ang = phase + torch.arange(6, dtype=torch.float64)[None] * (2 * math.pi / 6)
        pts = torch.stack([radius * ang.cos(), radius * ang.sin(), 0.3 * radius * ang.cos()], -1)
        pts = pts + 0.05 * torch.randn(pts.shape, generator=generator, dtype=torch.float64)
        return pts.reshape(n, 18).float()
    if name == "so3_mixture":
        return so3_mixture_data(n, generator)
    raise ValueError(f"unknown builtin {name!r}")


def so3_centres() -> torch.Tensor:
    axes = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]], dtype=torch.float64)
    axes = axes / axes.norm(dim=1, keepdim=True)
    return so3.exp(axes * torch.tensor([0.5, 1.5, 2.5, 2.0], dtype=torch.float64)[:, None])


def so3_mixture_data(n: int, generator: torch.Generator) -> torch.Tensor:
    centres = so3_centres()
    k = torch.randint(0, len(centres), (n,), generator=generator)
    eps = 0.2 * torch.randn(n, 3, generator=generator, dtype=torch.float64)
    return centres[k] @ so3.exp(eps)


def cfm_loss(model, x1: torch.Tensor, generator: torch.Generator, weights: torch.Tensor | None = None
             ) -> torch.Tensor:
    x0 = torch.randn(x1.shape, generator=generator, dtype=x1.dtype)
    t = torch.rand(x1.shape[0], generator=generator, dtype=x1.dtype)
    s = PATH.sample(x_0=x0, x_1=x1, t=t)
    err = ((model(s.x_t, s.t) - s.dx_t) ** 2).sum(-1)
    return err.mean() if weights is None else (weights * err).mean()


def energy_weights(energy: torch.Tensor, beta: float) -> torch.Tensor:
    """exp(-beta E) / mean(exp(-beta E)) over the minibatch (self-normalised; mean weight 1)."""
    return torch.softmax(-beta * energy, dim=0) * energy.shape[0]


def quadratic_energy(x: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((x - center.to(x.dtype)) ** 2).sum(-1)


def efm_loss(model, x1: torch.Tensor, generator: torch.Generator, energy: torch.Tensor, beta: float) -> torch.Tensor:
    return cfm_loss(model, x1, generator, weights=energy_weights(energy, beta))


def so3_cfm_loss(model, R1: torch.Tensor, generator: torch.Generator, weights: torch.Tensor | None = None
                 ) -> torch.Tensor:
    R0 = so3.uniform(R1.shape[0], generator, R1.dtype)
    t = torch.rand(R1.shape[0], generator=generator, dtype=R1.dtype)
    xi = so3.log(R0.transpose(-1, -2) @ R1)
    Rt = R0 @ so3.exp(t[:, None] * xi)
    err = ((model(Rt, t) - xi) ** 2).sum(-1)
    return err.mean() if weights is None else (weights * err).mean()


def so3_quadratic_energy(R: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    """||R - C||_F^2 / 2 = 3 - tr(C^T R) for rotations R [n, 3, 3] and a centre rotation C [3, 3]."""
    return 3.0 - torch.einsum("ij,nij->n", center.to(R.dtype), R)


def so3_efm_loss(model, R1: torch.Tensor, generator: torch.Generator, energy: torch.Tensor, beta: float
                 ) -> torch.Tensor:
    return so3_cfm_loss(model, R1, generator, weights=energy_weights(energy, beta))


def predictor_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (((model(x) - y) / model.y_std) ** 2).mean()
