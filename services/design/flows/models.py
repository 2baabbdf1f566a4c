"""Velocity fields and their registry form (weights as safetensors + a JSON config).

A Euclidean flow is v(x, t) -> R^d; an SO(3) flow is omega(R, t) -> so(3) in the body frame, integrated as
R <- R Exp(dt omega). Kinds:
  mlp            a velocity MLP trained by conditional flow matching (or by EFM: same network, other loss)
  analytic_gmm   the exact marginal velocity of a registered Gaussian mixture (mixture.py); its log-density is
                 known in closed form, which the guidance statistics and the tests use
  so3_mlp        an so(3)-valued MLP over the flattened rotation matrix, trained on the geodesic path"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from services.common.errors import FailedPrecondition
from services.design.flows.mixture import Mixture

from services.design.flows.params import FLOW_MODEL_KIND, PREDICTOR_MODEL_KIND  # noqa: F401
N_FREQ = 4


def time_features(t: torch.Tensor, n: int, dtype) -> torch.Tensor:
    t = torch.as_tensor(t, dtype=dtype).reshape(-1)
    t = t.expand(n) if t.numel() == 1 else t
    freqs = (2.0 ** torch.arange(N_FREQ, dtype=dtype)) * math.pi
    ang = t[:, None] * freqs[None]
    return torch.cat([t[:, None], ang.sin(), ang.cos()], 1)


def mlp(inp: int, out: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = []
    width = inp
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.SiLU()]
        width = hidden
    mods.append(nn.Linear(width, out))
    return nn.Sequential(*mods)


class VelocityMLP(nn.Module):
    geometry = "euclidean"

    def __init__(self, dim: int, hidden: int = 128, layers: int = 3):
        super().__init__()
        self.dim, self.hidden, self.layers = dim, hidden, layers
        self.net = mlp(dim + 1 + 2 * N_FREQ, dim, hidden, layers)

    def forward(self, x: torch.Tensor, t) -> torch.Tensor:
        return self.net(torch.cat([x, time_features(t, x.shape[0], x.dtype)], 1))

    def config(self) -> dict[str, Any]:
        return {"arch": "mlp", "geometry": "euclidean", "dim": self.dim, "hidden": self.hidden, "layers": self.layers}


class AnalyticGMMFlow(nn.Module):
    """The exact CondOT marginal velocity of a Gaussian mixture (no training)."""

    geometry = "euclidean"

    def __init__(self, mixture: Mixture):
        super().__init__()
        self.register_buffer("means", mixture.means.clone())
        self.register_buffer("stds", mixture.stds.clone())
        self.register_buffer("weights", mixture.weights.clone())
        self.dim = mixture.dim

    @property
    def mixture(self) -> Mixture:
        return Mixture(self.means, self.stds, self.weights)

    def forward(self, x: torch.Tensor, t) -> torch.Tensor:
        return self.mixture.to(x.dtype).velocity(x, t)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return self.mixture.to(x.dtype).log_prob(x)

    def config(self) -> dict[str, Any]:
        return {"arch": "analytic_gmm", "geometry": "euclidean", "dim": self.dim}


class SO3VelocityMLP(nn.Module):
    geometry = "so3"

    def __init__(self, hidden: int = 128, layers: int = 3):
        super().__init__()
        self.dim, self.hidden, self.layers = 3, hidden, layers
        self.net = mlp(9 + 1 + 2 * N_FREQ, 3, hidden, layers)

    def forward(self, R: torch.Tensor, t) -> torch.Tensor:
        return self.net(torch.cat([R.flatten(1), time_features(t, R.shape[0], R.dtype)], 1))

    def config(self) -> dict[str, Any]:
        return {"arch": "so3_mlp", "geometry": "so3", "dim": 3, "hidden": self.hidden, "layers": self.layers}


class Predictor(nn.Module):
    """A property predictor (regression MLP) used as a differentiable reward; outputs in the labels' units."""

    def __init__(self, dim: int, hidden: int = 64, layers: int = 2, geometry: str = "euclidean"):
        super().__init__()
        self.dim, self.hidden, self.layers, self.geometry = dim, hidden, layers, geometry
        self.net = mlp(dim, 1, hidden, layers)
        self.register_buffer("x_mean", torch.zeros(dim))
        self.register_buffer("x_std", torch.ones(dim))
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_std", torch.ones(()))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) if self.geometry == "so3" else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = (self.features(x) - self.x_mean.to(x.dtype)) / self.x_std.to(x.dtype)
        return self.net(f).squeeze(-1) * self.y_std.to(x.dtype) + self.y_mean.to(x.dtype)

    def config(self) -> dict[str, Any]:
        return {"arch": "predictor", "geometry": self.geometry, "dim": self.dim, "hidden": self.hidden,
                "layers": self.layers}


def tensors_of(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}


def build_flow(tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> nn.Module:
    """(tensors, config) of a registered flow -> the velocity module (eval mode, float32 weights)."""
    arch = config.get("arch")
    if arch == "mlp":
        m: nn.Module = VelocityMLP(int(config["dim"]), int(config["hidden"]), int(config["layers"]))
    elif arch == "so3_mlp":
        m = SO3VelocityMLP(int(config["hidden"]), int(config["layers"]))
    elif arch == "analytic_gmm":
        m = AnalyticGMMFlow(Mixture(tensors["means"], tensors["stds"], tensors["weights"]))
    else:
        raise FailedPrecondition(f"not a flow model (arch {arch!r})", reason="NOT_A_FLOW")
    m.load_state_dict(tensors)
    return m.eval()


def build_predictor(tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> Predictor:
    if config.get("arch") != "predictor":
        raise FailedPrecondition(f"not a reward predictor (arch {config.get('arch')!r})", reason="NOT_A_PREDICTOR")
    m = Predictor(int(config["dim"]), int(config["hidden"]), int(config["layers"]), str(config["geometry"]))
    m.load_state_dict(tensors)
    return m.eval()
