"""Quality on a planted synthetic set (CI-sized settings, 3 seeds, mean NDCG@10 on test users): the ordering
PreferDiff > DreamRec (MSE) > popularity.

The set: 500 items in 20 clusters, 5 planted successors per item (Dirichlet weights) and 30% popularity noise, so the
next item is ambiguous and the catalogue is large next to the batch. PreferDiff (lam = 0.4, gamma = 5, w = 2, cosine
error through kernels.preferdiff_loss) and DreamRec (its own objective: MSE, lam = 1, no negatives; same encoder,
denoiser, guidance, lr 3e-3, dim 64, 12 epochs on every prefix, best epoch by validation Recall@5) are trained on the
same data and seeds.

Measured for issue 15 with DreamRec = MSE (1 torch thread, a heavily loaded 2-core machine: ~6 min per seed there,
far less on an idle one), seeds 0/1/2: NDCG@10 PreferDiff 0.311/0.244/0.241 (best epochs 12/10/11), DreamRec (MSE)
0.177/0.139/0.141 (best epochs 9/9/4), popularity 0.046/0.071/0.079; the cosine ablation 0.198/0.177/0.184.
`pytest -s` prints every seed.
Measured earlier with the cosine ablation (lam = 1, cosine error, then called "dreamrec"): seeds 0-2 PreferDiff
0.262 +- 0.036, ablation 0.188 +- 0.010, popularity 0.065 +- 0.017; held-out seeds 3-5: 0.261, 0.162, 0.053.
Without negatives nothing keeps the learned item embeddings apart (seed 0 after 12 epochs: mean pairwise cosine of
item embeddings 0.14 for the ablation, 0.00 for PreferDiff). On a smaller set (800 users, 300 items, 8 epochs)
PreferDiff and DreamRec (MSE) tie (0.220 vs 0.221, seed 0): this test keeps the larger set.
- The paper's convergence claim (best validation Recall@5 in fewer epochs than lam = 1) is NOT reproduced: DreamRec
  reaches its best epoch earlier (mean 7.3 vs 11.0). Kept below as a strict xfail so that it stays visible and the day
  it holds someone updates this file."""
import statistics

import pytest

from services.recommendation.data import build_dataset, synthetic_interactions
from services.recommendation.training import TrainParams, fit

SEEDS = (0, 1, 2)
SYNTH = dict(n_users=1500, n_items=500, n_clusters=20, successors=5, noise=0.3)
TRAIN = dict(dim=64, epochs=12, lr=3e-3, patience=100, batch_size=256, train_samples="every_prefix",
             early_stop_metric="recall@5")
KIND_PARAMS = {"popularity": {}, "preferdiff": TRAIN, "dreamrec": TRAIN}  # DreamRec: MSE, lam = 1 (its objective)
pytestmark = pytest.mark.timeout(1800)  # ~2 min on an idle CI runner; a loaded machine takes far longer
KINDS = ("popularity", "preferdiff", "dreamrec")


@pytest.fixture(scope="module")
def runs():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, dict[str, list[float]]] = {k: {"ndcg10": [], "best_epoch": []} for k in KINDS}
    try:
        for seed in SEEDS:
            ds = build_dataset(synthetic_interactions(seed=seed, **SYNTH), seed=seed)
            for kind in KINDS:
                params = {"model_kind": kind, "seed": seed, **KIND_PARAMS[kind]}
                r = fit(TrainParams.model_validate(params), ds)
                out[kind]["ndcg10"].append(r.test_metrics["ndcg@10"])
                out[kind]["best_epoch"].append(r.best_epoch)
    finally:
        torch.set_num_threads(n)
    print({k: {m: [round(x, 4) for x in v] for m, v in d.items()} for k, d in out.items()})
    return out


def mean(runs, kind, metric="ndcg10"):
    return statistics.mean(runs[kind][metric])


def test_diffusion_models_beat_popularity_on_planted_transitions(runs):
    assert mean(runs, "preferdiff") > 3 * mean(runs, "popularity"), runs
    assert mean(runs, "dreamrec") > 2 * mean(runs, "popularity"), runs


def test_preferdiff_beats_dreamrec_on_every_seed_and_by_the_papers_margin(runs):
    """Measured +74% over seeds 0-2 against DreamRec (MSE) (+39% and +62% against the cosine ablation on seeds 0-2
    and 3-5); the paper reports +5.7% to +19.4% over DreamRec. Asserted: a win on every seed, a mean gain of >= 15%."""
    pd, dr = runs["preferdiff"]["ndcg10"], runs["dreamrec"]["ndcg10"]
    assert all(p > d for p, d in zip(pd, dr, strict=True)), runs
    assert statistics.mean(pd) > 1.15 * statistics.mean(dr), runs


@pytest.mark.xfail(strict=True, reason="not reproduced: DreamRec (MSE, lam = 1) reaches its best validation "
                                       "Recall@5 earlier (mean best epoch 7.3 vs PreferDiff 11.0 over seeds "
                                       "0-2; the cosine ablation too)")
def test_preferdiff_reaches_its_best_validation_recall_in_fewer_epochs(runs):
    assert mean(runs, "preferdiff", "best_epoch") < mean(runs, "dreamrec", "best_epoch"), runs
