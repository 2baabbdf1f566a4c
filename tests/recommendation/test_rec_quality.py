"""Quality on the planted synthetic set (small, CI-sized settings, 3 seeds, mean NDCG@10 on test users).

What was measured while writing this (see the issue report): with the faithful PreferDiff loss, PreferDiff and
DreamRec (lam = 1, same cosine error) both beat popularity by a wide margin, but PreferDiff did NOT beat DreamRec on
these planted sets at any setting tried (lam 0.4/0.6, w 2/6, dim 32..512, lr 1e-3 and 1e-4); it did beat the original
MSE-error DreamRec (loss_type="mse") on two of three sets, by small margins. The paper's claim (>= +5.7% NDCG over
DreamRec) is kept below as a strict xfail so that it stays visible, and so that the day it starts to hold the xfail
fails and someone updates this file."""
import statistics

import pytest

from services.recommendation.data import build_dataset, synthetic_interactions
from services.recommendation.training import TrainConfig, train

SEEDS = (0, 1, 2)
SYNTH = dict(n_users=600, n_items=120, n_clusters=6)
TRAIN = dict(dim=64, epochs=8, lr=1e-3, patience=100, batch_size=256)


@pytest.fixture(scope="module")
def ndcg10():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, list[float]] = {"popularity": [], "preferdiff": [], "dreamrec": []}
    try:
        for seed in SEEDS:
            ds = build_dataset(synthetic_interactions(seed=seed, **SYNTH), seed=seed)
            for kind in out:
                r = train(TrainConfig.from_params({"model_kind": kind, "seed": seed, **TRAIN}), ds)
                out[kind].append(r.test_metrics["ndcg@10"])
    finally:
        torch.set_num_threads(n)
    print({k: [round(v, 4) for v in vs] for k, vs in out.items()})
    return {k: statistics.mean(v) for k, v in out.items()}


def test_sequence_diffusion_models_beat_popularity_on_planted_transitions(ndcg10):
    assert ndcg10["preferdiff"] > 3 * ndcg10["popularity"], ndcg10
    assert ndcg10["dreamrec"] > 3 * ndcg10["popularity"], ndcg10


PAPER_MIN_GAIN = 1.057  # the smallest gain over DreamRec the paper reports (+5.7%)


@pytest.mark.xfail(strict=True, reason="not reproduced: on these planted sets DreamRec (lam = 1) >= PreferDiff "
                                       "(mean NDCG@10 0.604 vs 0.594 here; 0.580 vs 0.541 with 1000 users)")
def test_preferdiff_beats_dreamrec_by_the_papers_margin(ndcg10):
    assert ndcg10["preferdiff"] > PAPER_MIN_GAIN * ndcg10["dreamrec"], ndcg10
