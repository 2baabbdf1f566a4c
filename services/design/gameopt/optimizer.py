"""Suggesting a batch: GameOpt and the baselines behind one ask interface, and the oracle loop that benchmarks and
the quality test run them in.

GameOpt (`GameOpt.plan` + `GameOpt.play` + `GameOpt.select`, split so the suggestion job can checkpoint after each
game): fit the GP on the observations; play several games (the first from the best observed sequence, the others
from random feasible starts) with the chosen solver; pool the games' candidate equilibria, drop sequences already
observed, and return the top `batch_size` distinct feasible ones by UCB. If the games yield too few new ones, the rest of the
batch is filled with the best-UCB single-site neighbours of the equilibria, then with random feasible sequences.

Baselines (same space, same constraints, same surrogate where they use one):
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
StartSuggestionJob `trust_radius`; off by default): GameOpt and the surrogate-based baselines search only within that many substitutions of the best observed
sequence (see `trust_region`); the benchmark harness turns it on because its Ehrlich functions' feasible set is
unknown to the optimizers, as in holo-bench.
Direction: observations are negated for minimisation before any of this, so every method maximises."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from services.design.gameopt.games import GameResult, Players, best_response, deviation_feasible, hedge
from services.design.gameopt.gp import Surrogate
from services.design.gameopt.space import SequenceSpace

SOLVERS = ("hedge", "best_response")
METHODS = ("gameopt_hedge", "gameopt_best_response", "random", "mutation", "ga", "gp_ucb_pool", "local_search")


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
    tail: int = 50
    games: int = 0  # 0: one game per suggestion
    group_size: int = 1
    kernel: str = "onehot"
    noise_std: float | None = None
    min_observations: int = 2
    trust_radius: int | None = None  # see trust_region; None: the whole campaign space


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
    best = X[ok[int(np.argmax(np.asarray(y)[ok]))]]
    return replace(space, parents=(space.decode(best),), max_edits=int(radius))


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


@dataclass
class GameOpt:
    space: SequenceSpace
    X: np.ndarray  # observed, integer-coded (n, L)
    y: np.ndarray  # observed values, to maximise
    batch_size: int
    config: GameOptConfig = field(default_factory=GameOptConfig)
    seed: int = 0
    surrogate: Surrogate | None = None

    def __post_init__(self) -> None:
        if self.config.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}")
        self.X = np.atleast_2d(np.asarray(self.X, dtype=np.int64)).reshape(-1, self.space.length)
        self.y = np.asarray(self.y, dtype=np.float64).reshape(-1)
        self.players = Players.of(self.space, self.config.group_size)
        if not self.cold:
            self.space = trust_region(self.space, self.X, self.y, self.config.trust_radius)

    @property
    def cold(self) -> bool:
        """Too few observations (or no spread) for a GP: the batch is random feasible sequences."""
        return len(self.y) < self.config.min_observations or float(np.ptp(self.y)) <= 0.0

    @property
    def n_games(self) -> int:
        return self.config.games or max(self.batch_size, 1)

    def fit(self) -> None:
        if not self.cold:
            self.surrogate = Surrogate(self.X, self.y, self.space.size, kernel=self.config.kernel,
                                       noise_std=self.config.noise_std, seed=self.seed)

    def payoff(self, X: np.ndarray) -> np.ndarray:
        return self.surrogate.ucb(X, self.config.beta)

    def start(self, game: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, game, 1])
        if game == 0 and len(self.y):
            feas = self.space.feasible(self.X)
            if feas.any():
                idx = np.flatnonzero(feas)
                return self.X[idx[int(np.argmax(self.y[idx]))]].copy()
        starts = self.space.sample_feasible(rng, 1)
        if not len(starts):
            raise ValueError("constraints: no feasible start found")
        return starts[0]

    def play(self, game: int) -> GameResult:
        rng = np.random.default_rng([self.seed, game, 2])
        x0 = self.start(game)
        if self.config.solver == "best_response":
            return best_response(self.payoff, self.space, x0, self.players)
        return hedge(self.payoff, self.space, x0, self.players, rounds=self.config.rounds, eta=self.config.eta,
                     tail=self.config.tail, rng=rng)

    def select(self, pools: list[np.ndarray]) -> list[Suggestion]:
        """Top batch_size distinct feasible, unobserved candidates by UCB."""
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
        def new_feasible(C: np.ndarray) -> np.ndarray:
            C = C[self.space.feasible(C)] if len(C) else C
            return np.array([x for x in C if x.tobytes() not in observed], dtype=np.int64).reshape(-1, self.space.length)

        E = _dedupe_rows(np.concatenate([p for p in pools if len(p)] or [np.zeros((0, self.space.length), int)]))
        C = new_feasible(E)
        # too few new equilibria (games often end on points already measured): add the feasible single-player
        # neighbours of every equilibrium, ranked by UCB with the rest, before falling back to random sequences
        if len(C) < self.batch_size and len(E):
            extra = []
            for x in E:
                D, _ = self.players.deviations(x)
                extra.append(D[deviation_feasible(self.space, self.players, x, D)])
            C = new_feasible(_dedupe_rows(np.concatenate([E, *extra])))
        out: list[Suggestion] = []
        if len(C):
            mu, sd = self.surrogate.mean_std(C)
            u = mu + self.config.beta * sd
            for j in np.argsort(-u, kind="stable")[: self.batch_size]:
                out.append(Suggestion(C[j], ucb=float(u[j]), mean=float(self.surrogate.to_original(mu[j])),
                                      std=float(sd[j] * self.surrogate.y_std), source=self.config.solver))
        seen = observed | {s.sequence.tobytes() for s in out}
        return out + _fill_random(self.space, rng, self.batch_size - len(out), seen, "random")

    def suggest(self) -> list[Suggestion]:
        self.fit()
        pools = [] if self.cold else [self.play(g).candidates for g in range(self.n_games)]
        return self.select(pools)


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
    if method in ("gp_ucb_pool", "local_search") and len(y) >= 2 and float(np.ptp(y)) > 0:
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
    elif method in ("gp_ucb_pool", "local_search") and float(np.ptp(y)) > 0:
        sur = Surrogate(X, y, space.size, seed=seed)
        if method == "gp_ucb_pool":
            pool = space.sample_feasible(rng, pool_size)
            order = np.argsort(-sur.ucb(pool, beta))
            out = _unseen(space, pool[order], observed, n, rng)
        else:
            out = _unseen(space, _local_search(sur, space, X, n, beta, seed), observed, n, rng)
    if len(out) < n:
        out += _unseen(space, space.sample_feasible(rng, 3 * (n - len(out))), observed, n - len(out), rng)
    return out[:n]


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
    times: list[float] = []
    feasible: list[bool] = []
    r = 0
    while len(y) < budget:
        n = min(batch_size, budget - len(y))
        t0 = time.perf_counter()
        if method.startswith("gameopt_"):
            cfg = config or GameOptConfig()
            cfg = GameOptConfig(**{**cfg.__dict__, "solver": method.removeprefix("gameopt_"),
                                   "trust_radius": trust_radius if trust_radius is not None else cfg.trust_radius})
            batch = [s.sequence for s in GameOpt(space, X, y, n, cfg, seed=seed * 1000 + r).suggest()]
        else:
            batch = suggest_baseline(method, space, X, y, n, seed * 1000 + r, trust_radius=trust_radius)
        times.append(time.perf_counter() - t0)
        B = np.array(batch, dtype=np.int64).reshape(-1, space.length)
        if not len(B):
            break
        X = np.concatenate([X, B])
        y = np.concatenate([y, oracle(B)])
        if hasattr(oracle, "feasible"):
            feasible += [bool(v) for v in oracle.feasible(B)]
        r += 1
    return Trace(method, [float(v) for v in y], times, feasible)
