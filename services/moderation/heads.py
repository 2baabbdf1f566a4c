"""The guard's linear heads as a model kind that other services work on without importing moderation (issue 38):
the unlearning service certifies deletions from them. SPEC.model_adapters names ADAPTER, and
services.catalog.model_adapter(config) finds it from a version's config. Written here, once, by the service that
trains the heads: which versions are such heads, their training rows and record ids (as the trainer split them),
their labels and frozen features, the decision defaults, and the objective over one flat parameter vector.

The objective ("guard_frozen_linear"), written once, here: the exact regularised objective the guard's trainer
minimises (guard.py's newton_step solves these blocks; `frozen_linear_objective` is this loss) over the frozen
MiniLM features phi, over one flat parameter vector so that a certified noisy minimizer applies to it.

    J(theta) = sum over the 23 blocks B of [ loss_B(theta_B) + l2/2 |theta_B|^2 ]
    unsafe block        all rows, mean BCE(phi . w + b, unsafe)
    topic block t       rows whose topics are known, BCE(phi . w_t + b_t, t in topics) class-balanced: positives and
                        negatives each carry half the weight (uniform weights when a class is absent)
    severity block t    rows with a severity for t, sum over k = 1..4 of BCE(phi . w_t + b_{t,k}, severity >= k),
                        averaged over those rows
Flat order: unsafe_w [1, D], unsafe_b [1], topic_w [11, D], topic_b [11], sev_w [11, D], sev_b [11, 4] (the
guard's tensor names, prefixed "heads.").

Strong convexity: every block with rows carries l2/2 |theta_B|^2, so J is l2-strongly convex (mu = l2) when
l2 > 0. A block with no rows has no data term; its parameters stay at their initial values (zeros; the severity
prior for sev_b): the trainer leaves them there, and J gives them the proximal term l2/2 |theta_B - init_B|^2, which
has that minimizer and keeps J l2-strongly convex in every parameter.
Heads that cannot be strongly convex as trained are refused (FAILED_PRECONDITION): every head when l2 <= 0, and
every head of a "finetune" guard (its top encoder layers were trained with the heads, so phi itself depends on
the data and the objective is not convex).

Descent: damped Newton per block (what the guard's trainer does), with the certified stopping rule of
certified.gd_to_radius on the whole gradient, ||grad J|| <= mu r; the certificate depends only on that rule.
Each Newton direction is solved in the row space (Woodbury: the blocks have far fewer rows than the D = feature_dim
parameters, 1538 for the guard's feature spec v2). Costs: gradient evaluations count the rows of every block per iteration.

Labels as one tensor Y [n, 24]: unsafe (1), topic 0/1 (11), topic_known (1), severity 0..4 or -1 unknown (11).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from services.common.errors import FailedPrecondition, InvalidArgument

if TYPE_CHECKING:
    from services.common.jobcontext import JobContext

KINDS = ("frozen_linear", "finetune")  # the guard's kinds
KIND = "guard_frozen_linear"
N_TOPICS = 11
N_LEVELS = 4
LABEL_DIM = 1 + N_TOPICS + 1 + N_TOPICS
NAMES = ("unsafe_w", "unsafe_b", "topic_w", "topic_b", "sev_w", "sev_b")
DTYPE = torch.float64
# the guard's initial severity biases, P(>= k) = .8, .45, .2, .05 (services/moderation/guard.py _SEV_PRIOR)
_SEV_PRIOR = torch.logit(torch.tensor([0.8, 0.45, 0.2, 0.05], dtype=DTYPE))


def is_guard_config(config: dict) -> bool:
    """A moderation guard version (services/moderation/guard.py's registered format)."""
    return (str(config.get("feature_spec") or "").startswith("minilm-") and config.get("kind") in KINDS
            and "l2" in config and "feature_dim" in config)


def head_names() -> list[str]:
    return ["unsafe"] + [f"topic S{t + 1}" for t in range(N_TOPICS)] + [f"severity S{t + 1}" for t in range(N_TOPICS)]


def check_certifiable(config: dict) -> float:
    """The guard's l2 (its strong convexity), or FAILED_PRECONDITION naming the heads that cannot be certified."""
    kind = config.get("kind")
    if kind == "finetune":
        raise FailedPrecondition(
            "guard kind 'finetune' trained its top encoder layers together with the heads: the features depend on "
            "the data and no head (" + ", ".join(head_names()) + ") is strongly convex as trained; certify a "
            "frozen_linear guard (or use an uncertified method)", reason="NOT_CERTIFIABLE",
            metadata={"kind": "finetune", "heads": "all"})
    if kind != "frozen_linear":
        raise FailedPrecondition(f"unknown guard kind {kind!r}", reason="NOT_CERTIFIABLE")
    l2 = float(config.get("l2") or 0.0)
    if not (math.isfinite(l2) and l2 > 0):
        raise FailedPrecondition(
            "the guard was trained with l2 = 0: none of its heads (" + ", ".join(head_names()) + ") is strongly "
            "convex, so no deletion from it can be certified; retrain it with l2 > 0", reason="NOT_CERTIFIABLE",
            metadata={"kind": "frozen_linear", "heads": "all"})
    return l2


@dataclass(frozen=True)
class GuardHeadsProblem:
    """Same interface as linear.LinearProblem where certified.py uses it (kind, mu, num_params, gradient,
    objective, per_example_loss), over (phi [n, D], Y [n, 24])."""
    mu: float
    dim: int
    kind: str = KIND

    @property
    def sizes(self) -> list[int]:
        d = self.dim
        return [d, 1, N_TOPICS * d, N_TOPICS, N_TOPICS * d, N_TOPICS * N_LEVELS]

    @property
    def num_params(self) -> int:
        return sum(self.sizes)

    @property
    def num_outputs(self) -> int:
        return 1 + 2 * N_TOPICS

    def shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.dim
        return {"unsafe_w": (1, d), "unsafe_b": (1,), "topic_w": (N_TOPICS, d), "topic_b": (N_TOPICS,),
                "sev_w": (N_TOPICS, d), "sev_b": (N_TOPICS, N_LEVELS)}

    def init(self) -> torch.Tensor:
        t = {k: torch.zeros(s, dtype=DTYPE) for k, s in self.shapes().items()}
        t["sev_b"] = _SEV_PRIOR.repeat(N_TOPICS, 1)
        return self.flatten(t)

    def zeros(self) -> torch.Tensor:
        """Where retraining starts: the guard's own initialisation."""
        return self.init()

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        out, i = {}, 0
        for (k, s), size in zip(self.shapes().items(), self.sizes, strict=True):
            out[k] = theta[i:i + size].view(s)
            i += size
        return out

    def flatten(self, t: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([t[k].to(DTYPE).reshape(-1) for k in NAMES])

    def from_tensors(self, tensors: dict[str, torch.Tensor], prefix: str = "heads.") -> torch.Tensor:
        shapes = self.shapes()
        for k, s in shapes.items():
            if prefix + k not in tensors:
                raise FailedPrecondition(f"guard model is missing tensor {prefix}{k}")
            if tuple(tensors[prefix + k].shape) != s:
                raise FailedPrecondition(f"guard tensor {prefix}{k} has shape {tuple(tensors[prefix + k].shape)}, "
                                         f"want {s}")
        return self.flatten({k: tensors[prefix + k] for k in NAMES})

    def to_tensors(self, theta: torch.Tensor, prefix: str = "heads.") -> dict[str, torch.Tensor]:
        return {prefix + k: v.to(DTYPE).contiguous().clone() for k, v in self.unflatten(theta).items()}

    # ---- data -----------------------------------------------------------------------------------
    def check_data(self, X: torch.Tensor, Y: torch.Tensor, field: str = "dataset") -> tuple[torch.Tensor, torch.Tensor]:
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise InvalidArgument(field, f"features must be [n, {self.dim}], got {list(X.shape)}")
        if Y.ndim != 2 or Y.shape != (X.shape[0], LABEL_DIM):
            raise InvalidArgument(field, f"labels must be [n, {LABEL_DIM}]")
        return X.to(DTYPE), Y.to(DTYPE)

    @staticmethod
    def _parts(Y: torch.Tensor):
        yu = Y[:, 0]
        yt = Y[:, 1:1 + N_TOPICS]
        known = Y[:, 1 + N_TOPICS] > 0.5
        sev = Y[:, 2 + N_TOPICS:].round().to(torch.int64)
        return yu, yt, known, sev

    def block_weights(self, Y: torch.Tensor):
        """Per-row weights of each block's loss: unsafe [n], topics [n, 11], severity [n, 11] (per row, summed
        over the 4 levels), and which topic / severity blocks have rows."""
        yu, yt, known, sev = self._parts(Y)
        n = Y.shape[0]
        wu = torch.full((n,), 1.0 / max(n, 1), dtype=DTYPE)
        kn = known.to(DTYPE)[:, None]
        n_pos = (yt * kn).sum(0)
        n_known = kn.sum()
        n_neg = n_known - n_pos
        balanced = torch.where(yt > 0.5, 0.5 / n_pos.clamp_min(1), 0.5 / n_neg.clamp_min(1))
        uniform = torch.full_like(yt, 1.0) / n_known.clamp_min(1)
        one_class = (n_pos == 0) | (n_neg == 0)
        wt = torch.where(one_class[None, :], uniform, balanced) * kn
        has_sev = sev >= 0
        m = has_sev.to(DTYPE).sum(0)
        ws = has_sev.to(DTYPE) / m.clamp_min(1)
        topic_rows = n_known > 0
        return wu, wt, ws, bool(topic_rows), m > 0

    def _terms(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Per-row weighted loss (rows x nothing): the sum over rows is the data part of J."""
        h = self.unflatten(theta)
        yu, yt, known, sev = self._parts(Y)
        wu, wt, ws, _, _ = self.block_weights(Y)
        u = X @ h["unsafe_w"][0] + h["unsafe_b"][0]
        t = X @ h["topic_w"].T + h["topic_b"]
        s = (X @ h["sev_w"].T).unsqueeze(-1) + h["sev_b"]
        lvl = torch.arange(1, N_LEVELS + 1)
        tgt = (sev.unsqueeze(-1) >= lvl).to(DTYPE)
        lu = F.binary_cross_entropy_with_logits(u, yu, reduction="none")
        lt = F.binary_cross_entropy_with_logits(t, yt, reduction="none")
        ls = F.binary_cross_entropy_with_logits(s, tgt, reduction="none").sum(-1)
        return wu * lu + (wt * lt).sum(1) + (ws * ls).sum(1)

    def _regulariser(self, theta: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        _, _, _, topic_rows, sev_rows = self.block_weights(Y)
        h, h0 = self.unflatten(theta), self.unflatten(self.init())
        reg = h["unsafe_w"].pow(2).sum() + h["unsafe_b"].pow(2).sum()
        tw = h["topic_w"].pow(2).sum(1) + h["topic_b"].pow(2)
        if not topic_rows:  # no row has known topics: every topic head is held at its init
            tw = (h["topic_w"] - h0["topic_w"]).pow(2).sum(1) + (h["topic_b"] - h0["topic_b"]).pow(2)
        sw = h["sev_w"].pow(2).sum(1) + h["sev_b"].pow(2).sum(1)
        sw0 = (h["sev_w"] - h0["sev_w"]).pow(2).sum(1) + (h["sev_b"] - h0["sev_b"]).pow(2).sum(1)
        sw = torch.where(sev_rows, sw, sw0)
        return 0.5 * self.mu * (reg + tw.sum() + sw.sum())

    def loss(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """J(theta), differentiable in theta."""
        return self._terms(theta, X, Y).sum() + self._regulariser(theta, Y)

    def objective(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> float:
        return float(self.loss(theta, X, Y))

    def per_example_loss(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Unweighted loss of each row (unsafe BCE + its known topics' BCE + its severity levels' BCE): the
        membership-inference score."""
        h = self.unflatten(theta)
        yu, yt, known, sev = self._parts(Y)
        u = X @ h["unsafe_w"][0] + h["unsafe_b"][0]
        t = X @ h["topic_w"].T + h["topic_b"]
        s = (X @ h["sev_w"].T).unsqueeze(-1) + h["sev_b"]
        tgt = (sev.unsqueeze(-1) >= torch.arange(1, N_LEVELS + 1)).to(DTYPE)
        out = F.binary_cross_entropy_with_logits(u, yu, reduction="none")
        out = out + (F.binary_cross_entropy_with_logits(t, yt, reduction="none") * known.to(DTYPE)[:, None]).sum(1)
        ls = F.binary_cross_entropy_with_logits(s, tgt, reduction="none").sum(-1) * (sev >= 0).to(DTYPE)
        return out + ls.sum(1)

    def gradient(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        th = theta.detach().to(DTYPE).clone().requires_grad_(True)
        J = self.loss(th, X, Y)
        (g,) = torch.autograd.grad(J, th)
        return g

    def utility(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> dict[str, float]:
        if X.shape[0] == 0:
            return {}
        h = self.unflatten(theta)
        u = X.to(DTYPE) @ h["unsafe_w"][0] + h["unsafe_b"][0]
        acc = float(((u > 0).to(DTYPE) == Y[:, 0].to(DTYPE)).to(DTYPE).mean())
        return {"loss": float(self.per_example_loss(theta, X, Y).mean()), "unsafe_accuracy": acc}

    # ---- Newton ---------------------------------------------------------------------------------
    def block_systems(self, theta: torch.Tensor, X: torch.Tensor, Y: torch.Tensor):
        """For every block: (flat parameter indices, design A [m, p], row weights w [m], targets y [m],
        proximal centre or None)."""
        n, d = X.shape
        yu, yt, known, sev = self._parts(Y)
        wu, wt, ws, topic_rows, sev_rows = self.block_weights(Y)
        ones = torch.ones(n, 1, dtype=DTYPE)
        off = {k: sum(self.sizes[:i]) for i, k in enumerate(NAMES)}
        out = []
        idx_u = torch.cat([torch.arange(off["unsafe_w"], off["unsafe_w"] + d), torch.tensor([off["unsafe_b"]])])
        out.append((idx_u, torch.cat([X, ones], 1), wu, yu))
        kn = known.nonzero()[:, 0]
        for t in range(N_TOPICS):
            idx = torch.cat([torch.arange(off["topic_w"] + t * d, off["topic_w"] + (t + 1) * d),
                             torch.tensor([off["topic_b"] + t])])
            if topic_rows:
                out.append((idx, torch.cat([X[kn], ones[kn]], 1), wt[kn, t], yt[kn, t]))
            else:
                out.append((idx, None, None, None))
        for t in range(N_TOPICS):
            idx = torch.cat([torch.arange(off["sev_w"] + t * d, off["sev_w"] + (t + 1) * d),
                             torch.arange(off["sev_b"] + t * N_LEVELS, off["sev_b"] + (t + 1) * N_LEVELS)])
            rows = (sev[:, t] >= 0).nonzero()[:, 0]
            if not bool(sev_rows[t]):
                out.append((idx, None, None, None))
                continue
            m = rows.numel()
            A = torch.zeros(m * N_LEVELS, d + N_LEVELS, dtype=DTYPE)
            yy = torch.zeros(m * N_LEVELS, dtype=DTYPE)
            for k in range(N_LEVELS):
                A[k * m:(k + 1) * m, :d] = X[rows]
                A[k * m:(k + 1) * m, d + k] = 1.0
                yy[k * m:(k + 1) * m] = (sev[rows, t] >= k + 1).to(DTYPE)
            out.append((idx, A, ws[rows, t].repeat(N_LEVELS), yy))
        return out

    def newton_direction(self, theta: torch.Tensor, g: torch.Tensor, systems) -> torch.Tensor:
        """H^-1 g block by block, H_B = A^T diag(w p (1-p)) A + l2 I solved in the row space (Woodbury)."""
        step = torch.empty_like(theta)
        l2 = self.mu
        for idx, A, w, _y in systems:
            gb = g[idx]
            if A is None:  # proximal block: H = l2 I
                step[idx] = gb / l2
                continue
            p = torch.sigmoid(A @ theta[idx])
            dsq = (w * p * (1 - p)).clamp_min(0).sqrt()
            B = A * dsq[:, None]                       # D^1/2 A, [m, p]
            K = B @ B.T
            K.diagonal().add_(l2)
            inner = torch.cholesky_solve((B @ gb)[:, None], torch.linalg.cholesky(K))[:, 0]
            step[idx] = (gb - B.T @ inner) / l2
        return step


# ------------------------------------------------------------------------------------------------ rows and labels
def labels(rows: list) -> torch.Tensor:
    """The rows' labels as one tensor Y [n, 24] (see the layout above)."""
    from services.moderation.guard import Targets

    return label_tensor(Targets.from_examples(rows))


def label_tensor(t) -> torch.Tensor:
    """guard.Targets as one tensor Y [n, 24]."""
    n = len(t.unsafe)
    Y = torch.zeros(n, LABEL_DIM, dtype=DTYPE)
    if n:
        Y[:, 0] = torch.from_numpy(t.unsafe)
        Y[:, 1:12] = torch.from_numpy(t.topic)
        Y[:, 12] = torch.from_numpy(t.topic_known.astype("float64"))
        Y[:, 13:] = torch.from_numpy(t.severity.astype("float64"))
    return Y


def guard_record_ids(blob: bytes, config: dict, field: str = "dataset_artifact_id") -> tuple[list, list[str], list]:
    """(training rows, their record ids, validation rows) of a guard's JSONL dataset, split as the trainer split
    it. Raises FAILED_PRECONDITION when the split does not reproduce the version's n_train."""
    from services.moderation.jobs.data import split_examples
    from services.moderation.schema import parse_guard_jsonl

    try:
        rows = parse_guard_jsonl(blob)
    except InvalidArgument:
        raise FailedPrecondition("the guard's lineage dataset is not a praxon guard JSONL artifact: its records "
                                 "cannot be named") from None
    ids = [r.id if r.id else f"row-{i}" for i, r in enumerate(rows)]
    if len(set(ids)) != len(ids):
        raise FailedPrecondition("the guard's dataset has duplicate row ids: records cannot be named")
    # the trainer's own split (the rows' "split", else the hash-of-text split; the default fraction, checked
    # against the version's n_train below)
    position = {id(r): i for i, r in enumerate(rows)}
    train_rows, val_rows = split_examples(rows, float(config.get("validation_fraction", 0.2)))
    train = [position[id(r)] for r in train_rows]
    val = [position[id(r)] for r in val_rows]
    n_train = config.get("n_train")
    if n_train is not None and int(n_train) != len(train):
        raise FailedPrecondition(f"the guard's dataset yields {len(train)} training rows, but the version was "
                                 f"trained on {n_train}: it cannot be matched record by record")
    return [rows[i] for i in train], [ids[i] for i in train], [rows[i] for i in val]


def features(ctx: JobContext, config: dict, rows: list, lo: float, hi: float) -> torch.Tensor:
    """phi exactly as the guard's trainer computes it (a response with its prompt context, the frozen encoder);
    progress reported between lo and hi."""
    from services.moderation.guard import FEATURE_SPEC
    from services.moderation.jobs.train_guard import example_features

    if config.get("feature_spec") != FEATURE_SPEC:
        raise FailedPrecondition(f"guard feature spec {config.get('feature_spec')!r} is not the encoder's "
                                 f"{FEATURE_SPEC}: its features cannot be recomputed")
    if not rows:
        return torch.zeros(0, int(config["feature_dim"]), dtype=DTYPE)
    return torch.from_numpy(example_features(ctx, rows, lo, hi, "unlearning")).to(DTYPE)


def decision_defaults(tensors: dict, config: dict, phi_val: torch.Tensor, val_rows: list) -> dict:
    """The thresholds the guard's trainer would choose for these heads on its validation rows."""
    from services.moderation.decision import choose_defaults
    from services.moderation.guard import GuardModel, LinearHeads

    heads_only = GuardModel("frozen_linear", LinearHeads.from_tensors(tensors), config, encoder=None)
    pred = heads_only.predict_from_features(phi_val.to(torch.float64).numpy())
    target = float(config["decision_defaults"].get("target_false_block_rate", 0.05))
    return choose_defaults(pred, val_rows, target_false_block_rate=target)


class GuardHeads:
    """The adapter other services receive (catalog.model_adapter): this module's operations under one name."""

    name = KIND
    matches = staticmethod(is_guard_config)
    check_certifiable = staticmethod(check_certifiable)
    head_names = staticmethod(head_names)
    problem = GuardHeadsProblem
    labels = staticmethod(labels)
    records = staticmethod(guard_record_ids)
    features = staticmethod(features)
    decision_defaults = staticmethod(decision_defaults)


ADAPTER = GuardHeads()
