"""The GP surrogate: an exact GP (BoTorch SingleTaskGP, GPyTorch underneath) over integer-coded sequences,
fitted by maximising the exact marginal likelihood (botorch.fit.fit_gpytorch_mll).

Kernels: "onehot" (default, as GameOpt: constant mean, RBF with ARD lengthscales over the one-hot embedding; a
BoTorch input transform does the one-hot encoding, so every caller, BoTorch's discrete local search included,
passes integer letters) or "categorical" (BoTorch's CategoricalKernel with a lengthscale per site, on the integers).
Targets are standardised here (zero mean, unit variance), so UCB is in standard units whatever the assay's scale;
a known noise level becomes a fixed noise variance, otherwise the noise is fitted. The L-BFGS fit is capped at
`maxiter` iterations (50: the 20 x L ARD lengthscales otherwise take seconds to converge on a loaded CPU for a
change in the suggestions that is rarely visible).

The UCB payoff is mu(x) + beta * sigma(x) of the posterior (latent function, without observation noise).
On CUDA the project's kernels.pairwise_kernel is not used: BoTorch/GPyTorch compute the covariance (the kernel's
lengthscales, the one-hot transform and the marginal-likelihood fit are all theirs), and at campaign sizes (n up to a
few thousand observations, 20 x L one-hot features) the GP solve, not the covariance, is the cost."""
from __future__ import annotations

import warnings

import numpy as np
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.kernels.categorical import CategoricalKernel
from botorch.models.transforms.input import InputTransform
from gpytorch.kernels import ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

KERNELS = ("onehot", "categorical")
DTYPE = torch.float64


class IntegerToOneHot(InputTransform, torch.nn.Module):
    """(..., L) integer letters -> (..., L * A) one-hot, applied on train and on evaluation inputs."""

    def __init__(self, length: int, alphabet_size: int) -> None:
        super().__init__()
        self.length, self.alphabet_size = length, alphabet_size
        self.transform_on_train = True
        self.transform_on_eval = True
        self.transform_on_fantasize = True

    def transform(self, X: torch.Tensor) -> torch.Tensor:
        idx = X.round().long().clamp(0, self.alphabet_size - 1)
        return torch.nn.functional.one_hot(idx, self.alphabet_size).to(X.dtype).flatten(-2)

    def equals(self, other: InputTransform) -> bool:
        return isinstance(other, IntegerToOneHot) and (other.length, other.alphabet_size) == (
            self.length, self.alphabet_size)


class Surrogate:
    """Fit once on (X, y), then score many candidates: `ucb`, `mean_std`."""

    def __init__(self, X: np.ndarray, y: np.ndarray, alphabet_size: int, *, kernel: str = "onehot",
                 noise_std: float | None = None, seed: int = 0, maxiter: int = 50) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}")
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        self.length, self.alphabet_size, self.kernel = X.shape[1], alphabet_size, kernel
        self.y_mean = float(y.mean())
        self.y_std = float(y.std(ddof=1)) if len(y) > 1 and y.std() > 1e-12 else 1.0
        train_X = torch.as_tensor(X, dtype=DTYPE)
        train_Y = torch.as_tensor((y - self.y_mean) / self.y_std, dtype=DTYPE).unsqueeze(-1)
        kwargs = {}
        if noise_std is not None and noise_std > 0:
            kwargs["train_Yvar"] = torch.full_like(train_Y, (noise_std / self.y_std) ** 2)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            if kernel == "onehot":
                self.model = SingleTaskGP(train_X, train_Y, input_transform=IntegerToOneHot(self.length, alphabet_size),
                                          outcome_transform=None, **kwargs)
            else:
                covar = ScaleKernel(CategoricalKernel(ard_num_dims=self.length))
                self.model = SingleTaskGP(train_X, train_Y, covar_module=covar, outcome_transform=None, **kwargs)
            mll = ExactMarginalLogLikelihood(self.model.likelihood, self.model)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
        self.model.eval()

    def mean_std(self, X: np.ndarray | torch.Tensor, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent function, in standardised units."""
        Xt = torch.as_tensor(np.atleast_2d(np.asarray(X)), dtype=DTYPE)
        means, stds = [], []
        with torch.no_grad():
            for i in range(0, len(Xt), chunk):
                post = self.model.posterior(Xt[i:i + chunk])
                means.append(post.mean.squeeze(-1))
                stds.append(post.variance.clamp_min(1e-12).sqrt().squeeze(-1))
        if not means:
            return np.zeros(0), np.zeros(0)
        return torch.cat(means).numpy(), torch.cat(stds).numpy()

    def ucb(self, X: np.ndarray, beta: float = 2.0) -> np.ndarray:
        mu, sd = self.mean_std(X)
        return mu + beta * sd

    def to_original(self, mu: np.ndarray) -> np.ndarray:
        return mu * self.y_std + self.y_mean
