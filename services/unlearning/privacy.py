"""Gaussian mechanism and Gaussian-DP arithmetic, written with the standard library only (no scipy).

- The Gaussian mechanism with L2 sensitivity `Delta` and noise `sigma` is exactly mu-GDP with
  mu = Delta / sigma (Dong, Roth & Su), and mu-GDP implies (eps, delta(eps)) for every eps with
  delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
- `classical_sigma` is the textbook calibration sigma = Delta sqrt(2 ln(1.25/delta)) / eps (proved for eps < 1);
  `analytic_sigma` is the smallest sigma with delta(eps) <= delta (Balle & Wang 2018), valid for every eps.
- `clopper_pearson_upper` is the exact one-sided binomial upper confidence bound.
"""
from __future__ import annotations

import math
from statistics import NormalDist

_N = NormalDist()


def norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def norm_ppf(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return _N.inv_cdf(p)


def _log_norm_cdf(x: float) -> float:
    """log Phi(x), stable in the far left tail (where erfc underflows)."""
    if x > -30.0:
        return math.log(max(norm_cdf(x), 1e-320))
    # Mills-ratio asymptotic: Phi(x) ~ phi(x)/|x| * (1 - 1/x^2 + 3/x^4)
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2 * math.pi) + math.log1p(-1.0 / (x * x) + 3.0 / x ** 4)


def gdp_delta(eps: float, mu: float) -> float:
    """delta(eps) of a mu-GDP mechanism (0 when mu == 0)."""
    if mu <= 0.0:
        return 0.0
    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    first = norm_cdf(a)
    second = math.exp(eps + _log_norm_cdf(b)) if eps + _log_norm_cdf(b) < 700 else math.inf
    return max(0.0, first - second)


def gdp_epsilon(delta: float, mu: float, eps_max: float = 200.0) -> float:
    """The eps at which a mu-GDP mechanism reaches `delta` (0 if it already satisfies (0, delta))."""
    if not 0.0 < delta < 1.0:
        raise ValueError("delta must be in (0, 1)")
    if mu <= 0.0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2.0
        if hi > eps_max:
            return eps_max
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gdp_delta(mid, mu) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return hi


def classical_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gdp_mu_for(epsilon: float, delta: float) -> float:
    """Largest mu such that mu-GDP implies (epsilon, delta)-DP."""
    lo, hi = 0.0, 1.0
    while gdp_delta(epsilon, hi) <= delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gdp_delta(epsilon, mid) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * hi:
            break
    return lo


def analytic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    return sensitivity / gdp_mu_for(epsilon, delta)


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    logs = [_log_binom_pmf(i, n, p) for i in range(k + 1)]
    m = max(logs)
    if m == -math.inf:
        return 0.0
    return min(1.0, math.exp(m) * sum(math.exp(v - m) for v in logs))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) upper confidence bound on p from k successes in n trials:
    the p with P(Binomial(n, p) <= k) = alpha (1 when k == n)."""
    if n <= 0:
        raise ValueError("n must be positive")
    if not 0 <= k <= n:
        raise ValueError("k must be in [0, n]")
    if k == n:
        return 1.0
    if k == 0:
        return 1.0 - alpha ** (1.0 / n)
    lo, hi = k / n, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if binom_cdf(k, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def clopper_pearson_upper_table(n: int, alpha: float, ks=None):
    """clopper_pearson_upper(k, n, alpha) for every k in `ks` (default 0..n) at once, as a float64 torch
    tensor: a vectorised bisection on P(Binomial(n, p_k) <= k) = alpha."""
    import torch

    if n <= 0:
        raise ValueError("n must be positive")
    k = (torch.arange(n + 1, dtype=torch.float64) if ks is None
         else torch.as_tensor(ks, dtype=torch.float64).reshape(-1))
    i = torch.arange(n + 1, dtype=torch.float64)
    log_choose = (math.lgamma(n + 1) - torch.lgamma(i + 1) - torch.lgamma(n - i + 1))  # [n+1] over i
    mask = i[None, :] <= k[:, None]                                                    # [k, i]
    lo = k / n
    hi = torch.ones(k.numel(), dtype=torch.float64)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        p = mid.clamp(1e-300, 1 - 1e-16)[:, None]
        logpmf = log_choose[None, :] + i[None, :] * torch.log(p) + (n - i[None, :]) * torch.log1p(-p)
        cdf = torch.logsumexp(torch.where(mask, logpmf, torch.tensor(-math.inf, dtype=torch.float64)), dim=1).exp()
        above = cdf > alpha
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    out = hi.clone()
    out[k == 0] = 1.0 - alpha ** (1.0 / n)
    out[k == n] = 1.0
    return out
