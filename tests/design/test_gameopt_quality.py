"""GameOpt's optimisation quality on a seeded small Ehrlich function (issue 36): each solver, at its defaults (Hedge:
400 rounds, 3 games, the official update and floor), against the plain GP-UCB best-response loop that picks one point
at a time (refitting after every evaluation: a stronger schedule than a batch) on the same functions, starts, trust
region and budget. The test asserts that each solver's median best value over the seeds is at least the plain loop's
and above random search's. The functions are small so that the file runs in about a minute; every draw is seeded."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from services.design.gameopt.optimizer import GameOptConfig, run_loop
from services.design.gameopt.oracles import Ehrlich

warnings.filterwarnings("ignore", module="botorch")
warnings.filterwarnings("ignore", module="linear_operator")

SEEDS = range(5)
BUDGET, BATCH, N_INIT, RADIUS = 32, 4, 8, 2


def _function(seed: int) -> Ehrlich:
    return Ehrlich(num_states=10, length=8, num_motifs=2, motif_length=3, seed=seed)


def _best(method: str, config: GameOptConfig | None = None) -> list[float]:
    torch.set_num_threads(1)
    return [run_loop(_function(s), method, BUDGET, BATCH, s, n_init=N_INIT, config=config,
                     trust_radius=RADIUS).best_after(BUDGET) for s in SEEDS]


@pytest.fixture(scope="module")
def baselines() -> dict[str, list[float]]:
    return {"gp_ucb_br": _best("gp_ucb_br"), "random": _best("random")}


@pytest.mark.parametrize("solver", ["hedge", "best_response"])
def test_each_solver_matches_the_plain_best_response_loop_on_a_small_ehrlich_function(solver, baselines):
    best = _best(f"gameopt_{solver}", GameOptConfig())
    med = float(np.median(best))
    plain, rand = float(np.median(baselines["gp_ucb_br"])), float(np.median(baselines["random"]))
    assert med >= plain, (best, baselines)
    assert med > rand, (best, baselines)
