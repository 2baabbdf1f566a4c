"""Isotropic Gaussian mixtures in closed form: the known density, exact samples, the marginal velocity of the
conditional-OT path x_t = t x1 + (1 - t) x0 (x0 ~ N(0, I)) that transports N(0, I) to the mixture, and the
mixture tilted by a quadratic energy (q ~ p exp(-beta E), E(x) = ||x - c||^2 / 2, again a mixture).

Per component k (mean m, std s): x_t | k ~ N(t m, a_t^2 I) with a_t^2 = t^2 s^2 + (1 - t)^2, and the conditional
velocity is m + (t s^2 - (1 - t)) / a_t^2 (x - t m); the marginal velocity weighs these by the posterior
responsibilities at x_t. This is the exact flow an ideal flow-matching model would learn: the tests' analytic flow."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mixture:
    means: torch.Tensor    # [K, d]
    stds: torch.Tensor     # [K]
    weights: torch.Tensor  # [K], sums to 1

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def to(self, dtype) -> "Mixture":
        return Mixture(self.means.to(dtype), self.stds.to(dtype), self.weights.to(dtype))

    def _component_logp(self, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """[n, K] log N(x; mean_k, var_k I) + log w_k."""
        d = x.shape[-1]
        sq = ((x[:, None, :] - mean[None]) ** 2).sum(-1)
        return (torch.log(self.weights)[None] - 0.5 * sq / var[None]
                - 0.5 * d * torch.log(2 * math.pi * var[None]))

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self._component_logp(x, self.means, self.stds ** 2), dim=1)

    def marginal_log_prob(self, x: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=x.dtype)
        var = t ** 2 * self.stds ** 2 + (1 - t) ** 2
        return torch.logsumexp(self._component_logp(x, t * self.means, var), dim=1)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        k = torch.multinomial(self.weights.double(), n, replacement=True, generator=generator)
        eps = torch.randn(n, self.dim, generator=generator, dtype=torch.float64).to(self.means.dtype)
        return self.means[k] + self.stds[k, None] * eps

    def velocity(self, x: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        """The marginal CondOT velocity at (x, t), t in [0, 1]."""
        t = torch.as_tensor(t, dtype=x.dtype)
        var = t ** 2 * self.stds ** 2 + (1 - t) ** 2                      # [K]
        resp = torch.softmax(self._component_logp(x, t * self.means, var), dim=1)  # [n, K]
        coef = (t * self.stds ** 2 - (1 - t)) / var                        # [K]
        vk = self.means[None] + coef[None, :, None] * (x[:, None, :] - t * self.means[None])  # [n, K, d]
        return (resp[..., None] * vk).sum(1)

    def tilted(self, center: torch.Tensor, beta: float) -> "Mixture":
        """p(x) exp(-beta ||x - c||^2 / 2) / Z as a mixture (product of Gaussians per component)."""
        prec = 1.0 / self.stds ** 2 + beta
        means = (self.means / self.stds[:, None] ** 2 + beta * center[None]) / prec[:, None]
        # the component's mass: w_k N(c; m_k, (s_k^2 + 1/beta) I)
        var = self.stds ** 2 + 1.0 / beta
        logw = (torch.log(self.weights) - 0.5 * ((center[None] - self.means) ** 2).sum(-1) / var
                - 0.5 * self.dim * torch.log(var))
        return Mixture(means, prec.rsqrt(), torch.softmax(logw, 0))


def builtin_gmm2d(dtype=torch.float32) -> Mixture:
    """The built-in 2-D data set: eight well-separated modes on a ring of radius 4 (std 0.4), equal weights."""
    ang = torch.arange(8, dtype=torch.float64) * (2 * math.pi / 8)
    means = 4.0 * torch.stack([ang.cos(), ang.sin()], 1)
    return Mixture(means.to(dtype), torch.full((8,), 0.4, dtype=dtype), torch.full((8,), 1 / 8, dtype=dtype))
