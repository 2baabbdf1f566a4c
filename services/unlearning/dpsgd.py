"""DP-SGD through Opacus, and its audit in the hidden-state threat model (Cebere, Bellet & Papernot, ICLR 2025).

Training (`train_dpsgd`): softmax regression over features, trained by DP-SGD as Opacus implements it:
per-sample gradients from `GradSampleModule`, clipping to C = max_grad_norm, Gaussian noise N(0, (sigma C)^2) on
the summed clipped gradients and division by the expected batch size q n in `DPOptimizer`, plain SGD for T steps
with Poisson sampling at rate q (each record in each step's batch independently with probability q). The batch
selection is done here (a Bernoulli mask per step) rather than by Opacus's DataLoader, so that the audit can run
hundreds of tiny trainings without DataLoader overhead; the mechanism is the same. The accountant is Opacus's
(PRV by default, RDP on request) for (sigma, q, T) at the job's delta.
In a training job the noise and the batch sampling come from a generator seeded from the OS CSPRNG (a public seed
would let anyone replay them, as the certified mechanism's issue showed); no job parameter seeds them. The
initialisation is zeros: the model starts at a point everyone knows, which the hidden-state threat model assumes.

Audit (`hidden_state_canary_audit`): the adversary crafts the gradient of a canary record: at every k-th step the
canary, when Poisson-sampled (probability q, as any record), contributes the gradient C e_j (norm C, so clipping
leaves it intact) on one coordinate j of the parameters, added to the summed clipped gradients before the noise.
The adversary sees only the final model: the score of a run is -(theta_T[j] - theta_0[j]) (the canary's
gradient pushes theta_j down by lr C / (q n) per insertion). j is the coordinate least updated by the real data
(the smallest accumulated |sum of clipped gradients| in a reference run without noise or canary), where the canary
stands out most. M runs with the canary and M without; the first half of each side fixes the threshold, the
second half alone gives FP / FN, and the Gaussian-DP recipe of audit.py turns them into an epsilon lower bound at
joint confidence 1 - alpha (each one-sided Clopper-Pearson bound at alpha / 2). It is printed beside the
accountant's epsilon for the same (sigma, q, T, delta).
With k = 1 and q = 1 the final coordinate is theta_0[j] - lr/(n) (T C + noise of std sqrt(T) sigma C): exactly
the T-fold composition of the Gaussian mechanism, so the bound approaches the accountant's epsilon as M grows
(hiding the intermediate models does not help, the paper's first result). With k > 1 only T/k insertions
accumulate against the same noise and the bound stays below the accountant's (the gap the paper reports for
non-adversarial loss landscapes). The adversary of the paper may also choose the loss landscape; here the other
records' gradients are those of the real data on the audited model (simplification: no crafted landscape).
"""
from __future__ import annotations

import functools
import math
import os
import warnings
from dataclasses import asdict, dataclass, field

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning import audit

DTYPE = torch.float32


@dataclass(frozen=True)
class DpSgdConfig:
    noise_multiplier: float
    max_grad_norm: float
    steps: int
    sample_rate: float
    lr: float
    delta: float
    accountant: str = "prv"

    def validate(self) -> None:
        if not self.noise_multiplier > 0:
            raise InvalidArgument("dpsgd.noise_multiplier", "must be > 0")
        if not self.max_grad_norm > 0:
            raise InvalidArgument("dpsgd.max_grad_norm", "must be > 0")
        if not self.steps > 0:
            raise InvalidArgument("dpsgd.steps", "must be > 0")
        if not 0 < self.sample_rate <= 1:
            raise InvalidArgument("dpsgd.sample_rate", "must be in (0, 1]")
        if not 0 < self.delta < 1:
            raise InvalidArgument("delta", "must be in (0, 1)")

    def to_dict(self) -> dict:
        return asdict(self)


def accountant_epsilon(cfg: DpSgdConfig) -> float:
    """Opacus's accountant: epsilon of T steps of the Poisson-subsampled Gaussian mechanism at cfg.delta."""
    return _accountant_epsilon(cfg.accountant, float(cfg.noise_multiplier), float(cfg.sample_rate), int(cfg.steps),
                               float(cfg.delta))


@functools.lru_cache(maxsize=256)
def _accountant_epsilon(kind: str, sigma: float, q: float, steps: int, delta: float) -> float:
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = PRVAccountant() if kind == "prv" else RDPAccountant()
    acc.history = [(sigma, q, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # PRV at q = 1 takes log(0) on a branch it discards
        return float(acc.get_epsilon(delta=delta))


@dataclass
class Canary:
    """The crafted gradient: C e_j on flat parameter `coordinate`, inserted at steps t with t % every == 0."""
    coordinate: int
    every: int = 1


@dataclass
class DpSgdResult:
    weight: torch.Tensor          # [C, D]
    bias: torch.Tensor            # [C]
    steps: int
    batch_sizes: list[int] = field(default_factory=list)
    canary_insertions: int = 0
    state: dict | None = field(default=None, repr=False)  # what `resume=` continues from (private: the generator)


def _secret_generator() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))


def train_dpsgd(X: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: DpSgdConfig, *,
                generator: torch.Generator | None = None, canary: Canary | None = None,
                noise_scale: float = 1.0, resume: dict | None = None, max_iters: int | None = None) -> DpSgdResult:
    """DP-SGD (Opacus GradSampleModule + DPOptimizer) from zero weights. `generator` drives the batch sampling
    and the noise: None means a secret one (training jobs); the audit passes seeded ones so its runs are
    reproducible. `noise_scale` exists only to build a deliberately broken mechanism for the audit's mutation
    test. Resumable in chunks: with `max_iters` it stops after that many more steps (result.steps says how many
    are done); result.state holds the weights, the step and the generator's state, and `resume=state` continues
    from it exactly (a secret generator's state is private: keep it only in the private checkpoint)."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    cfg.validate()
    n, d = X.shape
    if n == 0:
        raise InvalidArgument("dataset_artifact_id", "no records to train on")
    gen = generator if generator is not None else _secret_generator()
    lin = torch.nn.Linear(d, num_classes).to(DTYPE)
    start = 0
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
        if resume is not None:
            lin.weight.copy_(resume["weight"])
            lin.bias.copy_(resume["bias"])
            gen.set_state(resume["generator"].to(torch.uint8))
            start = int(resume["step"])
    model = GradSampleModule(lin, loss_reduction="sum")  # the loss below is summed: no rescaling by batch size
    expected = max(cfg.sample_rate * n, 1e-12)
    opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=cfg.lr), noise_multiplier=cfg.noise_multiplier * noise_scale,
                      max_grad_norm=cfg.max_grad_norm, expected_batch_size=1, loss_reduction="sum",
                      generator=gen)
    params = [lin.weight, lin.bias]
    sizes = [p.numel() for p in params]
    X = X.to(DTYPE)
    y = y.to(torch.int64)
    insertions = int((resume or {}).get("insertions", 0))
    batch_sizes = [int(v) for v in (resume or {}).get("batch_sizes", [])]

    if canary is not None:
        if not 0 <= canary.coordinate < sum(sizes):
            raise InvalidArgument("canary.coordinate", "outside the parameters")
        orig = opt.clip_and_accumulate
        state = {"insert": False}

        def clip_and_accumulate_with_canary() -> None:
            orig()
            if state["insert"]:
                j = canary.coordinate
                for p, size in zip(params, sizes, strict=True):
                    if j < size:
                        p.summed_grad.view(-1)[j] += cfg.max_grad_norm
                        break
                    j -= size

        opt.clip_and_accumulate = clip_and_accumulate_with_canary

    stop = cfg.steps if max_iters is None else min(cfg.steps, start + max_iters)
    for t in range(start, stop):
        mask = torch.rand(n, generator=gen) < cfg.sample_rate
        idx = mask.nonzero()[:, 0]
        batch_sizes.append(int(idx.numel()))
        opt.zero_grad(set_to_none=True)
        if canary is not None:
            insert = t % canary.every == 0 and bool(torch.rand((), generator=gen) < cfg.sample_rate)
            state["insert"] = insert
            insertions += int(insert)
        if idx.numel() == 0:
            for p in params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)
        else:
            loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx], reduction="sum")
            with warnings.catch_warnings():
                # Opacus's hooks on a first layer whose input needs no gradient: expected, harmless
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                loss.backward()
        opt.pre_step()
        # DPOptimizer divided by expected_batch_size = 1 (so that an empty batch is handled the same way):
        # the average over the expected batch q n is taken here, then the plain SGD step
        with torch.no_grad():
            for p in params:
                p.grad.div_(expected)
        opt.original_optimizer.step()
    state = {"weight": lin.weight.detach().clone(), "bias": lin.bias.detach().clone(), "step": max(start, stop),
             "generator": gen.get_state().clone(), "insertions": insertions, "batch_sizes": list(batch_sizes)}
    return DpSgdResult(weight=state["weight"], bias=state["bias"], steps=state["step"], batch_sizes=batch_sizes,
                       canary_insertions=insertions, state=state)


def flat(res: DpSgdResult) -> torch.Tensor:
    return torch.cat([res.weight.reshape(-1), res.bias.reshape(-1)]).to(torch.float64)


def least_updated_coordinate(X: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: DpSgdConfig) -> int:
    """The flat coordinate the real data moves least: a reference run with every record in every batch, no noise
    and no canary, accumulating |sum of clipped per-sample gradients| per coordinate along the trajectory."""
    n, d = X.shape
    W = torch.zeros(num_classes, d, dtype=torch.float64)
    b = torch.zeros(num_classes, dtype=torch.float64)
    Xd = X.to(torch.float64)
    onehot = torch.nn.functional.one_hot(y.to(torch.int64), num_classes).to(torch.float64)
    total = torch.zeros(num_classes * (d + 1), dtype=torch.float64)
    for _ in range(min(cfg.steps, 200)):
        R = torch.softmax(Xd @ W.T + b, dim=1) - onehot                        # [n, C]
        g = torch.cat([(R[:, :, None] * Xd[:, None, :]).reshape(n, -1), R], dim=1)  # per-sample, flat
        norms = g.norm(dim=1, keepdim=True)
        g = g * (cfg.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        s = g.sum(0)
        total += s.abs()
        step = cfg.lr * s / max(cfg.sample_rate * n, 1e-12)
        W = W - step[: num_classes * d].view(num_classes, d)
        b = b - step[num_classes * d:]
    return int(torch.argmin(total))


@dataclass
class CanaryAudit:
    method: str
    canary_every: int
    runs: int                         # per side
    coordinate: int
    accountant: str
    accountant_epsilon: float         # the upper bound
    epsilon_audit: dict               # audit.EpsilonAudit.to_dict() (eps_lower, confidence, counts ...)
    config: dict
    noise_scale: float = 1.0
    mean_insertions: float = 0.0

    @property
    def eps_lower(self) -> float:
        return float(self.epsilon_audit["eps_lower"])

    @property
    def ratio(self) -> float:
        return self.eps_lower / self.accountant_epsilon if self.accountant_epsilon > 0 else math.inf

    def to_dict(self) -> dict:
        d = asdict(self)
        d["eps_lower"] = self.eps_lower
        d["ratio"] = self.ratio
        return d


def check_canary_audit(cfg: DpSgdConfig, runs: int, canary_every: int, alpha: float) -> None:
    """The audit's parameter checks, made before any run."""
    if runs < 20:
        raise InvalidArgument("runs", "need at least 20 runs per side")
    if canary_every < 1 or canary_every > cfg.steps:
        raise InvalidArgument("canary_every", f"must be in 1..{cfg.steps} (the number of steps)")
    if not 0 < alpha < 1:
        raise InvalidArgument("alpha", "must be in (0, 1)")
    cfg.validate()


def canary_run(X: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: DpSgdConfig, *, canary_every: int,
               seed: int, noise_scale: float, coordinate: int, i: int) -> tuple[float, float, int]:
    """Run pair i of the audit: (score with the canary, score without, canary insertions). Each side has its own
    seeded generator, so a pair is the same whenever it runs (a resumed audit repeats nothing it kept)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of tiny trainings: threading only adds overhead
    try:
        out = {}
        for side in ("with", "without"):
            g = torch.Generator().manual_seed((int(seed) * 1_000_003 + 2 * i + (side == "with")) & ((1 << 63) - 1))
            out[side] = train_dpsgd(X, y, num_classes, cfg, generator=g, noise_scale=noise_scale,
                                    canary=Canary(coordinate, canary_every) if side == "with" else None)
    finally:
        torch.set_num_threads(threads)
    # theta_0 = 0: the score is the canary coordinate's move
    return -float(flat(out["with"])[coordinate]), -float(flat(out["without"])[coordinate]), \
        out["with"].canary_insertions


def hidden_state_canary_audit(X: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: DpSgdConfig, *,
                              runs: int, canary_every: int = 1, alpha: float = 0.05, seed: int = 0,
                              noise_scale: float = 1.0, coordinate: int | None = None) -> CanaryAudit:
    """The hidden-state audit of DP-SGD with a crafted-gradient canary (module docstring): `runs` trainings per
    side (canary_run), then canary_audit_result. `noise_scale` < 1 audits a broken mechanism against the claimed
    (unbroken) accountant epsilon. The audit job runs the same pieces as steps (dpsgd_jobs.CanaryAuditSteps)."""
    check_canary_audit(cfg, runs, canary_every, alpha)
    j = least_updated_coordinate(X, y, num_classes, cfg) if coordinate is None else int(coordinate)
    scores: dict[str, list] = {"with": [], "without": [], "insertions": []}
    for i in range(runs):
        for k, v in zip(("with", "without", "insertions"),
                        canary_run(X, y, num_classes, cfg, canary_every=canary_every, seed=seed,
                                   noise_scale=noise_scale, coordinate=j, i=i), strict=True):
            scores[k].append(v)
    return canary_audit_result(cfg, scores, runs=runs, canary_every=canary_every, alpha=alpha, coordinate=j,
                               noise_scale=noise_scale)


def canary_audit_result(cfg: DpSgdConfig, scores: dict[str, list], *, runs: int, canary_every: int, alpha: float,
                        coordinate: int, noise_scale: float = 1.0) -> CanaryAudit:
    """The audit's verdict from the scores of its runs ({"with", "without", "insertions"}: a list each)."""
    eps_acc = accountant_epsilon(cfg)
    j, inserted = coordinate, scores["insertions"]
    sw = torch.tensor(scores["with"], dtype=torch.float64)
    so = torch.tensor(scores["without"], dtype=torch.float64)
    ea = audit.split_threshold_audit(sw, so, delta=cfg.delta, alpha=alpha, claimed_epsilon=eps_acc)
    if not math.isfinite(eps_acc):
        raise FailedPrecondition("the accountant returned no finite epsilon for this configuration")
    return CanaryAudit(method="hidden_state_canary", canary_every=canary_every, runs=runs, coordinate=j,
                       accountant=cfg.accountant, accountant_epsilon=eps_acc, epsilon_audit=ea.to_dict(),
                       config=cfg.to_dict(), noise_scale=noise_scale,
                       mean_insertions=float(sum(inserted) / max(len(inserted), 1)))
