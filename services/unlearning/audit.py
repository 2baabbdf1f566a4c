"""Audits of an unlearning output: membership inference, an empirical epsilon lower bound, utility.

Empirical epsilon (the standard Gaussian-DP recipe; seeds/004):
  1. M outputs of the mechanism "with" (unlearned) and M "without" (retrained); a score per output.
  2. A threshold turns scores into guesses; FP / FN counts; one-sided Clopper-Pearson upper bounds
     FPR_hi, FNR_hi at level alpha / 2 each, so that both hold jointly with probability >= 1 - alpha (a union
     bound; two bounds at alpha each would hold jointly only at 1 - 2 alpha). `alpha` is the joint level and
     the audit reports its confidence 1 - alpha.
  3. mu_lo = Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) (0 if <= 0).
  4. eps_lo solves delta = Phi(-eps/mu_lo + mu_lo/2) - e^eps Phi(-eps/mu_lo - mu_lo/2).
Choosing the score direction and the threshold on the same samples that are then counted would bias the
bound upward, so the runs are split: the first half ("selection") fixes the score direction and the
threshold, the second half ("evaluation") alone gives FP/FN and the confidence bounds.

For the certified mechanisms the pre-noise parameters are a deterministic function of the data (full-batch
GD), so the M runs of each side redraw only the Gaussian output noise, which is the mechanism's only
randomness. The default score is white-box: the projection of the published parameters on the direction
(mean unlearned - mean retrained) estimated on the selection half, which is the likelihood-ratio test
between two Gaussians with the same covariance; an optional black-box score (mean loss on the forget set)
is weaker.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from services.common.errors import InvalidArgument
from services.unlearning import privacy


def auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """P(score_pos > score_neg) + 0.5 P(tie) (the Mann-Whitney AUC)."""
    pos = pos.reshape(-1).to(torch.float64)
    neg = neg.reshape(-1).to(torch.float64)
    if pos.numel() == 0 or neg.numel() == 0:
        raise InvalidArgument("audit", "membership inference needs members and non-members")
    allv = torch.cat([pos, neg])
    order = torch.argsort(allv, stable=True)
    ranks = torch.empty_like(allv)
    ranks[order] = torch.arange(1, allv.numel() + 1, dtype=torch.float64)
    # average ranks over ties
    sorted_v = allv[order]
    uniq, inverse, counts = torch.unique_consecutive(sorted_v, return_inverse=True, return_counts=True)
    csum = torch.cumsum(counts, 0).to(torch.float64)
    avg_rank = csum - (counts.to(torch.float64) - 1) / 2
    ranks[order] = avg_rank[inverse]
    r_pos = ranks[: pos.numel()].sum()
    n1, n0 = pos.numel(), neg.numel()
    return float((r_pos - n1 * (n1 + 1) / 2) / (n1 * n0))


def loss_mia_auc(per_example_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 forget: tuple[torch.Tensor, torch.Tensor], heldout: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Loss-threshold membership inference: members are guessed where the loss is low. AUC of the forget
    set (members of the original training set) against held-out data; 0.5 = indistinguishable."""
    lf = per_example_loss(*forget)
    lh = per_example_loss(*heldout)
    return auc(-lf, -lh)


@dataclass
class EpsilonAudit:
    eps_lower: float
    mu_lower: float
    claimed_epsilon: float | None
    delta: float
    alpha: float
    threshold: float
    false_positives: int
    false_negatives: int
    n_with: int                  # evaluation-half counts
    n_without: int
    fpr_upper: float
    fnr_upper: float
    confidence: float = 0.0      # joint confidence of (fpr_upper, fnr_upper), 1 - alpha
    alpha_each: float = 0.0      # level of each one-sided bound, alpha / 2
    selection: str = "split: score direction and threshold chosen on the first half, counted on the second"
    score: str = "projection"

    @property
    def violated(self) -> bool:
        return self.claimed_epsilon is not None and self.eps_lower > self.claimed_epsilon

    def to_dict(self) -> dict:
        d = asdict(self)
        d["violated"] = self.violated
        return d


def _mu_lower(fpr_hi: torch.Tensor, fnr_hi: torch.Tensor) -> torch.Tensor:
    """mu_lo = Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi), clipped at 0 (vectorised)."""
    nd = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    mu = nd.icdf((1.0 - fpr_hi).clamp(0.0, 1.0)) - nd.icdf(fnr_hi.clamp(0.0, 1.0))
    return torch.nan_to_num(mu, nan=0.0, neginf=0.0, posinf=0.0).clamp_min(0.0)


def epsilon_lower_bound(scores_with: torch.Tensor, scores_without: torch.Tensor, *, delta: float,
                        alpha: float = 0.05, threshold: float | None = None,
                        claimed_epsilon: float | None = None, score: str = "custom",
                        max_candidates: int = 201) -> EpsilonAudit:
    """eps lower bound from scores where larger means "with" (guess "with" when score >= threshold).
    If `threshold` is None it is chosen to maximise the bound on these same samples, which biases the bound
    upward: `split_epsilon_audit` chooses on one half and counts on the other."""
    sw = scores_with.reshape(-1).to(torch.float64)
    so = scores_without.reshape(-1).to(torch.float64)
    n_w, n_o = sw.numel(), so.numel()
    if threshold is not None:
        cands = torch.tensor([float(threshold)], dtype=torch.float64)
    else:
        # candidate thresholds: every pooled score, thinned to at most `max_candidates` quantiles
        cands = torch.unique(torch.cat([sw, so]))
        if cands.numel() > max_candidates:
            cands = cands[torch.linspace(0, cands.numel() - 1, max_candidates).round().long().unique()]
    so_sorted, _ = torch.sort(so)
    sw_sorted, _ = torch.sort(sw)
    fp = n_o - torch.searchsorted(so_sorted, cands, right=False)      # without-scores >= t
    fn = torch.searchsorted(sw_sorted, cands, right=False)            # with-scores < t
    fp_u, fp_inv = torch.unique(fp, return_inverse=True)
    fn_u, fn_inv = torch.unique(fn, return_inverse=True)
    each = alpha / 2.0  # two one-sided bounds, jointly at 1 - alpha
    fpr_hi = privacy.clopper_pearson_upper_table(n_o, each, fp_u)[fp_inv]
    fnr_hi = privacy.clopper_pearson_upper_table(n_w, each, fn_u)[fn_inv]
    mu = _mu_lower(fpr_hi, fnr_hi)
    j = int(torch.argmax(mu))
    mu_j = float(mu[j])
    eps = privacy.gdp_epsilon(delta, mu_j) if mu_j > 0 else 0.0
    return EpsilonAudit(eps_lower=eps, mu_lower=mu_j, claimed_epsilon=claimed_epsilon, delta=delta, alpha=alpha,
                        threshold=float(cands[j]), false_positives=int(fp[j]), false_negatives=int(fn[j]),
                        n_with=n_w, n_without=n_o, fpr_upper=float(fpr_hi[j]), fnr_upper=float(fnr_hi[j]),
                        confidence=1.0 - alpha, alpha_each=each,
                        selection="threshold chosen on the counted samples (biased)" if threshold is None
                        else "fixed threshold", score=score)


def split_epsilon_audit(samples_with: torch.Tensor, samples_without: torch.Tensor, *, delta: float,
                        alpha: float = 0.05, claimed_epsilon: float | None = None) -> EpsilonAudit:
    """Audit from M published parameter vectors per side ([M, P] each). First half: direction
    v = mean(with) - mean(without) and the threshold maximising the bound; second half: counts."""
    m_w, m_o = samples_with.shape[0] // 2, samples_without.shape[0] // 2
    if m_w < 10 or m_o < 10:
        raise InvalidArgument("runs", "need at least 20 runs per side")
    sel_w, ev_w = samples_with[:m_w], samples_with[m_w:]
    sel_o, ev_o = samples_without[:m_o], samples_without[m_o:]
    v = sel_w.mean(0) - sel_o.mean(0)
    v = v / v.norm().clamp_min(1e-300)
    chosen = epsilon_lower_bound(sel_w @ v, sel_o @ v, delta=delta, alpha=alpha)
    out = epsilon_lower_bound(ev_w @ v, ev_o @ v, delta=delta, alpha=alpha, threshold=chosen.threshold,
                              claimed_epsilon=claimed_epsilon, score="projection")
    out.selection = "split: score direction and threshold chosen on the first half, counted on the second"
    return out


def split_threshold_audit(scores_with: torch.Tensor, scores_without: torch.Tensor, *, delta: float,
                          alpha: float = 0.05, claimed_epsilon: float | None = None,
                          score: str = "final-model canary coordinate") -> EpsilonAudit:
    """Audit from scalar scores whose direction is known (larger = "with"): the threshold is chosen on the
    first half of each side, FP / FN counted on the second half only."""
    sw, so = scores_with.reshape(-1), scores_without.reshape(-1)
    m_w, m_o = sw.numel() // 2, so.numel() // 2
    if m_w < 10 or m_o < 10:
        raise InvalidArgument("runs", "need at least 20 runs per side")
    chosen = epsilon_lower_bound(sw[:m_w], so[:m_o], delta=delta, alpha=alpha)
    out = epsilon_lower_bound(sw[m_w:], so[m_o:], delta=delta, alpha=alpha, threshold=chosen.threshold,
                              claimed_epsilon=claimed_epsilon, score=score)
    out.selection = "split: threshold chosen on the first half, counted on the second"
    return out


def audit_gaussian_outputs(theta_with: torch.Tensor, theta_without: torch.Tensor, sigma: float, *, runs: int,
                           delta: float, seed: int, alpha: float = 0.05,
                           claimed_epsilon: float | None = None) -> EpsilonAudit:
    """Empirical epsilon of "publish theta + N(0, sigma^2 I)" with theta the unlearned (with) vs the
    retrained (without) pre-noise parameters, over `runs` noise draws per side."""
    g = torch.Generator()
    g.manual_seed(int(seed))
    p = theta_with.numel()
    w = theta_with.reshape(1, -1).to(torch.float64) + sigma * torch.randn(runs, p, generator=g, dtype=torch.float64)
    o = theta_without.reshape(1, -1).to(torch.float64) + sigma * torch.randn(runs, p, generator=g, dtype=torch.float64)
    return split_epsilon_audit(w, o, delta=delta, alpha=alpha, claimed_epsilon=claimed_epsilon)


def utility_gap(unlearned: dict[str, float], retrained: dict[str, float]) -> dict[str, float]:
    """unlearned - retrained for each shared metric (accuracy points are fractions: 0.01 = 1 point)."""
    return {k: unlearned[k] - retrained[k] for k in unlearned if k in retrained}
