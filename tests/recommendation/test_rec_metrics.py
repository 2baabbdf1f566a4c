import math

import torch
from torch.testing import assert_close

from services.recommendation.metrics import evaluate, history_exclusion, ndcg_at, ranking_metrics


def test_recall_and_ndcg_by_hand():
    top = torch.tensor([[3, 1, 2, 9, 8, 7], [5, 6, 7, 8, 9, 4], [1, 2, 3, 4, 5, 6]])
    tgt = torch.tensor([1, 4, 42])
    m = ranking_metrics(top, tgt, ks=(1, 5, 6))
    assert m["recall@1"] == 0.0
    assert math.isclose(m["recall@5"], 1 / 3, rel_tol=1e-6) and math.isclose(m["recall@6"], 2 / 3, rel_tol=1e-6)
    assert math.isclose(m["ndcg@5"], (1 / math.log2(3)) / 3, rel_tol=1e-6)
    assert math.isclose(m["ndcg@6"], (1 / math.log2(3) + 1 / math.log2(7)) / 3, rel_tol=1e-6)
    assert ndcg_at(0, 5) == 1.0 and ndcg_at(5, 5) == 0.0


def test_evaluate_over_the_full_catalogue_and_history_exclusion():
    n, d = 30, 30
    table = torch.eye(n, d)  # row j is item j + 1
    hist = torch.tensor([[3, 7, 0], [5, 0, 0]])
    lengths = torch.tensor([2, 1])

    def q(h, lens):  # prefers the last history item, then the target-ish item 12
        out = torch.zeros(h.shape[0], d)
        out[torch.arange(h.shape[0]), h[torch.arange(h.shape[0]), lens - 1] - 1] = 2.0
        out[:, 11] = 1.0
        return out

    tgt = torch.tensor([12, 12])
    keep = evaluate(q, table, hist, lengths, tgt, ks=(1, 2))
    assert keep["recall@1"] == 0.0 and keep["recall@2"] == 1.0
    drop = evaluate(q, table, hist, lengths, tgt, ks=(1, 2), exclude_history=True)
    assert drop["recall@1"] == 1.0 and drop["ndcg@1"] == 1.0
    assert_close(history_exclusion(hist), torch.tensor([[2, 6, -1], [4, -1, -1]]))
