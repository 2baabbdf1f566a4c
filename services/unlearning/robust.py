"""Out-of-distribution forget sets: robust noisy training, and the in-distribution / OOD regime of a request.

Why: warm-start unlearning (certified.py) costs about kappa * log(||grad F_R(theta_start)|| / (mu r)) steps.
For an in-distribution forget set the retain gradient at the kept minimizer is O(f/n) small; for an
out-of-distribution one (shifted labels) it can exceed the gradient at 0, so unlearning costs more than
retraining, even for one point when the loss gradient is unbounded (least squares). Allouah et al. (ICLR
2025, Alg. 2) fix this by training with a robust, noisy gradient descent whose per-step aggregate is a
coordinate-wise trimmed mean (trimming at least f/n on each side), so that up to f arbitrary points barely
move the kept iterate; unlearning then warm-starts from it.

Reconstruction (the paper publishes no code): learning runs robust noisy GD
    theta <- theta - eta * (TrimmedMean_k(per-example loss gradients) + mu theta) + eta * noise_std * N(0, I)
to a fixed point (or max_steps) and keeps that iterate privately as the warm start for every later request
(until k points have been removed: the deletion capacity). Every published output (the trained model and
each unlearned one) is then Algorithm 1's output: standard-ERM descent to radius r of the retain minimizer
from that warm start, plus the Gaussian mechanism. The certificate is therefore exactly Algorithm 1's
(it depends only on the stopping rule); robust training changes only the cost.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning.linear import DTYPE, LinearProblem


def trimmed_mean(G: torch.Tensor, trim: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean of the rows of G [n, P]: per coordinate drop the `trim` smallest and
    `trim` largest values and average the rest."""
    n = G.shape[0]
    if trim < 0 or 2 * trim >= n:
        raise InvalidArgument("trim", f"need 0 <= trim < n/2 (n={n}, trim={trim})")
    if trim == 0:
        return G.mean(0)
    Gt = G.T.contiguous()  # [P, n]: reduce along the contiguous axis
    if 4 * trim < n:
        # total minus the `trim` largest and `trim` smallest per coordinate (cheaper than a full sort)
        top = torch.topk(Gt, trim, dim=1, largest=True, sorted=False).values.sum(1)
        bottom = torch.topk(Gt, trim, dim=1, largest=False, sorted=False).values.sum(1)
        return (Gt.sum(1) - top - bottom) / (n - 2 * trim)
    S, _ = torch.sort(Gt, dim=1)
    return S[:, trim:n - trim].mean(1)


def trim_count(n: int, capacity: int, trim_fraction: float | None = None) -> int:
    """Points trimmed on each side: at least the deletion capacity f (trim >= f/n each side)."""
    k = int(capacity)
    if trim_fraction is not None:
        k = max(k, int(math.ceil(trim_fraction * n)))
    if 2 * k >= n:
        raise InvalidArgument("capacity", f"trimming {k} points on each side of {n} leaves nothing")
    return k


@dataclass
class RobustState:
    theta: torch.Tensor
    step: int = 0
    grad_evals: int = 0
    direction_norm: float = math.inf
    rng_state: torch.Tensor | None = None

    def to_dict(self) -> dict:
        return {"theta": self.theta.clone(), "step": self.step, "grad_evals": self.grad_evals,
                "direction_norm": None if math.isinf(self.direction_norm) else self.direction_norm,
                "rng_state": self.rng_state}

    @classmethod
    def from_dict(cls, d: dict) -> "RobustState":
        dn = d.get("direction_norm")
        return cls(theta=d["theta"].to(DTYPE), step=int(d["step"]), grad_evals=int(d["grad_evals"]),
                   direction_norm=math.inf if dn is None else float(dn), rng_state=d.get("rng_state"))


@dataclass
class RobustResult:
    theta: torch.Tensor
    steps: int
    grad_evals: int
    direction_norm: float
    trim: int
    step_size: float
    noise_std: float
    finished: bool = True          # False: paused after `max_iters` iterations; resume from `state`
    state: RobustState | None = field(default=None, repr=False)


def robust_train(problem: LinearProblem, X: torch.Tensor, y: torch.Tensor, *, trim: int, seed: int,
                 max_steps: int = 2000, tol: float | None = None, noise_std: float = 0.0,
                 theta0: torch.Tensor | None = None, state: RobustState | None = None,
                 max_iters: int | None = None) -> RobustResult:
    """Robust noisy gradient descent with a coordinate-wise trimmed-mean aggregate. Stops when the update
    direction's norm is <= tol (default mu * 1e-3) or after max_steps; with noise_std > 0 the noise floor
    usually keeps the norm above tol, so it runs the fixed max_steps iterations (as the paper's T). Each step costs len(X) per-example
    gradient evaluations (the sort is not a gradient evaluation).

    Resumable in chunks: with `max_iters` it pauses after that many more iterations and returns finished=False;
    `state` (advanced in place, also returned as result.state, with the noise generator's state) continues it
    exactly as an uninterrupted run."""
    X, y = problem.check_data(X, y)
    L = problem.smoothness(X)
    eta = 1.0 / L
    tol = problem.mu * 1e-3 if tol is None else tol
    g = torch.Generator()
    g.manual_seed(int(seed))
    st = state if state is not None else RobustState(theta=(problem.zeros() if theta0 is None else theta0.to(DTYPE)))
    if st.rng_state is not None:
        g.set_state(st.rng_state)
    n = X.shape[0]
    stop = max_steps if max_iters is None else min(max_steps, st.step + max_iters)
    converged = False
    while st.step < stop:
        d = trimmed_mean(problem.per_example_grads(st.theta, X, y), trim) + problem.mu * st.theta
        st.grad_evals += n
        st.direction_norm = float(d.norm())
        if not math.isfinite(st.direction_norm):
            raise FailedPrecondition("robust gradient descent diverged (non-finite update)")
        if st.direction_norm <= tol:
            converged = True
            break
        st.theta = st.theta - eta * d
        if noise_std > 0:
            st.theta = st.theta + eta * noise_std * torch.randn(st.theta.shape[0], generator=g, dtype=DTYPE)
        st.step += 1
        st.rng_state = g.get_state()
    return RobustResult(theta=st.theta, steps=st.step, grad_evals=st.grad_evals, direction_norm=st.direction_norm,
                        trim=trim, step_size=eta, noise_std=noise_std, finished=converged or st.step >= max_steps,
                        state=st)


@dataclass
class Regime:
    """Which side of the in-distribution / out-of-distribution divide a request falls on.
    Descent converges linearly from either start, so the start with the smaller retain-gradient norm is the
    cheaper one: warm start (in-distribution cost) vs from scratch (retrain cost)."""
    regime: str                   # "in_distribution" | "out_of_distribution"
    grad_norm_warm: float         # ||grad F_R(theta_start)||
    grad_norm_zero: float         # ||grad F_R(0)|| (where retraining starts)
    distance_bound_warm: float    # ||theta_start - theta*_R|| <= grad_norm_warm / mu
    predicted_steps_warm: int     # worst-case step bounds for GD with step 1/L to reach mu*r
    predicted_steps_retrain: int
    grad_evals: int               # cost of classifying (two full retain gradients)

    def to_dict(self) -> dict:
        return asdict(self)


def _steps_bound(problem: LinearProblem, g0: float, radius: float, L: float) -> int:
    # For mu-strongly convex, L-smooth F and step 1/L: ||grad_t|| <= (L/mu) (1 - mu/L)^t ||grad_0||.
    target = problem.mu * radius
    if g0 <= target:
        return 0
    rate = -math.log1p(-problem.mu / L) if problem.mu < L else math.inf
    return int(math.ceil(math.log((L / problem.mu) * g0 / target) / rate))


def classify_request(problem: LinearProblem, X_retain: torch.Tensor, y_retain: torch.Tensor,
                     theta_start: torch.Tensor, *, radius: float) -> Regime:
    X_retain, y_retain = problem.check_data(X_retain, y_retain)
    g_warm = float(problem.gradient(theta_start.to(DTYPE), X_retain, y_retain).norm())
    g_zero = float(problem.gradient(problem.zeros(), X_retain, y_retain).norm())
    L = problem.smoothness(X_retain)
    return Regime(regime="in_distribution" if g_warm < g_zero else "out_of_distribution",
                  grad_norm_warm=g_warm, grad_norm_zero=g_zero, distance_bound_warm=g_warm / problem.mu,
                  predicted_steps_warm=_steps_bound(problem, g_warm, radius, L),
                  predicted_steps_retrain=_steps_bound(problem, g_zero, radius, L),
                  grad_evals=2 * X_retain.shape[0])
