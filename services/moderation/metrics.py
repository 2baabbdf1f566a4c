"""Quality metrics for the guard (shared by the training job and benchmarks/moderation/quality.py)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from services.moderation.guard import Targets
from services.moderation.taxonomy import N_TOPICS


def f1_score(pred: np.ndarray, true: np.ndarray) -> float:
    pred, true = pred.astype(bool), true.astype(bool)
    denom = pred.sum() + true.sum()
    return float(2 * (pred & true).sum() / denom) if denom else 1.0


def average_precision(scores: np.ndarray, true: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision: sum_k (R_k - R_{k-1}) P_k over the distinct
    score thresholds, highest first (ties are one threshold)."""
    true = true.astype(bool)
    n_pos = int(true.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    s, t = scores[order], true[order]
    tp, fp = np.cumsum(t), np.cumsum(~t)
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each distinct score
    precision = tp[last] / (tp[last] + fp[last])
    recall = tp[last] / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def guard_metrics(pred: Mapping[str, np.ndarray], y: Targets, *, unsafe_threshold: float = 0.5,
                  topic_threshold: float = 0.5) -> dict[str, float]:
    """unsafe F1/AUPRC, topic macro-F1 (rows with known topics; topics with any positive), severity exact and
    within-one accuracy over (row, topic) pairs with a labeled severity."""
    out = {"unsafe_f1": f1_score(pred["unsafe"] >= unsafe_threshold, y.unsafe > 0.5),
           "unsafe_auprc": average_precision(pred["unsafe"], y.unsafe > 0.5)}
    known = y.topic_known
    f1s = [f1_score(pred["topics"][known, t] >= topic_threshold, y.topic[known, t] > 0.5)
           for t in range(N_TOPICS) if y.topic[known, t].any()]
    out["topic_macro_f1"] = float(np.mean(f1s)) if f1s else float("nan")
    m = y.severity >= 0
    if m.any():
        d = np.abs(pred["severity"][m] - y.severity[m])
        out["severity_exact"] = float((d == 0).mean())
        out["severity_within_one"] = float((d <= 1).mean())
    out["n"] = float(len(y.unsafe))
    return out
