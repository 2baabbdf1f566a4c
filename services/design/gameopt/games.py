"""GameOpt's games (Bal et al., "Optimistic Games for Combinatorial Bayesian Optimization with Application to Protein
Design"): players are sites (or groups of sites), a player's strategies are the letters (the joint letters of its
group), and all players share one payoff, the UCB of the GP surrogate. Two equilibrium solvers:

- `best_response`: iterated best response. From a feasible start, move to the best single-player change (over all
  players and their feasible strategies) while it raises the payoff; it stops at a pure Nash equilibrium: no player
  can raise UCB by changing its own letters (for single-site players: no single-site change raises UCB).
- `hedge`: every player runs Hedge (multiplicative weights) on its strategies. Each round each player samples a
  strategy from its weights; the joint sample is projected onto the feasible set (`SequenceSpace.repair`); for every
  player and every alternative strategy the payoff with only that player changed is scored, and the player's weights
  are multiplied by exp(eta * payoff). The empirical distribution of joint samples approaches a coarse correlated
  equilibrium; the distinct joint samples of the last rounds (and the weights' mode) are the game's candidates.
  The measured regret (the best fixed deviation's average payoff minus the realised average, maximised over
  players) is returned per round.

Constraints: a deviation that would make the sequence infeasible is not a move (best response never takes it; in
Hedge it earns the round's lowest feasible payoff, so its weight falls without being erased for good).
`payoff(X) -> (n,)` scores integer-coded sequences (the surrogate's UCB)."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from services.design.gameopt.space import SequenceSpace

Payoff = Callable[[np.ndarray], np.ndarray]
MAX_STRATEGIES = 4096


@dataclass(frozen=True)
class Players:
    """Players as groups of sites, each with its table of joint strategies (allowed letters per site, product)."""

    groups: tuple[tuple[int, ...], ...]
    strategies: tuple[np.ndarray, ...]  # per player: (S_p, len(group)) letters

    @staticmethod
    def of(space: SequenceSpace, group_size: int = 1) -> "Players":
        if group_size < 1:
            raise ValueError("group_size must be >= 1")
        groups = tuple(tuple(range(i, min(i + group_size, space.length)))
                       for i in range(0, space.length, group_size))
        strategies = []
        for g in groups:
            letters = [np.flatnonzero(space.mask[i]) for i in g]
            count = int(np.prod([len(x) for x in letters]))
            if count > MAX_STRATEGIES:
                raise ValueError(f"a group of {len(g)} sites has {count} joint strategies (at most {MAX_STRATEGIES})")
            strategies.append(np.array(list(itertools.product(*letters)), dtype=np.int64).reshape(count, len(g)))
        return Players(groups, tuple(strategies))

    def deviations(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All single-player changes of x: (sum_p S_p, L) sequences and (sum_p S_p,) the player of each row."""
        rows, owner = [], []
        for p, (g, S) in enumerate(zip(self.groups, self.strategies, strict=False)):
            X = np.repeat(x[None], len(S), 0)
            X[:, list(g)] = S
            rows.append(X)
            owner.append(np.full(len(S), p))
        return np.concatenate(rows), np.concatenate(owner)


def deviation_feasible(space: SequenceSpace, players: Players, x: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Which deviations of a feasible x are feasible (fast path for single-site players)."""
    if all(len(g) == 1 for g in players.groups):
        out, start = [], 0
        for g, S in zip(players.groups, players.strategies, strict=False):
            out.append(space.single_site_feasible(x, g[0], S[:, 0]))
            start += len(S)
        return np.concatenate(out)
    return space.feasible(X)


@dataclass
class GameResult:
    candidates: np.ndarray  # (m, L) distinct feasible sequences
    payoffs: np.ndarray  # (m,)
    equilibrium: np.ndarray  # the solver's final point (pure Nash for best response; the weights' mode for Hedge)
    rounds: int
    regret: list[float] = field(default_factory=list)
    # Hedge only: every round's joint play (rounds, L), whose empirical distribution approaches a coarse correlated
    # equilibrium, and each player's final mixed strategy (probabilities over its strategies)
    plays: np.ndarray | None = None
    mixed: list[np.ndarray] = field(default_factory=list)


def best_response(payoff: Payoff, space: SequenceSpace, x0: np.ndarray, players: Players | None = None,
                  max_moves: int = 1000, tol: float = 1e-9) -> GameResult:
    players = players or Players.of(space)
    x = np.array(x0, dtype=np.int64, copy=True)
    if not space.feasible(x)[0]:
        raise ValueError("best_response needs a feasible start")
    current = float(payoff(x[None])[0])
    visited = [x.copy()]
    values = [current]
    moves = 0
    for moves in range(1, max_moves + 1):
        X, _ = players.deviations(x)
        ok = deviation_feasible(space, players, x, X)
        if not ok.any():
            break
        u = payoff(X[ok])
        j = int(np.argmax(u))
        if u[j] <= current + tol:
            moves -= 1
            break
        x, current = X[ok][j].copy(), float(u[j])
        visited.append(x.copy())
        values.append(current)
    return GameResult(candidates=np.array(visited[-1:]), payoffs=np.array(values[-1:]), equilibrium=x,
                      rounds=moves)


def _softmax_sample(logw: np.ndarray, rng: np.random.Generator) -> int:
    p = np.exp(logw - logw.max())
    p /= p.sum()
    return int(rng.choice(len(p), p=p))


def hedge(payoff: Payoff, space: SequenceSpace, x0: np.ndarray, players: Players | None = None,
          rounds: int = 400, eta: float = 0.5, tail: int = 50, rng: np.random.Generator | None = None
          ) -> GameResult:
    """Hedge for every player. The weights start uniform except a small bias toward x0's letters (so the first game
    of a batch starts from the best observed point, as GameOpt's does)."""
    players = players or Players.of(space)
    rng = rng or np.random.default_rng(0)
    x0 = np.asarray(x0, dtype=np.int64)
    logw = []
    for g, S in zip(players.groups, players.strategies, strict=False):
        w = np.zeros(len(S))
        w[(S == x0[list(g)]).all(-1)] = eta  # one round's worth of preference for the start
        logw.append(w)
    cum_dev = [np.zeros(len(S)) for S in players.strategies]
    cum_real = 0.0
    regret: list[float] = []
    last = x0 if space.feasible(x0)[0] else space.repair(x0, rng)
    if last is None:
        raise ValueError("hedge needs a start that can be made feasible")
    samples: list[np.ndarray] = []
    plays = np.zeros((rounds, len(x0)), dtype=np.int64)
    for t in range(1, rounds + 1):
        x = last.copy()
        for p, (g, S) in enumerate(zip(players.groups, players.strategies, strict=False)):
            x[list(g)] = S[_softmax_sample(logw[p], rng)]
        if not space.feasible(x)[0]:
            y = space.repair(x, rng)
            x = y if y is not None else last.copy()
        last = x
        plays[t - 1] = x
        X, owner = players.deviations(x)
        ok = deviation_feasible(space, players, x, X)
        u = np.empty(len(X))
        u[ok] = payoff(X[ok])
        floor = float(u[ok].min()) if ok.any() else 0.0
        u[~ok] = floor
        realised = float(payoff(x[None])[0])
        cum_real += realised
        worst = 0.0
        for p in range(len(players.groups)):
            up = u[owner == p]
            logw[p] += eta * up
            cum_dev[p] += up
            worst = max(worst, float(cum_dev[p].max() - cum_real) / t)
        regret.append(worst)
        if t > rounds - tail:
            samples.append(x.copy())
    mode = np.array(last, copy=True)
    for p, (g, S) in enumerate(zip(players.groups, players.strategies, strict=False)):
        mode[list(g)] = S[int(np.argmax(logw[p]))]
    if not space.feasible(mode)[0]:
        repaired = space.repair(mode, rng)
        mode = repaired if repaired is not None else last
    samples.append(mode)
    uniq = {s.tobytes(): s for s in samples}
    C = np.array(list(uniq.values()), dtype=np.int64)
    mixed = [np.exp(w - w.max()) / np.exp(w - w.max()).sum() for w in logw]
    return GameResult(candidates=C, payoffs=payoff(C), equilibrium=mode, rounds=rounds, regret=regret, plays=plays,
                      mixed=mixed)
