"""Suggesting a batch: GameOpt and the baselines behind one ask interface, and the oracle loop that benchmarks and
the quality tests run them in.

GameOpt (`GameOpt.fit` + `GameOpt.play` + `GameOpt.select`, split so the suggestion job can checkpoint after each
game), as the paper's code runs it (melisilaydabal/gameopt, main.py): fit the GP on the successful observations;
play `games` games (3 by default, the code's nb_games; the first from the best observed sequence, the others from
random feasible starts) with the chosen solver (Hedge: 400 rounds, eta 0.5, the last 10 rounds' plays as candidate
equilibria); pool the games' candidates, drop sequences already observed, and pick the batch from them by the
acquisition (the code keeps its top nb_sample by UCB; here greedily with hallucinated observations, GP-BUCB, see
`bucb_select`, so a batch of 10 is not ten near-copies). If the games yield too few new candidates, their feasible
single-site neighbours join the pool, then random feasible sequences fill the rest.

Failures: an observation may be NaN, a measurement that failed (an infeasible sequence). It is kept as such: the GP
is fitted on the others (no made-up value), and once anything has failed a feasibility model learns from all of them
(feasibility.py) and the acquisition becomes UCB weighted by P(feasible) (`Acquisition`), in the games and in the
batch alike. Declared constraints are never left to it: every suggestion satisfies `SequenceSpace.feasible`.

Baselines (same space, same constraints, same surrogate where they use one; they see a failure as the value 0):
- "gp_ucb_br": the plain GP-UCB loop, one point per fit (run_loop evaluates it before the next is chosen): iterated
  best response on UCB from the best observed sequence (each site's best letter in turn), the best unmeasured
  neighbour if that equilibrium is measured already;
- "gp_ucb_br_batch": the same step for a batch under one fit, one start per point (the best observed sequences);
- "random": uniform over the feasible set (each draw projected by repair);
- "mutation": random single/double-site mutations of the best observed sequence;
- "ga": a genetic algorithm (tournament selection from the observed population, uniform crossover, per-site
  mutation 1/L, repair);
- "gp_ucb_pool": the GP's UCB maximised over a random pool of feasible sequences;
- "local_search": BoTorch's optimize_acqf_discrete_local_search on the same GP's UpperConfidenceBound (BoTorch's
  UCB takes beta as the variance weight, so beta**2 is passed to get mu + beta sigma; the batch version
  qUpperConfidenceBound, which the q > 1 local search needs for its pending points); its answers are then repaired
  onto the campaign's constraints (BoTorch knows only each site's allowed letters).
Trust region (`GameOptConfig.trust_radius`, `suggest_baseline(trust_radius=)`, `run_loop(trust_radius=)`; the API's
StartSuggestionJob `trust_radius`; off by default): GameOpt and the surrogate-based baselines search only within that
many substitutions of the best observed sequence (the latest of equally good ones; see `trust_region`), GameOpt's
games inside it (games.py); the benchmark harness turns it on because its Ehrlich functions' feasible set is unknown
to the optimizers, as in holo-bench.
Direction: observations are negated for minimisation before any of this, so every method maximises."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from services.design.gameopt.games import GameResult, Players, best_response, deviation_feasible, hedge
from services.design.gameopt.feasibility import FeasibilityModel
from services.design.gameopt.gp import Surrogate
from services.design.gameopt.space import SequenceSpace

SOLVERS = ("hedge", "best_response")
METHODS = ("gameopt_hedge", "gameopt_best_response", "gp_ucb_br", "gp_ucb_br_batch", "random", "mutation", "ga",
           "gp_ucb_pool", "local_search")
SEQUENTIAL = ("gp_ucb_br",)  # one point per fit: run_loop evaluates each before the next is chosen


@dataclass
class Suggestion:
    sequence: np.ndarray
    ucb: float | None = None
    mean: float | None = None
    std: float | None = None
    source: str = ""


@dataclass
class GameOptConfig:
    solver: str = "hedge"
    beta: float = 2.0
    rounds: int = 400
    eta: float = 0.5
    tail: int = 10  # Hedge: the last rounds whose plays are candidates (the official last_nb_rounds = 11)
    games: int = 0  # 0: DEFAULT_GAMES (the official nb_games)
    group_size: int = 1
    kernel: str = "onehot"
    noise_std: float | None = None
    min_observations: int = 2
    trust_radius: int | None = None  # see trust_region; None: the whole campaign space
    payoff_scale: float = 10.0  # Hedge's payoff is UCB / payoff_scale (the official (UCB + 5) / 10)
    learn_feasibility: bool = True  # once an observation has failed, weigh UCB by P(feasible) (feasibility.py)
    neighbours: bool = False  # pool the candidates' single-site neighbours always, not only when too few are new
    hallucinate: bool = False  # each game plays against the GP conditioned on the earlier games' candidates


DEFAULT_GAMES = 3


def trust_region(space: SequenceSpace, X: np.ndarray, y: np.ndarray, radius: int | None) -> SequenceSpace:
    """The campaign space cut down to sequences within `radius` substitutions of the best observed one (a Hamming
    trust region, as CASMOPOLITAN's for categorical BO). Why: when the feasible set is unknown to the optimizer (an
    Ehrlich function's banned transitions, as holo-bench poses it: the optimizer sees only the values, 0 for an
    infeasible sequence) a UCB maximum far from the data is almost always infeasible, while a few edits of a feasible
    sequence usually stay feasible. It reuses the campaign's own edit-distance constraint, so the games, the fills and
    `repair` honour it unchanged; a campaign that already bounds the edits from its parents keeps its own bound (one
    centre only). Simplification: a fixed radius, not CASMOPOLITAN's success/failure-driven resizing."""
    if radius is not None and radius < 1:
        raise ValueError("trust_radius must be >= 1")
    if radius is None or not len(y) or (space.max_edits is not None and len(space.parent_array)):
        return space
    X = np.atleast_2d(np.asarray(X, dtype=np.int64))
    ok = np.flatnonzero(space.feasible(X))
    if not len(ok):
        return space
    best = X[ok[last_argmax(np.asarray(y)[ok])]]
    return replace(space, parents=(space.decode(best),), max_edits=int(radius))


def last_argmax(y: np.ndarray) -> int:
    """The index of the latest of the best values: on a plateau (Ehrlich values are quantised, so many sequences
    tie) the trust region follows the newest equally good sequence, a neutral move, instead of staying on the
    first one found."""
    y = np.asarray(y, dtype=np.float64)
    return int(np.flatnonzero(y == y.max())[-1])


def _dedupe_rows(X: np.ndarray) -> np.ndarray:
    seen: dict[bytes, np.ndarray] = {}
    for x in X:
        seen.setdefault(x.tobytes(), x)
    return np.array(list(seen.values()), dtype=np.int64).reshape(-1, X.shape[-1] if X.ndim == 2 else 0)


def _fill_random(space: SequenceSpace, rng: np.random.Generator, n: int, exclude: set[bytes], source: str
                 ) -> list[Suggestion]:
    out: list[Suggestion] = []
    if n <= 0:
        return out
    for x in space.sample_feasible(rng, 2 * n + len(exclude)):
        if x.tobytes() not in exclude:
            exclude.add(x.tobytes())
            out.append(Suggestion(x, source=source))
            if len(out) >= n:
                break
    return out


class Acquisition:
    """The games' shared payoff and the batch's ranking: UCB = mu + beta sigma of the GP (standardised units), and,
    when a feasibility model is given, c + max(UCB - c, 0) * P(feasible), c the lowest standardised value observed
    (a sequence that will likely fail is worth about the worst measured one). `single_site(x)` scores every
    single-site change of x at once (None when the GP has no fast path)."""

    def __init__(self, surrogate: Surrogate, beta: float, feasibility: FeasibilityModel | None = None,
                 floor: float = 0.0) -> None:
        self.surrogate, self.beta, self.feasibility, self.floor = surrogate, beta, feasibility, floor
        self.single_site = self._single_site if surrogate.fast is not None else None

    def combine(self, mu: np.ndarray, sd: np.ndarray, log_pof: np.ndarray | None) -> np.ndarray:
        u = mu + self.beta * sd
        if log_pof is None:
            return u
        return self.floor + np.maximum(u - self.floor, 0.0) * np.exp(log_pof)

    def log_pof(self, X: np.ndarray) -> np.ndarray | None:
        return None if self.feasibility is None else self.feasibility.log_prob(X)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(X)
        mu, sd = self.surrogate.mean_std(X)
        return self.combine(mu, sd, self.log_pof(X))

    def _single_site(self, x: np.ndarray) -> np.ndarray:
        mu, sd = self.surrogate.single_site(x)
        return self.combine(mu, sd, None if self.feasibility is None else self.feasibility.single_site(x))


@dataclass
class GameOpt:
    """`y` may hold NaN: a failed (infeasible) observation. It is kept as such: the GP is fitted on the others, and
    the feasibility model (once anything has failed) learns from all of them."""

    space: SequenceSpace
    X: np.ndarray  # observed, integer-coded (n, L)
    y: np.ndarray  # observed values, to maximise; NaN = the measurement failed (infeasible)
    batch_size: int
    config: GameOptConfig = field(default_factory=GameOptConfig)
    seed: int = 0
    surrogate: Surrogate | None = None

    def __post_init__(self) -> None:
        if self.config.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}")
        self.X = np.atleast_2d(np.asarray(self.X, dtype=np.int64)).reshape(-1, self.space.length)
        self.y = np.asarray(self.y, dtype=np.float64).reshape(-1)
        self.ok = np.isfinite(self.y)
        self.players = Players.of(self.space, self.config.group_size)
        self.acquisition: Acquisition | None = None
        if not self.cold:
            self.space = trust_region(self.space, self.X[self.ok], self.y[self.ok], self.config.trust_radius)

    @property
    def cold(self) -> bool:
        """Too few successful observations (or no spread) for a GP: the batch is random feasible sequences."""
        y = self.y[self.ok]
        return len(y) < self.config.min_observations or float(np.ptp(y)) <= 0.0

    @property
    def n_games(self) -> int:
        return self.config.games or DEFAULT_GAMES

    def fit(self) -> None:
        if self.cold:
            return
        Xo, yo = self.X[self.ok], self.y[self.ok]
        if self.surrogate is None:
            self.surrogate = Surrogate(Xo, yo, self.space.size, kernel=self.config.kernel,
                                       noise_std=self.config.noise_std, seed=self.seed)
        feas = None
        if self.config.learn_feasibility and not self.ok.all():
            feas = FeasibilityModel(self.X, self.ok, self.space.size)
        floor = float((yo.min() - self.surrogate.y_mean) / self.surrogate.y_std)
        self.acquisition = Acquisition(self.surrogate, self.config.beta, feas, floor)

    def payoff(self, X: np.ndarray) -> np.ndarray:
        if self.acquisition is None:
            self.fit()
        return self.acquisition(X)

    def start(self, game: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, game, 1])
        if game == 0 and self.ok.any():
            feas = self.space.feasible(self.X) & self.ok
            if feas.any():
                idx = np.flatnonzero(feas)
                return self.X[idx[last_argmax(self.y[idx])]].copy()
        starts = self.space.sample_feasible(rng, 1)
        if not len(starts):
            raise ValueError("constraints: no feasible start found")
        return starts[0]

    def play(self, game: int, previous: list[np.ndarray] | None = None) -> GameResult:
        """Game `game`; with `hallucinate`, against the GP conditioned also on the earlier games' candidates
        (`previous`) at their mean, so that it looks elsewhere (the batch's diversity starts in the games)."""
        if self.acquisition is None:
            self.fit()
        acq = self.acquisition
        if self.config.hallucinate and previous and any(len(p) for p in previous):
            P = _dedupe_rows(np.concatenate([p for p in previous if len(p)]))
            acq = Acquisition(acq.surrogate.hallucinated(P), acq.beta, acq.feasibility, acq.floor)
        rng = np.random.default_rng([self.seed, game, 2])
        x0 = self.start(game)
        # the games multiply small matrices (L*A x n): a multi-threaded BLAS only contends for the cores (3-4x slower
        # per round on a loaded 2-core machine, measured), so one thread
        with threadpool_limits(limits=1, user_api="blas"):
            if self.config.solver == "best_response":
                return best_response(acq, self.space, x0, self.players)
            return hedge(acq, self.space, x0, self.players, rounds=self.config.rounds,
                         eta=self.config.eta, tail=self.config.tail, rng=rng, scale=self.config.payoff_scale)

    def select(self, pools: list[np.ndarray]) -> list[Suggestion]:
        """The batch: from the games' candidates (new, feasible), greedily the best by the acquisition, each pick
        then hallucinated as observed at its mean so that the next picks' sigma shrinks near it (GP-BUCB,
        Desautels et al. 2014): a batch that spreads instead of ten near-copies of one equilibrium."""
        rng = np.random.default_rng([self.seed, 999])
        observed = {x.tobytes() for x in self.X}
        if self.cold:
            out = []
            seen = set(observed)
            for p in self.space.parent_array:
                if self.space.feasible(p)[0] and p.tobytes() not in seen and len(out) < self.batch_size:
                    seen.add(p.tobytes())
                    out.append(Suggestion(p.copy(), source="parent"))
            return out + _fill_random(self.space, rng, self.batch_size - len(out), seen, "random")
        if self.acquisition is None:
            self.fit()

        def new_feasible(C: np.ndarray) -> np.ndarray:
            C = C[self.space.feasible(C)] if len(C) else C
            return np.array([x for x in C if x.tobytes() not in observed], dtype=np.int64).reshape(-1, self.space.length)

        E = _dedupe_rows(np.concatenate([p for p in pools if len(p)] or [np.zeros((0, self.space.length), int)]))
        C = new_feasible(E)
        # the feasible single-player neighbours of every candidate equilibrium join the pool (always with
        # `neighbours`; else only when the games yield too few new ones, as they often end on measured points),
        # ranked by the acquisition with the rest, before falling back to random
        if (self.config.neighbours or len(C) < self.batch_size) and len(E):
            extra = []
            for x in E:
                D, _ = self.players.deviations(x)
                extra.append(D[deviation_feasible(self.space, self.players, x, D)])
            C = new_feasible(_dedupe_rows(np.concatenate([E, *extra])))
        out: list[Suggestion] = []
        if len(C):
            out = bucb_select(self.acquisition, C, self.batch_size, source=self.config.solver)
        seen = observed | {s.sequence.tobytes() for s in out}
        return out + _fill_random(self.space, rng, self.batch_size - len(out), seen, "random")

    def suggest(self) -> list[Suggestion]:
        self.fit()
        pools: list[np.ndarray] = []
        if not self.cold:
            for g in range(self.n_games):
                pools.append(self.play(g, pools).candidates)
        return self.select(pools)


def bucb_select(acq: Acquisition, C: np.ndarray, k: int, source: str = "", max_pool: int = 2000
                ) -> list[Suggestion]:
    """Greedy batch of k rows of C by the acquisition with hallucinated observations (GP-BUCB): after each pick,
    the posterior variance of the rest is that of the GP conditioned on the pick too (the mean does not move under
    a hallucinated observation at the mean)."""
    sur = acq.surrogate
    mu, sd = sur.mean_std(C)
    lp = acq.log_pof(C)
    if len(C) > max_pool:
        keep = np.argsort(-acq.combine(mu, sd, lp), kind="stable")[:max_pool]
        C, mu, sd = C[keep], mu[keep], sd[keep]
        lp = None if lp is None else lp[keep]
    column, noise = sur.cov_columns(C)
    var = sd ** 2
    taken = np.zeros(len(C), dtype=bool)
    us: list[np.ndarray] = []
    out: list[Suggestion] = []
    for _ in range(min(k, len(C))):
        a = acq.combine(mu, np.sqrt(np.clip(var, 1e-12, None)), lp)
        a[taken] = -np.inf
        j = int(np.argmax(a))
        taken[j] = True
        out.append(Suggestion(C[j], ucb=float(mu[j] + acq.beta * sd[j]), mean=float(sur.to_original(mu[j])),
                              std=float(sd[j] * sur.y_std), source=source))
        c = column(j) - sum(u * u[j] for u in us) if us else column(j)
        u = c / np.sqrt(max(var[j], 1e-12) + noise)
        var = var - u ** 2
        us.append(u)
    return out


# ------------------------------------------------------------------------------------------------ baselines
def _best(X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    return X[int(np.argmax(y))] if len(y) else None


def _unseen(space: SequenceSpace, cands, observed: set[bytes], n: int, rng) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    if n <= 0:
        return out
    for x in cands:
        if x is None:
            continue
        if not space.feasible(x)[0]:
            x = space.repair(x, rng)
            if x is None:
                continue
        if x.tobytes() not in observed:
            observed.add(x.tobytes())
            out.append(x)
        if len(out) >= n:
            break
    return out


def suggest_baseline(method: str, space: SequenceSpace, X: np.ndarray, y: np.ndarray, n: int, seed: int,
                     beta: float = 2.0, pool_size: int = 2000, trust_radius: int | None = None) -> list[np.ndarray]:
    """`trust_radius` (see trust_region) applies to the surrogate-based baselines, as to GameOpt; random search,
    mutation and the GA keep their own proposal distributions."""
    rng = np.random.default_rng([seed, 7])
    X = np.atleast_2d(np.asarray(X, dtype=np.int64)).reshape(-1, space.length)
    y = np.asarray(y, dtype=np.float64)
    if method in SURROGATE_BASELINES and len(y) >= 2 and float(np.ptp(y)) > 0:
        space = trust_region(space, X, y, trust_radius)
    observed = {x.tobytes() for x in X}
    out: list[np.ndarray] = []
    if method == "random" or len(y) < 2:
        out = _unseen(space, space.sample_feasible(rng, 3 * n), observed, n, rng)
    elif method == "mutation":
        best = _best(X, y)
        out = _unseen(space, space.sample_feasible(rng, 3 * n, around=best, mutations=2), observed, n, rng)
    elif method == "ga":
        out = _unseen(space, _ga_children(space, X, y, 3 * n, rng), observed, n, rng)
    elif method in SURROGATE_BASELINES and float(np.ptp(y)) > 0:
        sur = Surrogate(X, y, space.size, seed=seed)
        if method in ("gp_ucb_br", "gp_ucb_br_batch"):
            out = _ucb_best_response(sur, space, X, y, n, beta, observed)
        elif method == "gp_ucb_pool":
            pool = space.sample_feasible(rng, pool_size)
            order = np.argsort(-sur.ucb(pool, beta))
            out = _unseen(space, pool[order], observed, n, rng)
        else:
            out = _unseen(space, _local_search(sur, space, X, n, beta, seed), observed, n, rng)
    if len(out) < n:
        out += _unseen(space, space.sample_feasible(rng, 3 * (n - len(out))), observed, n - len(out), rng)
    return out[:n]


SURROGATE_BASELINES = ("gp_ucb_pool", "local_search", "gp_ucb_br", "gp_ucb_br_batch")


def _ucb_best_response(sur: Surrogate, space: SequenceSpace, X: np.ndarray, y: np.ndarray, n: int, beta: float,
                       observed: set[bytes]) -> list[np.ndarray]:
    """The plain GP-UCB loop's step (the issue's baseline): from the best observed sequence (and, for a batch, the
    next best observed ones, one start per point), each site's best letter in turn (iterated best response on
    mu + beta sigma, the same game as GameOpt's best response, with no feasibility model and no batch
    diversification); an equilibrium already measured gives way to its best unmeasured single-site neighbour."""
    acq = Acquisition(sur, beta)
    players = Players.of(space)
    feas = space.feasible(X)
    order = [i for i in np.lexsort((-np.arange(len(y)), -y)) if feas[i]]  # best first, the latest among ties
    out: list[np.ndarray] = []
    for i in order[:n]:
        x = best_response(acq, space, X[i], players).equilibrium
        if x.tobytes() in observed:
            D, _ = players.deviations(x)
            D = D[deviation_feasible(space, players, x, D)]
            D = np.array([d for d in D if d.tobytes() not in observed], dtype=np.int64).reshape(-1, space.length)
            if not len(D):
                continue
            x = D[int(np.argmax(acq(D)))]
        observed.add(x.tobytes())
        out.append(x)
    return out


def _ga_children(space: SequenceSpace, X: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator,
                 population: int = 32, tournament: int = 3) -> np.ndarray:
    order = np.argsort(-y)[:population]
    P, f = X[order], y[order]
    children = []
    for _ in range(n):
        parents = []
        for _ in range(2):
            idx = rng.choice(len(P), size=min(tournament, len(P)), replace=False)
            parents.append(P[idx[int(np.argmax(f[idx]))]])
        take = rng.random(space.length) < 0.5
        child = np.where(take, parents[0], parents[1])
        for i in np.flatnonzero(rng.random(space.length) < 1.0 / space.length):
            child[i] = rng.choice(np.flatnonzero(space.mask[i]))
        children.append(child)
    return np.array(children, dtype=np.int64)


def _local_search(sur: Surrogate, space: SequenceSpace, X: np.ndarray, n: int, beta: float, seed: int
                  ) -> np.ndarray:
    from botorch.acquisition import qUpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete_local_search

    acq = qUpperConfidenceBound(sur.model, beta=beta ** 2)
    choices = [torch.as_tensor(np.flatnonzero(space.mask[i]), dtype=torch.float64) for i in range(space.length)]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        cand, _ = optimize_acqf_discrete_local_search(
            acq, discrete_choices=choices, q=n, num_restarts=4, raw_samples=256,
            X_avoid=torch.as_tensor(X, dtype=torch.float64))
    return cand.round().long().numpy()


# ------------------------------------------------------------------------------------------------ the loop
@dataclass
class Trace:
    method: str
    values: list[float]  # every evaluation, in order
    batch_seconds: list[float]
    # of the suggested (not initial) sequences, which the oracle counts feasible (oracles with a feasible set only)
    suggested_feasible: list[bool] = field(default_factory=list)

    def best_after(self, n: int) -> float:
        return float(np.max(self.values[:n])) if self.values else float("nan")


def run_loop(oracle, method: str, budget: int, batch_size: int, seed: int, n_init: int = 10,
             config: GameOptConfig | None = None, trust_radius: int | None = None) -> Trace:
    """Evaluate `budget` sequences of the oracle: n_init initial ones, then batches from `method`. The initial ones
    come from the oracle's own feasible set where it has one (Ehrlich: DMP samples, as holo-bench starts its
    optimisers; uniform sequences of length 32 are almost all infeasible, value 0), else uniformly at random. Every
    method gets the same initial sequences for a seed. The oracle's feasible set is not given to the methods (as in
    holo-bench, whose optimizers get the vocabulary only and see infeasible sequences score -inf; here 0);
    `trust_radius` (see trust_region), when set, bounds GameOpt and the surrogate-based baselines alike."""
    space = SequenceSpace(oracle.alphabet, oracle.length)
    rng = np.random.default_rng([seed, 3])
    n0 = min(n_init, budget)
    X = oracle.initial_solution(n0, rng) if hasattr(oracle, "initial_solution") else space.sample_feasible(rng, n0)
    y = oracle(X)
    # what GameOpt sees: a failed (infeasible) evaluation as NaN, kept as such (holo-bench reports it as -inf); the
    # baselines see the plain value (0), as before
    failed = ~oracle.feasible(X) if hasattr(oracle, "feasible") else np.zeros(len(X), dtype=bool)
    times: list[float] = []
    feasible: list[bool] = []
    r = 0
    while len(y) < budget:
        n = min(batch_size, budget - len(y))
        t0 = time.perf_counter()
        inner = [1] * n if method in SEQUENTIAL else [n]
        B = np.zeros((0, space.length), dtype=np.int64)
        for m in inner:
            if method.startswith("gameopt_"):
                cfg = config or GameOptConfig()
                cfg = GameOptConfig(**{**cfg.__dict__, "solver": method.removeprefix("gameopt_"),
                                       "trust_radius": trust_radius if trust_radius is not None else cfg.trust_radius})
                seen = np.where(failed, np.nan, y)
                batch = [s.sequence for s in GameOpt(space, X, seen, m, cfg, seed=seed * 1000 + r).suggest()]
            else:
                batch = suggest_baseline(method, space, X, y, m, seed * 1000 + r, trust_radius=trust_radius)
            b = np.array(batch, dtype=np.int64).reshape(-1, space.length)
            if not len(b):
                break
            X = np.concatenate([X, b])
            y = np.concatenate([y, oracle(b)])
            failed = np.concatenate([failed, ~oracle.feasible(b) if hasattr(oracle, "feasible")
                                     else np.zeros(len(b), dtype=bool)])
            B = np.concatenate([B, b])
            r += 1
        times.append(time.perf_counter() - t0)
        if not len(B):
            break
        if hasattr(oracle, "feasible"):
            feasible += [bool(v) for v in oracle.feasible(B)]
    return Trace(method, [float(v) for v in y], times, feasible)
