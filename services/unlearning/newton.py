"""Damped Newton to a certified radius, for a block-structured strongly convex problem a model adapter supplies
(the moderation guard's heads: services/moderation/heads.py, found through catalog.model_adapter): the certified
noisy minimizer's descent when Newton converges in a handful of steps where gradient descent needs thousands."""
from __future__ import annotations

import math

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning.certified import GDResult, GDState

DTYPE = torch.float64


def newton_to_radius(problem, X: torch.Tensor, Y: torch.Tensor, theta0: torch.Tensor,
                     radius: float, *, max_steps: int = 200, state: GDState | None = None,
                     max_iters: int | None = None) -> GDResult:
    """Damped Newton (Armijo backtracking on J) until ||grad J|| <= mu * radius, certifying
    ||theta - theta*|| <= radius (mu-strong convexity). Resumable in chunks from `state` (pauses after
    `max_iters` more iterations) like certified.gd_to_radius."""
    if not radius > 0:
        raise InvalidArgument("r", "must be > 0")
    X, Y = problem.check_data(X, Y)
    tol = problem.mu * radius
    st = state if state is not None else GDState(theta=theta0.to(DTYPE).clone())
    systems = problem.block_systems(st.theta, X, Y)
    rows = sum(0 if A is None else A.shape[0] for _, A, _, _ in systems)
    stop = None if max_iters is None else st.step + max_iters
    finished = True
    while True:
        g = problem.gradient(st.theta, X, Y)
        st.grad_evals += rows
        st.grad_norm = float(g.norm())
        if not math.isfinite(st.grad_norm):
            raise FailedPrecondition("Newton's method diverged (non-finite gradient)")
        if st.grad_norm <= tol or st.step >= max_steps:
            break
        step = problem.newton_direction(st.theta, g, systems)
        f0 = problem.objective(st.theta, X, Y)
        a, slope = 1.0, float(g @ step)
        while a > 1e-10:
            cand = st.theta - a * step
            if problem.objective(cand, X, Y) <= f0 - 1e-4 * a * slope:
                break
            a *= 0.5
        else:
            a = 1.0  # at the rounding floor of J: the full Newton step (quadratic convergence there)
        st.theta = st.theta - a * step
        st.step += 1
        if stop is not None and st.step >= stop:
            finished = False
            break
    # L <= max ||[phi, 1]||^2 + mu bounds every block's Hessian (weights sum to <= 1 per level)
    smooth = float((X ** 2).sum(1).max()) + 1.0 + problem.mu if X.shape[0] else 1.0 + problem.mu
    return GDResult(theta=st.theta, steps=st.step, grad_evals=st.grad_evals, grad_norm=st.grad_norm,
                    converged=finished and st.grad_norm <= tol, step_size=1.0, smoothness=smooth, finished=finished,
                    state=st)
