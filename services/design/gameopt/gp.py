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

Speed (issue 36; profiled first: 34 ms of a 35 ms Hedge round at L = 32 was GPyTorch rebuilding the test covariance
of 640 one-hot deviations through `posterior`): for the one-hot kernel the posterior is computed here from the fitted
hyperparameters, with the Cholesky factor of the training covariance (and K^-1 y, K^-1) formed once per fit and
reused for every query. The RBF over one-hot vectors has log k(x, x') = -sum over sites where x and x' differ of
(w[s, x_s] + w[s, x'_s]), w = 1 / (2 l^2), so every single-site change of a sequence x (the deviations a game scores
each round) is k(x, X_n) times a per-(site, letter, observation) factor: `single_site` scores all L x A deviations in
O(L A n + L A n^2) without building any one-hot matrix. `cross_cov` gives the joint posterior covariance the batch
selection hallucinates with (GP-BUCB). The test suite checks all three against BoTorch's own posterior.
On CUDA the project's kernels.pairwise_kernel is not used: BoTorch/GPyTorch compute the covariance (the kernel's
lengthscales, the one-hot transform and the marginal-likelihood fit are all theirs), and at campaign sizes (n up to a
few thousand observations, 20 x L one-hot features) the GP solve, not the covariance, is the cost."""
from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import scipy.linalg
import scipy.optimize
import torch
from threadpoolctl import threadpool_limits
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
            if kernel == "onehot":
                _fit_onehot(self.model, X, train_Y.squeeze(-1), alphabet_size, maxiter)
            else:
                mll = ExactMarginalLogLikelihood(self.model.likelihood, self.model)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
        self.model.eval()
        self.fast = _OneHotPosterior(self.model, X, train_Y.squeeze(-1).numpy(), alphabet_size) \
            if kernel == "onehot" else None

    def mean_std(self, X: np.ndarray | torch.Tensor, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent function, in standardised units."""
        if self.fast is not None:
            return self.fast.mean_std(np.asarray(X))
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

    def hallucinated(self, P: np.ndarray) -> "Surrogate":
        """A view of this surrogate conditioned also on P at its posterior mean (fast path only; else itself)."""
        if self.fast is None or not len(P):
            return self
        out = copy.copy(self)
        out.fast = self.fast.with_pseudo(P)
        return out

    def single_site(self, x: np.ndarray, beta: float = 2.0) -> tuple[np.ndarray, np.ndarray] | None:
        """(L, A) posterior mean and standard deviation of x with site s set to letter a, for every (s, a); None
        when the kernel has no fast path."""
        return None if self.fast is None else self.fast.single_site(np.asarray(x, dtype=np.int64))


    def cov_columns(self, C: np.ndarray):
        """For the rows of C: a function j -> (m,) posterior covariance of every row with row j, and the
        observation noise variance (standardised units)."""
        C = np.atleast_2d(np.asarray(C, dtype=np.int64))
        if self.fast is not None:
            f = self.fast
            Kc = np.exp(f.log_k(C))
            B = Kc @ f.Kinv
            return (lambda j: np.exp(f.log_k(C, C[j:j + 1]))[:, 0] - B @ Kc[j]), f.noise
        with torch.no_grad():
            cov = self.model.posterior(torch.as_tensor(C, dtype=DTYPE)).covariance_matrix.numpy()
        return (lambda j: cov[:, j]), float(self.model.likelihood.noise.mean())


def _fit_onehot(model: SingleTaskGP, X: np.ndarray, y: torch.Tensor, alphabet_size: int, maxiter: int) -> None:
    """Maximise the same objective as `fit_gpytorch_mll` on the model (exact marginal log likelihood plus the
    model's lengthscale and noise priors, over n; the constraints' softplus parametrisation; scipy's L-BFGS-B from
    the model's initial values, `maxiter` iterations), written directly in torch on the one-hot Gram matrix, and set
    the result on the model. Profiled: GPyTorch's generic path spent 30 ms a step in its backward at n = 100,
    L = 32 (6-9 s a fit on the loaded 2-core machine); this takes a few ms a step."""
    covar, lik = model.covar_module, model.likelihood
    onehot = torch.nn.functional.one_hot(torch.as_tensor(X), alphabet_size).to(DTYPE).flatten(-2)  # (n, d)
    n = len(y)
    ls_prior, ls_bound = covar.lengthscale_prior, float(covar.raw_lengthscale_constraint.lower_bound)
    fixed_noise = not hasattr(lik, "noise_covar") or not hasattr(lik.noise_covar, "raw_noise_constraint")
    raw = [covar.raw_lengthscale.detach().clone().reshape(-1), model.mean_module.raw_constant.detach().clone()
           .reshape(1)]
    if fixed_noise:
        noise_fixed = lik.noise.detach().reshape(-1)
    else:
        nz_prior, nz_bound = lik.noise_covar.noise_prior, float(lik.noise_covar.raw_noise_constraint.lower_bound)
        raw.append(lik.noise_covar.raw_noise.detach().clone().reshape(1))
    sizes = [len(r) for r in raw]
    x0 = torch.cat(raw).numpy()

    def unpack(theta: torch.Tensor):
        parts = torch.split(theta, sizes)
        ls = torch.nn.functional.softplus(parts[0]) + ls_bound
        noise = noise_fixed if fixed_noise else torch.nn.functional.softplus(parts[2]) + nz_bound
        return ls, parts[1][0], noise

    def objective(v: np.ndarray) -> tuple[float, np.ndarray]:
        theta = torch.as_tensor(v, dtype=DTYPE).requires_grad_(True)
        ls, c, noise = unpack(theta)
        w = ls.pow(-2)
        q = (onehot * w) @ onehot.T
        d = q.diagonal()
        K = torch.exp(-0.5 * (d[:, None] + d[None, :] - 2 * q))
        K = K + torch.diag(noise.expand(n) if noise.numel() == 1 else noise)
        Lc = torch.linalg.cholesky(K)
        r = (y - c).unsqueeze(-1)
        a = torch.cholesky_solve(r, Lc)
        mll = -0.5 * (r * a).sum() - torch.log(Lc.diagonal()).sum() - 0.5 * n * math.log(2 * math.pi)
        mll = mll + ls_prior.log_prob(ls).sum()
        if not fixed_noise:
            mll = mll + nz_prior.log_prob(noise).sum()
        loss = -mll / n
        loss.backward()
        return float(loss), theta.grad.numpy().copy()

    try:  # one BLAS thread: L-BFGS-B's small vector operations on a multi-threaded BLAS took 25 ms a step, loaded
        with threadpool_limits(limits=1, user_api="blas"):
            res = scipy.optimize.minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
        theta = torch.as_tensor(res.x, dtype=DTYPE)
    except (torch.linalg.LinAlgError, RuntimeError):  # an ill-conditioned step: keep the initial values
        theta = torch.as_tensor(x0, dtype=DTYPE)
    ls, c, noise = unpack(theta)
    with torch.no_grad():
        covar.lengthscale = ls.reshape(covar.raw_lengthscale.shape)
        model.mean_module.constant = c
        if not fixed_noise:
            lik.noise = noise


class _OneHotPosterior:
    """The exact posterior of a fitted SingleTaskGP with an RBF (ARD) kernel over one-hot letters, outputscale 1
    (BoTorch's default covariance), constant mean, Gaussian noise; computed in numpy from its hyperparameters."""

    def __init__(self, model: SingleTaskGP | None, X: np.ndarray, y: np.ndarray, alphabet_size: int,
                 params: tuple[np.ndarray, float, np.ndarray] | None = None) -> None:
        self.length, self.A = X.shape[1], alphabet_size
        if params is None:
            ls = model.covar_module.lengthscale.detach().double().numpy().reshape(self.length, alphabet_size)
            params = (0.5 / ls ** 2, float(model.mean_module.constant.detach()),
                      model.likelihood.noise.detach().double().numpy().reshape(-1))
        self.w, self.mean, noise = params  # w = 1 / (2 l^2), (L, A)
        self.noise_vec = noise
        self.noise = float(np.mean(noise))
        self.y = y
        self.X = X
        self.sites = np.arange(self.length)
        self.Sn = self.w[self.sites[None, :], X].sum(-1)  # (n,)
        K = np.exp(self.log_k(X))
        K[np.diag_indices_from(K)] += noise if len(noise) == len(X) else noise[0]
        jitter = 0.0
        for _ in range(6):
            try:
                self.chol = np.linalg.cholesky(K + jitter * np.eye(len(K)))
                break
            except np.linalg.LinAlgError:
                jitter = max(1e-8, jitter * 10)
        else:
            raise np.linalg.LinAlgError("training covariance is not positive definite")
        eye = np.eye(len(K))
        Linv = scipy.linalg.solve_triangular(self.chol, eye, lower=True)
        self.Kinv = Linv.T @ Linv
        self.alpha = self.Kinv @ (y - self.mean)
        # C[s, a, n]: the site-s term of -log k between "letter a at s" and observation n
        Wn = self.w[self.sites[None, :], X]  # (n, L)
        C = self.w[:, :, None] + Wn.T[:, None, :]  # (L, A, n)
        C[self.sites[:, None], X.T, np.arange(len(X))[None, :]] = 0.0  # same letter: no term
        self.C = C

    def log_k(self, X: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
        """(m, n) log k between the rows of X and of Z (default: the training sequences)."""
        X = np.atleast_2d(X)
        Z = self.X if Z is None else np.atleast_2d(Z)
        Sx = self.w[self.sites[None, :], X].sum(-1)
        Sz = self.Sn if Z is self.X else self.w[self.sites[None, :], Z].sum(-1)
        eq = np.zeros((len(X), len(Z)))
        for s in range(self.length):  # shared letters at site s count w[s, letter] twice less
            eq += (X[:, s, None] == Z[None, :, s]) * self.w[s, X[:, s]][:, None]
        return -(Sx[:, None] + Sz[None, :] - 2.0 * eq)

    def _finish(self, Kx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu = self.mean + Kx @ self.alpha
        var = 1.0 - np.einsum("mn,mn->m", Kx @ self.Kinv, Kx)
        return mu, np.sqrt(np.clip(var, 1e-12, None))

    def mean_std(self, X: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        if not len(X):
            return np.zeros(0), np.zeros(0)
        parts = [self._finish(np.exp(self.log_k(X[i:i + chunk]))) for i in range(0, len(X), chunk)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def single_site(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wx = self.w[self.sites, x]  # (L,)
        lk0 = -(wx.sum() + self.Sn - 2.0 * ((self.X == x[None, :]) * wx[None, :]).sum(1))  # (n,) = log_k(x)
        own = self.C[self.sites, x, :]  # (L, n): the current letter's terms
        lk = lk0[None, None, :] - (self.C - own[:, None, :])  # (L, A, n)
        mu, sd = self._finish(np.exp(lk.reshape(-1, len(self.X))))
        return mu.reshape(self.length, self.A), sd.reshape(self.length, self.A)

    def with_pseudo(self, P: np.ndarray) -> "_OneHotPosterior":
        """The same GP conditioned, in addition, on P observed at its posterior mean (a hallucination: the mean
        stays, sigma shrinks around P)."""
        P = np.atleast_2d(np.asarray(P, dtype=np.int64))
        mu, _ = self.mean_std(P)
        noise = np.concatenate([self.noise_vec if len(self.noise_vec) == len(self.X)
                                else np.full(len(self.X), self.noise_vec[0]), np.full(len(P), self.noise)])
        return _OneHotPosterior(None, np.concatenate([self.X, P]), np.concatenate([self.y, mu]), self.A,
                                params=(self.w, self.mean, noise))

    def cross_cov(self, X: np.ndarray, P: np.ndarray) -> np.ndarray:
        """(m, p) posterior covariance between the rows of X and those of P."""
        Kx, Kp = np.exp(self.log_k(X)), np.exp(self.log_k(P))
        return np.exp(self.log_k(X, P)) - (Kx @ self.Kinv) @ Kp.T
