"""Unknown infeasibility learned from observations (issue 36): a measurement that fails (an expression that does not
fold, an Ehrlich sequence with a banned transition) is stored as infeasible, not as a value, and this model learns
from those failures which sequences are likely to fail. Constraints a campaign declares are never left to it: they
are `SequenceSpace.feasible`'s, and no suggestion breaks them.

Model: independent hazards (a noisy-OR) on the sequence's features, the GP's one-hot letters per site plus the
adjacent letter pairs (position-free, as a forbidden motif is):

    P(feasible | x) = exp(-sum_j c_j(x) lambda_j),   lambda_j >= 0,

c_j(x) the count of feature j in x. A failure is explained by at least one of its features, a success clears all of
its features; the negative log likelihood is convex in lambda. Each lambda_j has a Gamma(a, b) prior with mode
`prior_hazard` (a feature never seen is risky, exp(-0.1) each by default) and a weak strength, so one success at a
feature brings its hazard down about tenfold. Fitted by L-BFGS-B on log lambda (analytic gradient); with no failure observed the fit is
the closed form (a - 1) / (b + successes) and the optimizer does not use the model at all (nothing has failed).

`single_site(x)` gives log P(feasible) of every single-site change of x at once (the games' deviations)."""
from __future__ import annotations

import numpy as np
import scipy.optimize
from threadpoolctl import threadpool_limits


class FeasibilityModel:
    def __init__(self, X: np.ndarray, feasible: np.ndarray, alphabet_size: int, *, prior_hazard: float = 0.1,
                 strength: float = 0.1, maxiter: int = 100) -> None:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        feasible = np.asarray(feasible, dtype=bool).reshape(-1)
        self.length, self.A = X.shape[1], alphabet_size
        L, A = self.length, alphabet_size
        self.failures = int((~feasible).sum())
        # Gamma(a, b) prior: mode (a - 1) / b = prior_hazard; one success moves it to (a - 1) / (b + 1)
        b = strength / (1.0 - strength)  # strength 0.1: b = 1/9, so one success divides the hazard by 10
        a = 1.0 + prior_hazard * b
        F = self.features(X)  # (n, d) counts
        succ = F[feasible].sum(0)
        lam = (a - 1.0) / (b + succ)
        if self.failures and len(X):
            lam = self._fit(F, feasible, a, b, lam, maxiter)
        self.site = lam[: L * A].reshape(L, A)
        self.pair = lam[L * A:].reshape(A, A)

    def features(self, X: np.ndarray) -> np.ndarray:
        L, A = self.length, self.A
        n = len(X)
        F = np.zeros((n, L * A + A * A))
        F[np.arange(n)[:, None], np.arange(L)[None, :] * A + X] = 1.0
        if L > 1:
            np.add.at(F, (np.repeat(np.arange(n), L - 1), L * A + (X[:, :-1] * A + X[:, 1:]).ravel()), 1.0)
        return F

    @staticmethod
    def _fit(F: np.ndarray, feasible: np.ndarray, a: float, b: float, lam0: np.ndarray, maxiter: int) -> np.ndarray:
        """MAP of log lambda by L-BFGS-B with the analytic gradient (numpy; one BLAS thread)."""
        ok, bad = F[feasible], F[~feasible]
        succ = ok.sum(0)

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            lam = np.exp(theta)
            Hb = np.maximum(bad @ lam, 1e-12)
            # -log(1 - exp(-H)) for the failures; the Gamma prior's log density in lambda (its mode stays
            # (a - 1) / b: no Jacobian of the log)
            nll = succ @ lam - np.log(-np.expm1(-Hb)).sum() - ((a - 1.0) * theta - b * lam).sum()
            g_lam = succ - bad.T @ (1.0 / np.expm1(Hb)) + b
            return float(nll), lam * g_lam - (a - 1.0)

        with threadpool_limits(limits=1, user_api="blas"):
            res = scipy.optimize.minimize(objective, np.log(lam0), jac=True, method="L-BFGS-B",
                                          options={"maxiter": maxiter})
        return np.exp(res.x)

    def hazard(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        h = self.site[np.arange(self.length)[None, :], X].sum(-1)
        if self.length > 1:
            h = h + self.pair[X[:, :-1], X[:, 1:]].sum(-1)
        return h

    def log_prob(self, X: np.ndarray) -> np.ndarray:
        """(n,) log P(feasible)."""
        return -self.hazard(X)

    def single_site(self, x: np.ndarray) -> np.ndarray:
        """(L, A) log P(feasible) of x with site s set to letter a."""
        x = np.asarray(x, dtype=np.int64)
        L = self.length
        base = self.hazard(x[None])[0]
        s = np.arange(L)
        H = base - self.site[s, x][:, None] + self.site  # (L, A)
        if L > 1:
            left = np.zeros((L, self.A))
            left[1:] = self.pair[x[:-1], :] - self.pair[x[:-1], x[1:]][:, None]  # pair (x_{s-1}, a)
            right = np.zeros((L, self.A))
            right[:-1] = self.pair[:, x[1:]].T - self.pair[x[:-1], x[1:]][:, None]  # pair (a, x_{s+1})
            H = H + left + right
        return -H
