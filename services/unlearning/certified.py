"""Certified unlearning by noisy minimizer approximation (Allouah, Kazdan, Guerraoui & Koyejo, ICLR 2025,
Algorithm 1), for the strongly convex linear models of `linear.py`.

Learning:   from theta_0, run gradient descent (step 1/L) on F_S until ||grad F_S(theta_T)|| <= mu*r, which
            certifies ||theta_T - theta*_S|| <= r (mu-strong convexity: ||theta - theta*|| <= ||grad||/mu).
            Keep theta_T privately; publish theta_T + N(0, sigma^2 I).
Unlearning: warm-start the same descent on the retain objective F_{S\\Sf} from the kept theta_T, stop at
            ||grad F_{S\\Sf}|| <= mu*r, publish theta_T' + N(0, sigma^2 I).
Retraining without S_f (the reference the definition compares with) is the same procedure started
anywhere (here from 0): both pre-noise outputs lie within r of theta*_{S\\Sf}, so their distance is at most
Delta = 2r and the Gaussian mechanism gives (eps, delta)-indistinguishability with
sigma = Delta sqrt(2 ln(1.25/delta)) / eps. That formula is proved for eps < 1; we publish with
max(classical, analytic) sigma, where the analytic one (exact Gaussian-DP calibration) is valid for every eps.
Note the certificate depends only on the stopping rule, not on where the descent starts.

The noise is the certificate: it is drawn from the operating system's CSPRNG (`secret_unit_noise`), fresh for
every release, and no parameter can fix it. A public seed would let anyone regenerate the noise, subtract it and
recover the pre-noise minimizer (trained on the very records a request asked to forget). A resumed job may reuse
the draw it made before a crash, kept only in its private checkpoint, so that one request publishes one release.

The paper publishes no code; this implementation follows the algorithm as stated in the paper.
Cost is counted in per-example gradient evaluations (one full gradient over m examples = m).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning import privacy
from services.unlearning.linear import DTYPE, LinearProblem


@dataclass
class GDState:
    """Resumable state of a descent: the iterate, steps taken, gradient evaluations spent."""
    theta: torch.Tensor
    step: int = 0
    grad_evals: int = 0
    grad_norm: float = math.inf

    def to_dict(self) -> dict:
        return {"theta": self.theta.clone(), "step": self.step, "grad_evals": self.grad_evals,
                "grad_norm": None if math.isinf(self.grad_norm) else self.grad_norm}

    @classmethod
    def from_dict(cls, d: dict) -> "GDState":
        gn = d.get("grad_norm")
        return cls(theta=d["theta"].to(DTYPE), step=int(d["step"]), grad_evals=int(d["grad_evals"]),
                   grad_norm=math.inf if gn is None else float(gn))


@dataclass
class GDResult:
    theta: torch.Tensor
    steps: int
    grad_evals: int
    grad_norm: float
    converged: bool
    step_size: float
    smoothness: float
    finished: bool = True          # False: paused after `max_iters` iterations; resume from `state`
    state: GDState | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """What certify_and_publish needs of a finished descent (a resumed job publishes from it)."""
        return {"theta": self.theta.clone(), "steps": self.steps, "grad_evals": self.grad_evals,
                "grad_norm": self.grad_norm, "converged": self.converged, "step_size": self.step_size,
                "smoothness": self.smoothness}

    @classmethod
    def from_dict(cls, d: dict) -> "GDResult":
        return cls(theta=d["theta"].to(DTYPE), steps=int(d["steps"]), grad_evals=int(d["grad_evals"]),
                   grad_norm=float(d["grad_norm"]), converged=bool(d["converged"]), step_size=float(d["step_size"]),
                   smoothness=float(d["smoothness"]))


def gd_to_radius(problem: LinearProblem, X: torch.Tensor, y: torch.Tensor, theta0: torch.Tensor, radius: float,
                 *, max_steps: int = 100_000, state: GDState | None = None,
                 max_iters: int | None = None) -> GDResult:
    """Gradient descent with step 1/L on F_(X,y) until ||grad|| <= mu * radius (certifying
    ||theta - theta*|| <= radius). The stopping test reuses the step's own gradient, so every
    iteration costs exactly len(X) gradient evaluations.

    Resumable in chunks: with `max_iters` it pauses right after that many more iterations (before the next
    gradient, so a resumed run spends exactly the evaluations an uninterrupted one does) and returns
    finished=False; `state` (advanced in place, also returned as result.state) continues it."""
    if not radius > 0:
        raise InvalidArgument("r", "must be > 0")
    L = problem.smoothness(X)
    eta = 1.0 / L
    tol = problem.mu * radius
    st = state if state is not None else GDState(theta=theta0.to(DTYPE).clone())
    n = X.shape[0]
    stop = None if max_iters is None else st.step + max_iters
    finished = True
    while True:
        g = problem.gradient(st.theta, X, y)
        st.grad_evals += n
        st.grad_norm = float(g.norm())
        if not math.isfinite(st.grad_norm):
            raise FailedPrecondition("gradient descent diverged (non-finite gradient); check the features")
        if st.grad_norm <= tol or st.step >= max_steps:
            break
        st.theta = st.theta - eta * g
        st.step += 1
        if stop is not None and st.step >= stop:
            finished = False
            break
    return GDResult(theta=st.theta, steps=st.step, grad_evals=st.grad_evals, grad_norm=st.grad_norm,
                    converged=finished and st.grad_norm <= tol, step_size=eta, smoothness=L, finished=finished,
                    state=st)


@dataclass
class Certificate:
    """What the published parameters are certified for."""
    epsilon: float
    delta: float
    radius: float                 # r: ||theta_T - theta*_{retain}|| <= r before noise
    sensitivity: float            # Delta = 2r
    sigma: float                  # noise actually added
    sigma_classical: float
    sigma_analytic: float
    gdp_mu: float                 # Delta / sigma: the mechanism is gdp_mu-GDP
    mu: float                     # strong convexity (L2 regularisation)
    smoothness: float             # L
    step_size: float
    steps: int
    grad_evals: int
    final_grad_norm: float
    distance_bound: float         # final_grad_norm / mu  (<= r)
    start: str                    # "warm" | "zero"
    certified: bool = True
    definition: str = ("(eps, delta)-indistinguishable from retraining on the retain set with the same "
                       "procedure (Allouah et al. 2025, noisy minimizer approximation)")

    def to_dict(self) -> dict:
        return asdict(self)


def validate_privacy(epsilon: float, delta: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise InvalidArgument("epsilon", "must be a finite number > 0")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InvalidArgument("delta", "must be in (0, 1)")


def noise_sigma(radius: float, epsilon: float, delta: float) -> tuple[float, float, float]:
    """(sigma used, classical, analytic) for sensitivity 2r."""
    validate_privacy(epsilon, delta)
    sens = 2.0 * radius
    classical = privacy.classical_sigma(sens, epsilon, delta)
    analytic = privacy.analytic_sigma(sens, epsilon, delta)
    return max(classical, analytic), classical, analytic


def secret_unit_noise(num_params: int) -> torch.Tensor:
    """A N(0, I) vector from os.urandom by the Box-Muller transform: nothing outside this process can
    reproduce it (unlike a torch or numpy generator, whose whole stream follows from a seed)."""
    if num_params <= 0:
        return torch.zeros(0, dtype=DTYPE)
    pairs = (num_params + 1) // 2
    words = torch.frombuffer(bytearray(os.urandom(16 * pairs)), dtype=torch.int64).view(2, pairs)
    # 53 random bits per uniform; u1 in (0, 1] keeps the log finite, u2 in [0, 1)
    bits = (words >> 11) & ((1 << 53) - 1)
    scale = 2.0 ** -53
    u1 = (bits[0].to(DTYPE) + 1.0) * scale
    u2 = bits[1].to(DTYPE) * scale
    radius = torch.sqrt(-2.0 * torch.log(u1))
    z = torch.cat([radius * torch.cos(2 * math.pi * u2), radius * torch.sin(2 * math.pi * u2)])
    return z[:num_params].contiguous()


@dataclass
class CertifiedOutput:
    theta_private: torch.Tensor    # the pre-noise minimizer approximation: kept by the platform, never published
    theta_published: torch.Tensor  # theta_private + sigma * unit_noise
    certificate: Certificate
    unit_noise: torch.Tensor       # the secret N(0, I) draw: private (a resumed job reuses it), never published


def certify_and_publish(problem: LinearProblem, result: GDResult, *, radius: float, epsilon: float, delta: float,
                        start: str, sigma_scale: float = 1.0,
                        unit_noise: torch.Tensor | None = None) -> CertifiedOutput:
    """Turn a converged descent into a published, certified output. `unit_noise` is None (draw fresh secret
    noise) except when a resumed job hands back the draw it kept privately before a crash. `sigma_scale` exists
    only for the audit's mutation test (a broken mechanism); the certificate then reports certified=False."""
    if not result.converged:
        raise FailedPrecondition(
            f"gradient descent did not reach the certified radius r={radius:g} within {result.steps} steps "
            f"(gradient norm {result.grad_norm:.3g} > mu*r={problem.mu * radius:.3g}): raise max_steps or r")
    sigma, classical, analytic = noise_sigma(radius, epsilon, delta)
    sigma_used = sigma * sigma_scale
    z = secret_unit_noise(problem.num_params) if unit_noise is None else unit_noise.to(DTYPE).reshape(-1)
    if z.numel() != problem.num_params:
        raise FailedPrecondition("the kept noise draw does not match the model's parameters")
    cert = Certificate(epsilon=float(epsilon), delta=float(delta), radius=float(radius), sensitivity=2.0 * radius,
                       sigma=sigma_used, sigma_classical=classical, sigma_analytic=analytic,
                       gdp_mu=2.0 * radius / sigma_used, mu=problem.mu, smoothness=result.smoothness,
                       step_size=result.step_size, steps=result.steps, grad_evals=result.grad_evals,
                       final_grad_norm=result.grad_norm, distance_bound=result.grad_norm / problem.mu,
                       start=start, certified=sigma_scale >= 1.0)
    return CertifiedOutput(theta_private=result.theta.clone(), theta_published=result.theta + sigma_used * z,
                           certificate=cert, unit_noise=z.clone())


class CertifiedRun:
    """A descent to the certified radius (gd_to_radius, newton.newton_to_radius) then the Gaussian mechanism,
    for a job run as Steps (services.common.jobcontext): `advance()` runs `every` iterations (one job step), and the
    chunk that finishes the descent draws the secret noise (FAILED_PRECONDITION when it did not converge), so the
    checkpoint a job takes after that step keeps the draw before anything is published; `publish()` then gives the
    one release, also in a job resumed from that checkpoint. Pausing only between iterations, the chunks spend
    exactly the iterations and gradient evaluations of an uninterrupted descent (the certificate reports them).
    `run(state, max_iters)` runs one chunk from `state` (None: the start).

    How many chunks it takes is not known in advance: `total` is the estimate from `hint` iterations (or one more
    than run so far) until the descent finishes, then the chunks it took."""

    def __init__(self, problem, run: Callable[[GDState | None, int], GDResult], *, every: int, hint: int,
                 radius: float, epsilon: float, delta: float, start: str):
        self.problem, self.run, self.every = problem, run, int(every)
        self.radius, self.epsilon, self.delta, self.start = radius, epsilon, delta, start
        self.estimate = max(1, math.ceil(hint / self.every))
        self.gd: GDState | None = None
        self.result: GDResult | None = None  # the finished descent
        self.chunks = 0
        self.unit_noise: torch.Tensor | None = None

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def total(self) -> int:
        return self.chunks if self.finished else max(self.estimate, self.chunks + 1)

    @property
    def step(self) -> int:
        return 0 if self.gd is None else self.gd.step

    def advance(self) -> dict[str, float]:
        """Run one chunk; the progress metrics."""
        res = self.run(self.gd, self.every)
        self.gd, self.chunks = res.state, self.chunks + 1
        if res.finished:
            self.result = res
            self.unit_noise = self.publish().unit_noise  # the one secret draw
        return {"grad_norm": res.grad_norm, "grad_evals": float(res.grad_evals)}

    def publish(self) -> CertifiedOutput:
        return certify_and_publish(self.problem, self.result, radius=self.radius, epsilon=self.epsilon,
                                   delta=self.delta, start=self.start, unit_noise=self.unit_noise)

    def state(self) -> dict:
        return {"descent": {"gd": None if self.gd is None else self.gd.to_dict(), "chunks": self.chunks,
                            "result": None if self.result is None else self.result.to_dict()},
                "unit_noise": self.unit_noise}

    def load_state(self, st: dict) -> None:
        d = st["descent"]
        self.gd = None if d["gd"] is None else GDState.from_dict(d["gd"])
        self.chunks = int(d["chunks"])
        self.result = None if d["result"] is None else GDResult.from_dict(d["result"])
        self.unit_noise = st["unit_noise"]


def train_certified(problem: LinearProblem, X: torch.Tensor, y: torch.Tensor, *, radius: float, epsilon: float,
                    delta: float, max_steps: int = 100_000, theta0: torch.Tensor | None = None,
                    unit_noise: torch.Tensor | None = None) -> CertifiedOutput:
    """Learn theta_S to radius r and publish it through the same noisy mechanism as unlearning (so a trained
    model and a retrained one are drawn from the same procedure). In one go; a job runs the descent in
    resumable chunks (gd_to_radius with max_iters) and then certify_and_publish."""
    validate_privacy(epsilon, delta)
    X, y = problem.check_data(X, y)
    start = problem.zeros() if theta0 is None else theta0.to(DTYPE)
    res = gd_to_radius(problem, X, y, start, radius, max_steps=max_steps)
    return certify_and_publish(problem, res, radius=radius, epsilon=epsilon, delta=delta,
                               start="zero" if theta0 is None else "warm", unit_noise=unit_noise)


def unlearn_certified(problem: LinearProblem, X_retain: torch.Tensor, y_retain: torch.Tensor,
                      theta_start: torch.Tensor, *, radius: float, epsilon: float, delta: float,
                      max_steps: int = 100_000, sigma_scale: float = 1.0,
                      unit_noise: torch.Tensor | None = None) -> CertifiedOutput:
    """Algorithm 1's unlearning step: warm-start descent on the retain objective from the kept minimizer
    approximation, then the Gaussian mechanism."""
    validate_privacy(epsilon, delta)
    X_retain, y_retain = problem.check_data(X_retain, y_retain)
    res = gd_to_radius(problem, X_retain, y_retain, theta_start, radius, max_steps=max_steps)
    return certify_and_publish(problem, res, radius=radius, epsilon=epsilon, delta=delta,
                               start="warm", sigma_scale=sigma_scale, unit_noise=unit_noise)


def retrain_certified(problem: LinearProblem, X_retain: torch.Tensor, y_retain: torch.Tensor, *, radius: float,
                      epsilon: float, delta: float, max_steps: int = 100_000,
                      unit_noise: torch.Tensor | None = None) -> CertifiedOutput:
    """The gold standard: the same procedure on the retain set, from scratch."""
    return train_certified(problem, X_retain, y_retain, radius=radius, epsilon=epsilon, delta=delta,
                           max_steps=max_steps, unit_noise=unit_noise)


DEFAULT_EPSILON, DEFAULT_DELTA = 1.0, 1e-5  # a certified job's privacy budget unless the request or model sets one


def privacy_budget(epsilon: float | None, delta: float | None, config: dict | None = None) -> tuple[float, float]:
    """(epsilon, delta) of a request: the request's, else the model's, else the defaults; the values come from
    the typed params (already validated) or a model config (validated here)."""
    cfg = config or {}
    eps = float(epsilon if epsilon is not None else cfg.get("epsilon", DEFAULT_EPSILON))
    dl = float(delta if delta is not None else cfg.get("delta", DEFAULT_DELTA))
    validate_privacy(eps, dl)
    return eps, dl
