"""The suggestion job (design.gameopt.suggest) as a step protocol: setup fits the GP on the campaign snapshot in the
job's params (deterministically, so a resumed attempt refits the same model); step i plays game i (the first from
the best observed sequence); the checkpoint holds every finished game's candidate equilibria; the result is the
batch (top distinct feasible candidates by UCB). For oracle campaigns the batch is also scored by the oracle
(`oracle_observations`), which the kind's on_finish hook (hooks.py) records as the campaign's observations."""
from __future__ import annotations

from typing import Any

import numpy as np

from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.design.gameopt.optimizer import GameOpt, GameOptConfig, Suggestion
from services.design.gameopt.oracles import make_oracle, oracle_values
from services.design.gameopt.params import SuggestParams
from services.design.gameopt.space import SequenceSpace


def space_from(p: SuggestParams) -> SequenceSpace:
    s = p.space
    return SequenceSpace(s.alphabet, s.length, tuple(s.allowed_letters), tuple(s.parents), s.max_edits,
                         tuple(s.forbidden_motifs))


class SuggestionJob:
    def __init__(self) -> None:
        self.total = 0
        self.pools: list[list[list[int]]] = []

    def setup(self, ctx: JobContext) -> None:
        self.p = p = parse_params(SuggestParams, ctx.params, prefix="params.")
        self.space = space_from(p)
        X = np.array([self.space.encode(s) for s in p.sequences], dtype=np.int64).reshape(-1, self.space.length)
        y = np.array([np.nan if v is None else v for v in p.values], dtype=np.float64)  # NaN: a failed measurement
        self.sign = 1.0 if p.direction == "MAXIMIZE" else -1.0
        cfg = GameOptConfig(solver=p.solver, beta=p.beta, rounds=p.rounds, eta=p.eta, games=p.games,
                            group_size=p.group_size, kernel=p.kernel, noise_std=p.noise_std,
                            trust_radius=p.trust_radius)
        self.opt = GameOpt(self.space, X, self.sign * y, p.batch_size, cfg, seed=p.seed)
        self.opt.fit()
        self.total = 0 if self.opt.cold else self.opt.n_games
        ctx.progress(0.02, "cold start: random feasible batch" if self.opt.cold
                     else f"GP fitted on {len(y)} observations; {self.total} games")

    def step(self, i: int) -> dict[str, float]:
        res = self.opt.play(i, [np.array(p, dtype=np.int64).reshape(-1, self.space.length) for p in self.pools])
        self.pools.append(res.candidates.tolist())
        out = {"game": float(i), "best_ucb": float(np.max(res.payoffs)) if len(res.payoffs) else 0.0,
               "moves": float(res.rounds)}
        if res.regret:
            out["final_regret"] = float(res.regret[-1])
        return out

    def state(self) -> dict[str, Any]:
        return {"pools": self.pools}

    def load_state(self, state: dict[str, Any]) -> None:
        self.pools = [list(p) for p in state["pools"]]

    def result(self, ctx: JobContext) -> dict[str, Any]:
        pools = [np.array(p, dtype=np.int64).reshape(-1, self.space.length) for p in self.pools]
        batch: list[Suggestion] = self.opt.select(pools)
        if not all(self.space.feasible(s.sequence)[0] for s in batch):  # the one judge, once more
            raise RuntimeError("a suggestion violates the campaign's constraints")
        items = []
        for s in batch:
            item: dict[str, Any] = {"sequence": self.space.decode(s.sequence), "source": s.source}
            if s.ucb is not None:
                item.update(ucb=s.ucb, mean=self.sign * s.mean, std=s.std)
            items.append(item)
        out: dict[str, Any] = {"campaign_id": self.p.campaign_id, "suggestions": items, "solver": self.p.solver,
                               "games": len(self.pools), "observations": len(self.p.values),
                               "cold_start": self.opt.cold}
        if self.p.oracle:
            oracle = make_oracle(self.p.oracle)
            X = np.array([s.sequence for s in batch], dtype=np.int64).reshape(-1, self.space.length)
            values = oracle_values(oracle, X) if len(X) else []
            out["oracle_observations"] = [{"sequence": it["sequence"], "value": v}  # None: infeasible (failed)
                                          for it, v in zip(items, values, strict=False)]
        return out


def run_suggestion(ctx: JobContext) -> dict:
    return run_steps(ctx, SuggestionJob(), checkpoint_every=1,
                     message=lambda done, total: f"game {done}/{total}")
