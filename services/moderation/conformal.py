"""Conformal Fairness for the guard's severity predictions (Vadlamani et al., github AdityaVadlamani/conformal-fairness).

Split conformal prediction gives prediction sets C(x) over the severity levels 0..4 with P(y in C(x)) >= 1 - alpha
marginally. Marginal coverage can hide groups that the guard serves worse (e.g. a dialect the encoder handles badly):
Conformal Fairness raises the threshold until a fairness criterion over the coverage of each sensitive group holds.

Class probabilities (the issue leaves this open; `DISTRIBUTIONS`):
  "top_topic"  (default) the severity distribution of the text's most probable topic t* = argmax P(topic):
               p_k = P(sev_t* >= k) - P(sev_t* >= k+1), with P(>= 0) = 1 and P(>= 5) = 0. severity_ge is non-increasing
               in k (guard.py), so p is a distribution.
  "max_topic"  the distribution of the maximum severity over topics, each topic counting only if the text is about it,
               assuming independent topics: P(max >= k) = 1 - prod_t (1 - P(topic t) * P(sev_t >= k)).
The label of a row is its severity: the maximum known severity over its topics (0 for a safe row).

Non-conformity scores s[i, k] ("score if the true level were k"; `SCORE_KINDS`), all in [0, 1]:
  "tps"  1 - p_k   (threshold prediction sets, the issue's "1 - p_y")
  "aps"  sum of the probabilities ranked above k, plus p_k (adaptive prediction sets, not randomised: the sets of a
         text must not depend on a random draw at serving time)

Calibration (official repo: ScoreSplitFairConformalClassifer.run / _satisfies_lambda, utils.inverse_quantile):
  q_hat = the ceil((n+1)(1-alpha))-th smallest true-class score (1.0 -- every level -- when that exceeds n). The
          official code calls torch.quantile(level=ceil((n+1)(1-alpha))/n, "higher"), which takes one order statistic
          more for most n; we use the textbook split-conformal quantile.
  candidates lambda: the distinct calibration scores >= q_hat, and 1.0 (every level).
  for each positive level k = 1..4 and group g, the calibration points selected by the metric's filter, their scores
  for level k, and   a_g = 1 - #(s <= lambda) / (n_g + 1)     (inverse_quantile),  w_g = 1 / (n_g + 1);
      alpha_max = max_g a_g,   alpha_min = max(0, min_g (a_g - w_g))
  accept lambda for k when  alpha_max - alpha_min <= c   (difference metrics)
                       or   (1 - alpha_max) / (1 - alpha_min) >= c   (disparate impact, the "80% rule" at c = 0.8)
  lambda_k = the smallest accepted candidate (classwise), or one lambda accepted for every k; level 0 is not a
  positive label and keeps q_hat. No accepted candidate: 1.0 (the level is always in the set), flagged unsatisfied.
  Every threshold is >= q_hat, so the sets contain the plain conformal sets and keep marginal coverage >= 1 - alpha.
  Groups with no calibration point for a level carry no evidence and are left out of that level's check (the official
  code would count them as miscoverage 1 and fail every lambda).
Metric filters for (level k, group g) (official _get_filter_mask), and what the "coverage" is:
  equal_opportunity     y == k and group g    P(k in C | y = k, g)      (true-positive rate of level k)
  predictive_equality   y != k and group g    P(k in C | y != k, g)     (false-positive rate of level k)
  demographic_parity    group g               P(k in C | g)             (difference criterion)
  disparate_impact      group g               P(k in C | g)             (ratio criterion)
  overall_acc_equality  group g, true level   P(y in C | g)             (one threshold for all levels)
  none                  plain split conformal: every threshold is q_hat (reports measure equal opportunity)
Prediction sets: C(x) = {k : s_k(x) <= lambda_k}. The thresholds do not depend on the group, so serving needs no
sensitive attribute (C(x) may be empty with "tps" when no level is plausible enough at this alpha).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.taxonomy import MAX_SEVERITY, N_TOPICS

N_LEVELS = MAX_SEVERITY + 1  # severity levels 0..4
SCORE_KINDS = ("tps", "aps")
DISTRIBUTIONS = ("top_topic", "max_topic")
DIFFERENCE_METRICS = ("equal_opportunity", "predictive_equality", "demographic_parity", "overall_acc_equality")
RATIO_METRICS = ("disparate_impact",)
METRICS = DIFFERENCE_METRICS + RATIO_METRICS + ("none",)  # "none": plain split conformal (every threshold q_hat)
DEFAULT_C = {"disparate_impact": 0.8}  # the 80% rule; difference metrics default to 0.1
MAX_CANDIDATES = 20_000  # lambda candidates kept (evenly thinned above this, as the official code thins to ~500)


def default_closeness(metric: str) -> float:
    return DEFAULT_C.get(metric, 0.1)


# ------------------------------------------------------------------------------------------- probabilities, scores
def severity_distribution(proba: Mapping[str, np.ndarray], mode: str = "top_topic") -> np.ndarray:
    """[N, 5] probabilities of severity levels 0..4 from GuardModel.predict_proba output (see module doc)."""
    if mode not in DISTRIBUTIONS:
        raise InvalidArgument("distribution", f"must be one of {list(DISTRIBUTIONS)}")
    try:
        ge = np.asarray(proba["severity_ge"], dtype=np.float64)
        topics = np.asarray(proba["topics"], dtype=np.float64)
    except KeyError as e:
        raise FailedPrecondition(f"guard predictions lack {e.args[0]!r}") from None
    if ge.ndim != 3 or ge.shape[1:] != (N_TOPICS, MAX_SEVERITY) or topics.shape != ge.shape[:2]:
        raise FailedPrecondition(f"guard predictions have severity_ge {ge.shape} and topics {topics.shape}; "
                                 f"want [N, {N_TOPICS}, {MAX_SEVERITY}] and [N, {N_TOPICS}]")
    n = ge.shape[0]
    if mode == "top_topic":
        t = np.argmax(topics, axis=1)
        tail = ge[np.arange(n), t]  # P(>= k), k = 1..4
    else:
        tail = 1.0 - np.prod(1.0 - topics[:, :, None] * ge, axis=1)
    tail = np.minimum.accumulate(np.clip(tail, 0.0, 1.0), axis=1)  # guard against rounding; already monotone
    ge_all = np.concatenate([np.ones((n, 1)), tail, np.zeros((n, 1))], axis=1)  # P(>= 0..5)
    return ge_all[:, :-1] - ge_all[:, 1:]


def class_scores(probs: np.ndarray, kind: str) -> np.ndarray:
    """[N, K] non-conformity scores: s[i, k] is the score of sample i if its true class were k (module doc)."""
    if kind not in SCORE_KINDS:
        raise InvalidArgument("score", f"must be one of {list(SCORE_KINDS)}")
    p = np.asarray(probs, dtype=np.float64)
    if kind == "tps":
        return 1.0 - p
    order = np.argsort(-p, axis=1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=1)
    above = np.cumsum(sorted_p, axis=1) - sorted_p  # mass ranked strictly above each position
    s = np.empty_like(p)
    np.put_along_axis(s, order, above + sorted_p, axis=1)
    return np.minimum(s, 1.0)


def conformal_quantile(true_scores: np.ndarray, alpha: float) -> float:
    """The ceil((n+1)(1-alpha))-th smallest score; 1.0 (every class: scores are <= 1) when that exceeds n."""
    s = np.sort(np.asarray(true_scores, dtype=np.float64))
    n = len(s)
    k = math.ceil((n + 1) * (1.0 - alpha) - 1e-12)
    if n == 0 or k > n:
        return 1.0
    return float(s[max(k, 1) - 1])


def miscoverage(sorted_scores: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """Official inverse_quantile, vectorised over lambdas: 1 - #(s <= lambda) / (n + 1)."""
    return 1.0 - np.searchsorted(sorted_scores, lambdas, side="right") / (len(sorted_scores) + 1.0)


def prediction_set_mask(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """bool [N, K]: level k is in the set iff s_k <= lambda_k."""
    return np.asarray(scores) <= np.asarray(thresholds, dtype=np.float64)[None, :]


# ------------------------------------------------------------------------------------------- calibration
@dataclass
class FairCalibration:
    q_hat: float
    thresholds: np.ndarray            # [K] lambda_k
    satisfied: np.ndarray             # [K] bool (False: no candidate met the criterion; threshold 1.0)
    n_candidates: int
    metric: str
    c: float
    alpha: float
    n_groups: int
    diagnostics: dict[str, Any] = field(default_factory=dict)


def _filter(metric: str, labels: np.ndarray, groups: np.ndarray, k: int, g: int) -> np.ndarray:
    in_g = groups == g
    if metric == "equal_opportunity":
        return in_g & (labels == k)
    if metric == "predictive_equality":
        return in_g & (labels != k)
    return in_g  # demographic parity, disparate impact, overall accuracy equality


def _accepts(metric: str, c: float, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a, w: [G, L] miscoverages and widths of the groups with data. Returns [L] bool."""
    if a.shape[0] < 2:
        return np.ones(a.shape[1], dtype=bool)
    a_max = a.max(axis=0)
    a_min = np.maximum(0.0, (a - w).min(axis=0))
    if metric in RATIO_METRICS:
        return (1.0 - a_max) / (1.0 - a_min) >= c - 1e-12
    return np.abs(a_max - a_min) <= c + 1e-12


def _check_inputs(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, alpha: float, c: float,
                  metric: str) -> None:
    if metric not in METRICS:
        raise InvalidArgument("metric", f"must be one of {list(METRICS)}")
    if not 0 < alpha < 1:
        raise InvalidArgument("alpha", "must be in (0, 1)")
    if metric in RATIO_METRICS and not 0 < c <= 1:
        raise InvalidArgument("c", "a ratio closeness must be in (0, 1]")
    if metric not in RATIO_METRICS and not 0 <= c < 1:
        raise InvalidArgument("c", "a coverage gap must be in [0, 1)")
    if scores.ndim != 2 or labels.shape != (scores.shape[0],) or groups.shape != labels.shape:
        raise ValueError(f"scores {scores.shape}, labels {labels.shape}, groups {groups.shape} do not match")
    if scores.shape[0] == 0:
        raise InvalidArgument("rows", "the calibration set is empty")


def fair_thresholds(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, *, alpha: float, c: float,
                    metric: str = "equal_opportunity", classwise: bool = True) -> FairCalibration:
    """Conformal Fairness thresholds from calibration scores [N, K], integer labels [N] (0..K-1) and integer
    group ids [N] (0..G-1). See the module doc for the algorithm."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    _check_inputs(scores, labels, groups, alpha, c, metric)
    n, n_cls = scores.shape
    n_groups = int(groups.max()) + 1
    true_scores = scores[np.arange(n), labels]
    q_hat = conformal_quantile(true_scores, alpha)
    cand = np.unique(scores[scores >= q_hat])
    cand = np.unique(np.r_[q_hat, cand, 1.0])
    if len(cand) > MAX_CANDIDATES:
        cand = np.unique(np.r_[cand[:: len(cand) // MAX_CANDIDATES + 1], 1.0])

    if metric == "none":
        accept = np.ones((n_cls, len(cand)), dtype=bool)
    elif metric == "overall_acc_equality":
        rows_a, rows_w = [], []
        for g in range(n_groups):
            s = np.sort(true_scores[groups == g])
            if len(s):
                rows_a.append(miscoverage(s, cand))
                rows_w.append(np.full(len(cand), 1.0 / (len(s) + 1)))
        ok = _accepts(metric, c, np.array(rows_a).reshape(-1, len(cand)), np.array(rows_w).reshape(-1, len(cand)))
        accept = np.tile(ok, (n_cls, 1))  # one threshold for all levels
        classwise = False
    else:
        accept = np.ones((n_cls, len(cand)), dtype=bool)  # level 0 is not a positive label
        for k in range(1, n_cls):
            rows_a, rows_w = [], []
            for g in range(n_groups):
                s = np.sort(scores[_filter(metric, labels, groups, k, g), k])
                if len(s):
                    rows_a.append(miscoverage(s, cand))
                    rows_w.append(np.full(len(cand), 1.0 / (len(s) + 1)))
            accept[k] = _accepts(metric, c, np.array(rows_a).reshape(-1, len(cand)),
                                 np.array(rows_w).reshape(-1, len(cand)))
    if not classwise:
        accept = np.tile(accept.all(axis=0), (n_cls, 1))
    satisfied = accept.any(axis=1)
    first = np.argmax(accept, axis=1)
    thresholds = np.where(satisfied, cand[first], 1.0)
    return FairCalibration(q_hat=q_hat, thresholds=thresholds, satisfied=satisfied, n_candidates=len(cand),
                           metric=metric, c=float(c), alpha=float(alpha), n_groups=n_groups)


# ------------------------------------------------------------------------------------------- evaluation
def fairness_report(sets: np.ndarray, labels: np.ndarray, groups: np.ndarray, metric: str,
                    n_groups: int | None = None) -> dict[str, Any]:
    """Coverage and fairness of prediction sets (bool [N, K]) as the official run_conformal_fairness measures them:
    for each positive level k the metric's per-group "coverage" of k; `gap` = max over k of (max_g - min_g) and
    `ratio` = min over k of (min_g / max_g), over the groups with data for k. `violation` is the metric's own
    (ratio for disparate impact, gap otherwise)."""
    metric = "equal_opportunity" if metric == "none" else metric
    sets = np.asarray(sets, dtype=bool)
    labels = np.asarray(labels, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    n, n_cls = sets.shape
    n_groups = int(groups.max()) + 1 if n_groups is None else n_groups
    covered = sets[np.arange(n), labels]
    per: dict[str, list[float | None]] = {}
    gap, ratio = 0.0, 1.0
    levels = [0] if metric == "overall_acc_equality" else list(range(1, n_cls))
    for k in levels:
        covs: list[float | None] = []
        for g in range(n_groups):
            if metric == "overall_acc_equality":
                m = groups == g
                vals = covered[m]
            else:
                m = _filter(metric, labels, groups, k, g)
                vals = sets[m, k]
            covs.append(float(vals.mean()) if m.any() else None)
        per[str(k)] = covs
        got = [v for v in covs if v is not None]
        if len(got) >= 2:
            gap = max(gap, max(got) - min(got))
            ratio = min(ratio, (min(got) / max(got)) if max(got) > 0 else 1.0)
    group_cov = [float(covered[groups == g].mean()) if (groups == g).any() else None for g in range(n_groups)]
    return {"coverage": float(covered.mean()) if n else float("nan"),
            "mean_set_size": float(sets.sum(1).mean()) if n else float("nan"),
            "empty_sets": float((sets.sum(1) == 0).mean()) if n else float("nan"),
            "gap": float(gap), "ratio": float(ratio),
            "violation": float(ratio if metric in RATIO_METRICS else gap),
            "group_coverage": group_cov, "per_level": per}


# ------------------------------------------------------------------------------------------- the served object
class ConformalSeverity:
    """Fair conformal prediction sets over severity levels, on top of a guard's predict_proba output.

    ConformalSeverity.from_registry(tensors, config); .prediction_sets(proba, groups) -> sorted levels per text;
    attributes alpha, metric, c, score_kind, distribution, thresholds [5], q_hat, groups (calibration groups),
    guard_model_version_id."""

    def __init__(self, thresholds: np.ndarray, *, q_hat: float, alpha: float, c: float, metric: str,
                 score_kind: str, distribution: str = "top_topic", groups: Sequence[str] = (),
                 guard_model_version_id: str | None = None, extra: Mapping[str, Any] | None = None):
        th = np.asarray(thresholds, dtype=np.float64).reshape(-1)
        if th.shape != (N_LEVELS,):
            raise FailedPrecondition(f"conformal thresholds have shape {th.shape}, want ({N_LEVELS},)")
        if metric not in METRICS or score_kind not in SCORE_KINDS or distribution not in DISTRIBUTIONS:
            raise FailedPrecondition(f"unknown conformal configuration {metric!r}/{score_kind!r}/{distribution!r}")
        self.thresholds, self.q_hat = th, float(q_hat)
        self.alpha, self.c, self.metric = float(alpha), float(c), metric
        self.score_kind, self.distribution = score_kind, distribution
        self.groups = list(groups)
        self.guard_model_version_id = guard_model_version_id
        self.extra = dict(extra or {})

    @classmethod
    def from_calibration(cls, cal: FairCalibration, *, score_kind: str, distribution: str, groups: Sequence[str],
                         guard_model_version_id: str | None = None, **extra: Any) -> ConformalSeverity:
        return cls(cal.thresholds, q_hat=cal.q_hat, alpha=cal.alpha, c=cal.c, metric=cal.metric,
                   score_kind=score_kind, distribution=distribution, groups=groups,
                   guard_model_version_id=guard_model_version_id,
                   extra={"satisfied": [bool(v) for v in cal.satisfied], **extra})

    def to_registry(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = {"thresholds": torch.tensor(self.thresholds, dtype=torch.float64),
                   "q_hat": torch.tensor([self.q_hat], dtype=torch.float64)}
        config = {**self.extra, "kind": "guard.conformal", "alpha": self.alpha, "c": self.c, "metric": self.metric,
                  "score_kind": self.score_kind, "distribution": self.distribution, "groups": list(self.groups),
                  "guard_model_version_id": self.guard_model_version_id, "levels": list(range(N_LEVELS))}
        return tensors, config

    @classmethod
    def from_registry(cls, tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> ConformalSeverity:
        if config.get("kind", "guard.conformal") != "guard.conformal":
            raise FailedPrecondition(f"model kind {config.get('kind')!r} is not guard.conformal")
        try:
            th = tensors["thresholds"].detach().to(torch.float64).numpy()
            q = float(tensors["q_hat"].reshape(-1)[0]) if "q_hat" in tensors else float(th.min())
            known = {"kind", "alpha", "c", "metric", "score_kind", "distribution", "groups",
                     "guard_model_version_id", "levels"}
            return cls(th, q_hat=q, alpha=config["alpha"], c=config["c"], metric=config["metric"],
                       score_kind=config["score_kind"], distribution=config.get("distribution", "top_topic"),
                       groups=config.get("groups", []), guard_model_version_id=config.get("guard_model_version_id"),
                       extra={k: v for k, v in config.items() if k not in known})
        except KeyError as e:
            raise FailedPrecondition(f"conformal model is missing {e.args[0]!r}") from None

    # -- prediction
    def class_probabilities(self, proba: Mapping[str, np.ndarray]) -> np.ndarray:
        return severity_distribution(proba, self.distribution)

    def scores(self, proba: Mapping[str, np.ndarray]) -> np.ndarray:
        return class_scores(self.class_probabilities(proba), self.score_kind)

    def set_mask(self, proba: Mapping[str, np.ndarray]) -> np.ndarray:
        return prediction_set_mask(self.scores(proba), self.thresholds)

    def prediction_sets(self, proba: Mapping[str, np.ndarray], groups: Sequence[str] | None = None
                        ) -> list[list[int]]:
        """Sorted severity levels in each text's set. `groups` (one per text, or None) is checked for length only:
        the fair thresholds are group-blind, so serving needs no sensitive attribute."""
        mask = self.set_mask(proba)
        if groups is not None and len(groups) != mask.shape[0]:
            raise InvalidArgument("groups", f"expected {mask.shape[0]} groups (one per text), got {len(groups)}")
        return [[int(k) for k in np.flatnonzero(row)] for row in mask]
