"""GameOpt's games (Bal et al., "Optimistic Games for Combinatorial Bayesian Optimization with Application to Protein
Design", ICLR 2025): players are sites (or groups of sites), a player's strategies are the letters (the joint letters
of its group), and all players share one payoff, the acquisition of the GP surrogate (UCB, times the probability of
feasibility once something has failed; see optimizer.Acquisition). Two equilibrium solvers:

- `best_response`: iterated best response. From a feasible start, move to the best feasible single-player change
  (over all players) while it raises the payoff; it stops at a pure Nash equilibrium: no player can raise the payoff
  by changing its own letters among those that keep the sequence feasible.
- `hedge`: every player runs Hedge (multiplicative weights), as the paper's code does (solvers/cce.py of
  melisilaydabal/gameopt): weights start uniform; each round each player's probabilities get a floor (p + 1e-5,
  renormalised, so no letter's probability ever reaches 0) and the player samples a letter; then for every player
  and every letter the payoff of the round's play with only that player changed is scored (the counterfactual,
  whether or not that change is feasible) and the player's log-weights grow by eta * payoff / scale (scale 10: the
  official code rescales the UCB as (UCB + 5) / 10 for its ESM-oracle tasks; the shift does not change Hedge). The
  empirical distribution of the joint plays approaches a coarse correlated equilibrium; the distinct plays of the
  last `tail` rounds (10, as the code's last_nb_rounds = 11) and the weights' mode are the game's candidates. The
  measured regret (best fixed deviation's average payoff minus the realised average, maximised over players) is
  returned per round.

Constraints, declared ones and the trust region alike, are enforced inside the game, not by repairing a sampled
sequence afterwards: each round the players move one at a time in a random order, each choosing only among the
letters that keep the sequence feasible given the others' current letters (`SequenceSpace.single_site_feasible`),
from their weights restricted to those letters. The play therefore stays feasible every round (the start is), and
which edits a trust region lets through is decided by the players' weights, not at random: under an edit budget
(one parent and max_edits: the trust region) each round's play is built from the parent, the players taking their
turns in the order of what a change gained them in the last round's counterfactuals, so the budget goes to the
changes worth most instead of to whichever edits were made first. Best response takes
only feasible moves. `payoff(X) -> (n,)` scores integer-coded sequences; when it also has `single_site(x) -> (L, A)`
(the payoff of x with site s set to letter a, for every s, a) and the players are single sites, a round scores
all deviations with one call (the GP's cached Cholesky factor, gp.py)."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from services.design.gameopt.space import SequenceSpace

Payoff = Callable[[np.ndarray], np.ndarray]
MAX_STRATEGIES = 4096
PROB_FLOOR = 1e-5  # the official code's epsilon added to every probability before sampling


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


def _single_sites(players: Players) -> bool:
    return all(len(g) == 1 for g in players.groups)


def deviation_payoffs(payoff: Payoff, space: SequenceSpace, players: Players, x: np.ndarray) -> list[np.ndarray]:
    """Per player, the payoff of x with that player's strategy replaced by each of its strategies (feasible or not)."""
    table = getattr(payoff, "single_site", None)
    if table is not None and _single_sites(players):
        T = table(x)  # (L, A)
        return [T[g[0], S[:, 0]] for g, S in zip(players.groups, players.strategies, strict=False)]
    X, owner = players.deviations(x)
    u = payoff(X)
    return [u[owner == p] for p in range(len(players.groups))]


def _allowed(space: SequenceSpace, players: Players, p: int, x: np.ndarray) -> np.ndarray:
    g, S = players.groups[p], players.strategies[p]
    if len(g) == 1:
        return space.single_site_feasible(x, g[0], S[:, 0])
    X = np.repeat(x[None], len(S), 0)
    X[:, list(g)] = S
    return space.feasible(X)


def best_response(payoff: Payoff, space: SequenceSpace, x0: np.ndarray, players: Players | None = None,
                  max_moves: int = 1000, tol: float = 1e-9) -> GameResult:
    players = players or Players.of(space)
    x = np.array(x0, dtype=np.int64, copy=True)
    if not space.feasible(x)[0]:
        raise ValueError("best_response needs a feasible start")
    current = float(payoff(x[None])[0])
    moves = 0
    for moves in range(1, max_moves + 1):
        U = deviation_payoffs(payoff, space, players, x)
        best_p, best_j, best_u = -1, -1, current + tol
        for p, up in enumerate(U):
            ok = _allowed(space, players, p, x)
            if ok.any():
                j = int(np.flatnonzero(ok)[np.argmax(up[ok])])
                if up[j] > best_u:
                    best_p, best_j, best_u = p, j, float(up[j])
        if best_p < 0:
            moves -= 1
            break
        x[list(players.groups[best_p])] = players.strategies[best_p][best_j]
        current = float(payoff(x[None])[0])
    return GameResult(candidates=x[None].copy(), payoffs=np.array([current]), equilibrium=x, rounds=moves)


def floored(logw: np.ndarray, floor: float = PROB_FLOOR) -> np.ndarray:
    """A player's probabilities from its log-weights, with the floor: (p + floor) / (1 + floor * S)."""
    p = np.exp(logw - logw.max())
    p /= p.sum()
    p = p + floor
    return p / p.sum()


def hedge(payoff: Payoff, space: SequenceSpace, x0: np.ndarray, players: Players | None = None,
          rounds: int = 400, eta: float = 0.5, tail: int = 10, rng: np.random.Generator | None = None,
          scale: float = 10.0, floor: float = PROB_FLOOR) -> GameResult:
    """Hedge for every player from uniform weights; x0 (feasible) is the play before the first round (the players
    then move from it, one at a time, within the constraints)."""
    players = players or Players.of(space)
    rng = rng or np.random.default_rng(0)
    x = np.array(x0, dtype=np.int64, copy=True)
    if not space.feasible(x)[0]:
        y = space.repair(x, rng)
        if y is None:
            raise ValueError("hedge needs a start that can be made feasible")
        x = y
    # under an edit budget (a trust region: one parent, max_edits) each round's play is built from the parent, so
    # an edit made once does not hold the budget for good; players move in the order of how much a change gained
    # them in the last round's counterfactuals (random among equals: the first round is a random order)
    parents = space.parent_array
    base = parents[0] if len(parents) == 1 and space.max_edits is not None and space.feasible(parents[0])[0] \
        else None
    if _single_sites(players) and [g[0] for g in players.groups] == list(range(space.length)):
        return _hedge_letters(payoff, space, x, players, base, rounds, eta, tail, rng, scale, floor)
    n_players = len(players.groups)
    logw = [np.zeros(len(S)) for S in players.strategies]
    cum_dev = [np.zeros(len(S)) for S in players.strategies]
    cum_real = 0.0
    regret: list[float] = []
    samples: list[np.ndarray] = []
    plays = np.zeros((rounds, len(x)), dtype=np.int64)
    gain = np.zeros(n_players)
    for t in range(1, rounds + 1):
        if base is not None:
            x = base.copy()
        for p in np.lexsort((rng.random(n_players), -gain)):
            q = floored(logw[p], floor) * _allowed(space, players, p, x)
            j = int(rng.choice(len(q), p=q / q.sum()))
            x[list(players.groups[p])] = players.strategies[p][j]
        plays[t - 1] = x
        U = deviation_payoffs(payoff, space, players, x)
        ref = x if base is None else base
        gain = np.array([float(U[p].max() - U[p][(S == ref[list(g)]).all(-1)].max())
                         for p, (g, S) in enumerate(zip(players.groups, players.strategies, strict=False))])
        # the realised payoff is every player's own-strategy entry (all equal: one shared payoff)
        g0, S0 = players.groups[0], players.strategies[0]
        realised = float(U[0][int(np.flatnonzero((S0 == x[list(g0)]).all(-1))[0])])
        cum_real += realised
        worst = 0.0
        for p in range(n_players):
            logw[p] += (eta / scale) * U[p]
            cum_dev[p] += U[p]
            worst = max(worst, float(cum_dev[p].max() - cum_real) / t)
        regret.append(worst)
        if t > rounds - tail:
            samples.append(x.copy())
    # the weights' mode, placed player by player within the constraints (most confident players first)
    mode = x.copy()
    for p in np.argsort([-floored(w, floor).max() for w in logw]):
        q = floored(logw[p], floor) * _allowed(space, players, p, mode)
        mode[list(players.groups[p])] = players.strategies[p][int(np.argmax(q))]
    return _result(payoff, samples, mode, rounds, regret, plays, [floored(w, floor) for w in logw])


def _result(payoff, samples, mode, rounds, regret, plays, mixed) -> GameResult:
    samples.append(mode)
    uniq = {s.tobytes(): s for s in samples}
    C = np.array(list(uniq.values()), dtype=np.int64)
    return GameResult(candidates=C, payoffs=payoff(C), equilibrium=mode, rounds=rounds, regret=regret, plays=plays,
                      mixed=mixed)


def _hedge_letters(payoff: Payoff, space: SequenceSpace, x: np.ndarray, players: Players, base: np.ndarray | None,
                   rounds: int, eta: float, tail: int, rng: np.random.Generator, scale: float, floor: float
                   ) -> GameResult:
    """`hedge` for one player per site, on (L, A) arrays (the same algorithm; a round costs a few vector operations
    instead of L Python-level draws). When the only constraints are allowed letters and, optionally, one parent's
    edit budget, the sequential draw is exact in closed form: each player proposes a letter from its floored weights
    over its allowed letters; in the turn order, an edit is kept while the budget lasts, and a player whose turn comes
    after it is spent has only the parent's letter left. Other constraints (forbidden motifs, several parents) take
    the player-by-player draw."""
    L, A = space.length, space.size
    mask = space.mask
    rows = np.arange(L)
    closed = not space.forbidden and (base is not None or space.max_edits is None or not len(space.parent_array))
    W = np.where(mask, 0.0, -np.inf)  # log-weights, -inf on letters a site does not allow
    cum_dev = np.zeros((L, A))
    cum_real = 0.0
    regret: list[float] = []
    samples: list[np.ndarray] = []
    plays = np.zeros((rounds, L), dtype=np.int64)
    gain = np.zeros(L)
    table = getattr(payoff, "single_site", None)

    def probs() -> np.ndarray:
        P = np.exp(W - W.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        P = np.where(mask, P + floor, 0.0)
        return P / P.sum(1, keepdims=True)

    for t in range(1, rounds + 1):
        P = probs()
        order = np.lexsort((rng.random(L), -gain))
        if closed:
            cdf = np.cumsum(P, 1)
            prop = np.minimum((rng.random((L, 1)) * cdf[:, -1:] > cdf).sum(1), A - 1)
            if base is not None:
                x = base.copy()
                edit = prop[order] != base[order]
                keep = ~edit | (np.cumsum(edit) <= space.max_edits)
                x[order[keep]] = prop[order[keep]]
            else:
                x = prop
        else:
            if base is not None:
                x = base.copy()
            for s in order:
                q = P[s] * space.single_site_feasible(x, int(s), np.arange(A))
                x[s] = int(rng.choice(A, p=q / q.sum()))
        plays[t - 1] = x
        if table is not None:
            T = np.array(table(x), dtype=np.float64)
        else:
            T = np.zeros((L, A))
            for p, u in enumerate(deviation_payoffs(payoff, space, players, x)):
                T[p, players.strategies[p][:, 0]] = u
        T = np.where(mask, T, -np.inf)
        ref = x if base is None else base
        gain = T.max(1) - T[rows, ref]
        cum_real += float(T[0, x[0]])
        W += (eta / scale) * np.where(mask, T, 0.0)
        cum_dev += np.where(mask, T, 0.0)
        regret.append(float((np.where(mask, cum_dev, -np.inf).max(1) - cum_real).max()) / t)
        if t > rounds - tail:
            samples.append(x.copy())
    P = probs()
    mode = x.copy() if base is None else base.copy()
    for s in np.argsort(-P.max(1), kind="stable"):
        q = P[s] * space.single_site_feasible(mode, int(s), np.arange(A))
        mode[s] = int(np.argmax(q))
    mixed = [P[s, S[:, 0]] for s, S in enumerate(players.strategies)]
    return _result(payoff, samples, mode, rounds, regret, plays, mixed)
