"""The guard model: a MiniLM sentence encoder with linear heads for BingoGuard-style moderation.

Features (spec FEATURE_SPEC, v2): e = mean-pooled, L2-normalised MiniLM embedding of the text (384); r = 1 for the
"response" role, 0 for "prompt"; c = the embedding of the prompt a response answers (BingoGuard judges a response
together with its prompt), zero when there is none (and for prompts); h = 1 when c is present.

    phi(text, role, context) = [e, r * e, r, c, c * e, h]          (FEATURE_DIM = 4 * 384 + 2 = 1538)

One set of linear heads over phi therefore has a shared part, a response-specific part and a context part: the
elementwise product c * e lets a response's verdict depend on what was asked ("Sure, here is how" after a weapon
request vs after a cooking question). All heads are plain logistic outputs over phi (float64):

    unsafe       P(unsafe)            = sigmoid(phi . unsafe_w[0] + unsafe_b[0])
    topics       P(topic t)           = sigmoid(phi . topic_w[t] + topic_b[t])          t = S1..S11 (multi-label)
    severity     P(severity_t >= k)   = sigmoid(phi . sev_w[t] + sev_b[t, k-1])          k = 1..4
                 (a slope shared across k, one bias per k: four binary "severity >= k" logits per topic). The
                 reported P(>= k) is the running minimum over k, so it is non-increasing in k by construction, and
                 the predicted level is #{k : P(>= k) >= 0.5} -- a threshold at level k blocks every level >= k.

Registered format (stable; other services read it): tensors "heads.unsafe_w" [1, D], "heads.unsafe_b" [1],
"heads.topic_w" [11, D], "heads.topic_b" [11], "heads.sev_w" [11, D], "heads.sev_b" [11, 4] (float64), plus
"encoder.<parameter>" for the fine-tuned encoder layers of kind "finetune"; config keys "kind", "feature_spec",
"feature_dim", "topics", "encoder" {name, sha256, max_tokens}, "l2", and "decision_defaults" {unsafe_threshold,
topic_threshold, default_level, target_false_block_rate, ...} (the defaults chosen on validation, decision.py).

Kinds:
  "frozen_linear"  encoder frozen (the packaged model, identified by its sha256); heads fitted by Newton's method
                   to the exact minimum of the strongly convex objective `frozen_linear_objective` (L2 strength
                   `l2`). This is what the unlearning service can certify deletions against: it needs
                   `features(texts, roles)`, `linear_heads()` and `frozen_linear_objective` -- nothing else.
  "finetune"       the top `trainable_layers` encoder layers are trained together with the same heads (AdamW,
                   warm-started from the frozen_linear solution). Not certifiable; usually more accurate.

API for other engineers (conformal calibration, HarmAug distillation):
  GuardModel.features(texts, roles, contexts=None) -> float64 [N, 1538]
  GuardModel.predict_proba(texts, roles) -> {"unsafe": [N], "topics": [N, 11], "severity_ge": [N, 11, 4],
                                            "severity": int [N, 11]}
  GuardModel.predict_from_features(phi) -> the same dict from precomputed features
  GuardModel.logits_from_features(phi) -> raw logits (torch, differentiable) for distillation losses
"""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.minilm import (
    EMBED_DIM,
    ENCODER_NAME,
    MiniLMEncoder,
    get_base_encoder,
)
from services.moderation.schema import GuardExample
from services.moderation.taxonomy import (
    MAX_SEVERITY,
    N_TOPICS,
    ROLES,
    TOPIC_INDEX,
    TOPICS,
)

FEATURE_SPEC = "minilm-l6-mean-l2norm+role-interaction+prompt-context/v2"
FEATURE_DIM = 4 * EMBED_DIM + 2
N_LEVELS = MAX_SEVERITY  # the four "severity >= k" logits, k = 1..4
KINDS = ("frozen_linear", "finetune")
# Severity biases of a topic with no severity labels at all: P(>=k) = .8, .45, .2, .05 (predicts level 1).
_SEV_PRIOR = np.log(np.array([0.8, 0.45, 0.2, 0.05]) / (1 - np.array([0.8, 0.45, 0.2, 0.05])))


def validate_roles(roles: Sequence[str], n: int, field: str = "roles") -> np.ndarray:
    if len(roles) != n:
        raise InvalidArgument(field, f"expected {n} roles, got {len(roles)}")
    r = np.empty(n, dtype=np.float64)
    for i, role in enumerate(roles):
        if role not in ROLES:
            raise InvalidArgument(f"{field}[{i}]", f"must be one of {list(ROLES)}")
        r[i] = 1.0 if role == "response" else 0.0
    return r


def role_features(emb: np.ndarray, roles: Sequence[str], context_emb: np.ndarray | None = None,
                  has_context: Sequence[bool] | np.ndarray | None = None) -> np.ndarray:
    """phi = [e, r*e, r, c, c*e, h] in float64 from embeddings [N, 384], roles and (optionally) the embeddings
    [N, 384] of each row's prompt context with a mask of the rows that have one (rows without: c = 0, h = 0)."""
    r = validate_roles(roles, emb.shape[0])[:, None]
    e = emb.astype(np.float64)
    n = e.shape[0]
    c = np.zeros_like(e)
    h = np.zeros((n, 1))
    if context_emb is not None:
        mask = np.ones(n, dtype=bool) if has_context is None else np.asarray(has_context, dtype=bool)
        c[mask] = context_emb.astype(np.float64)[mask]
        h[mask, 0] = 1.0
    return np.concatenate([e, r * e, r, c, c * e, h], axis=1)


def context_mask(roles: Sequence[str], contexts: Sequence[str | None] | None, field: str = "contexts") -> np.ndarray:
    """Rows that carry a prompt context (responses only; a prompt's context is an error)."""
    n = len(roles)
    if contexts is None:
        return np.zeros(n, dtype=bool)
    if len(contexts) != n:
        raise InvalidArgument(field, f"expected {n} contexts, got {len(contexts)}")
    out = np.zeros(n, dtype=bool)
    for i, (role, c) in enumerate(zip(roles, contexts, strict=False)):
        if c is None:
            continue
        if not isinstance(c, str) or not c.strip():
            raise InvalidArgument(f"{field}[{i}]", "a prompt context must be a non-empty text")
        if role != "response":
            raise InvalidArgument(f"{field}[{i}]", "only a response is judged with a prompt as context")
        out[i] = True
    return out


# ------------------------------------------------------------------------------------------------ heads
@dataclass
class LinearHeads:
    """Weights of the linear heads (float64 torch tensors; D = FEATURE_DIM)."""

    unsafe_w: torch.Tensor  # [1, D]
    unsafe_b: torch.Tensor  # [1]
    topic_w: torch.Tensor   # [11, D]
    topic_b: torch.Tensor   # [11]
    sev_w: torch.Tensor     # [11, D]
    sev_b: torch.Tensor     # [11, 4]

    NAMES = ("unsafe_w", "unsafe_b", "topic_w", "topic_b", "sev_w", "sev_b")

    @classmethod
    def init(cls, dim: int = FEATURE_DIM) -> LinearHeads:
        def z(*s):
            return torch.zeros(*s, dtype=torch.float64)
        return cls(z(1, dim), z(1), z(N_TOPICS, dim), z(N_TOPICS), z(N_TOPICS, dim),
                   torch.tensor(np.tile(_SEV_PRIOR, (N_TOPICS, 1)), dtype=torch.float64))

    def tensors(self, prefix: str = "heads.") -> dict[str, torch.Tensor]:
        return {prefix + k: getattr(self, k) for k in self.NAMES}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor], prefix: str = "heads.") -> LinearHeads:
        try:
            h = cls(**{k: t[prefix + k].detach().to(torch.float64).clone() for k in cls.NAMES})
        except KeyError as e:
            raise FailedPrecondition(f"guard model is missing tensor {e.args[0]}") from None
        d = h.unsafe_w.shape[1]
        shapes = {"unsafe_w": (1, d), "unsafe_b": (1,), "topic_w": (N_TOPICS, d), "topic_b": (N_TOPICS,),
                  "sev_w": (N_TOPICS, d), "sev_b": (N_TOPICS, N_LEVELS)}
        for k, s in shapes.items():
            if tuple(getattr(h, k).shape) != s:
                raise FailedPrecondition(f"guard tensor {prefix}{k} has shape {tuple(getattr(h, k).shape)}, want {s}")
        return h

    def clone(self) -> LinearHeads:
        return LinearHeads(**{k: getattr(self, k).detach().clone() for k in self.NAMES})

    def logits(self, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unsafe [N], topics [N, 11], severity_ge [N, 11, 4]) logits; differentiable in phi and the heads."""
        u = phi @ self.unsafe_w[0] + self.unsafe_b[0]
        t = phi @ self.topic_w.T + self.topic_b
        s = (phi @ self.sev_w.T).unsqueeze(-1) + self.sev_b
        return u, t, s


def probabilities(u: torch.Tensor, t: torch.Tensor, s: torch.Tensor) -> dict[str, np.ndarray]:
    sev_ge = torch.cummin(torch.sigmoid(s), dim=-1).values
    return {"unsafe": torch.sigmoid(u).numpy(), "topics": torch.sigmoid(t).numpy(), "severity_ge": sev_ge.numpy(),
            "severity": (sev_ge >= 0.5).sum(-1).numpy().astype(np.int64)}


# ------------------------------------------------------------------------------------------------ targets
@dataclass
class Targets:
    unsafe: np.ndarray      # [N] 0/1
    topic: np.ndarray       # [N, 11] 0/1
    topic_known: np.ndarray  # [N] bool
    severity: np.ndarray    # [N, 11] int, -1 = not applicable / unknown

    @classmethod
    def from_examples(cls, rows: Sequence[GuardExample]) -> Targets:
        n = len(rows)   # soft labels (a teacher's probabilities, schema.GuardExample) replace the hard ones
        y_u = np.array([float(r.unsafe) if r.unsafe_p is None else r.unsafe_p for r in rows])
        y_t = np.zeros((n, N_TOPICS))
        known = np.array([r.topics_known or r.topic_p is not None for r in rows], dtype=bool)
        sev = -np.ones((n, N_TOPICS), dtype=np.int64)
        for i, r in enumerate(rows):
            for t in r.topics:
                y_t[i, TOPIC_INDEX[t]] = 1.0
            if r.topic_p is not None:
                y_t[i] = 0.0
                for t, v in r.topic_p.items():
                    y_t[i, TOPIC_INDEX[t]] = v
            for t, v in r.severity.items():
                sev[i, TOPIC_INDEX[t]] = v
        return cls(y_u, y_t, known, sev)

    def subset(self, idx: np.ndarray) -> Targets:
        return Targets(self.unsafe[idx], self.topic[idx], self.topic_known[idx], self.severity[idx])


def _logistic_obj(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, w: torch.Tensor, l2: float) -> float:
    z = X @ theta
    return float(w @ (torch.nn.functional.softplus(z) - y * z) + 0.5 * l2 * theta @ theta)


def newton_block_step(theta: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float
                      ) -> tuple[np.ndarray, float]:
    """One damped Newton step (Armijo backtracking) on sum_r w_r BCE(X_r.theta, y_r) + l2/2 |theta|^2.
    Returns (theta', max |gradient| at theta). Linear algebra in torch float64 (respects torch's thread count)."""
    th, Xt, yt, wt = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)) for a in (theta, X, y, w))
    p = torch.sigmoid(Xt @ th)
    g = Xt.T @ (wt * (p - yt)) + l2 * th
    gnorm = float(g.abs().max())
    if gnorm < 1e-12:
        return theta, gnorm
    H = (Xt * (wt * p * (1 - p))[:, None]).T @ Xt
    H.diagonal().add_(l2)
    step = torch.cholesky_solve(g[:, None], torch.linalg.cholesky(H))[:, 0]
    f0 = _logistic_obj(th, Xt, yt, wt, l2)
    a = 1.0
    while a > 1e-8:
        cand = th - a * step
        if _logistic_obj(cand, Xt, yt, wt, l2) <= f0 - 1e-4 * a * float(g @ step):
            return cand.numpy(), gnorm
        a *= 0.5
    return theta, gnorm


def heads_problem(heads: LinearHeads, l2: float):
    """The heads' objective as written once, over one flat parameter vector (services/moderation/heads.py, the
    model adapter the unlearning service certifies deletions with): (problem, theta)."""
    from services.moderation.heads import GuardHeadsProblem

    problem = GuardHeadsProblem(mu=float(l2), dim=int(heads.unsafe_w.shape[1]))
    return problem, problem.flatten({k: getattr(heads, k) for k in LinearHeads.NAMES})


def newton_step(heads: LinearHeads, phi: np.ndarray, y: Targets, l2: float) -> tuple[LinearHeads, float]:
    """One Newton iteration on every block of the heads' objective (heads.GuardHeadsProblem's blocks: each an
    independent weighted logistic model with its biases; a block with no rows keeps its initial values).
    Returns (new heads, max |grad| before)."""
    from services.moderation.heads import label_tensor

    problem, theta = heads_problem(heads, l2)
    X = torch.from_numpy(np.ascontiguousarray(phi, dtype=np.float64))
    out, gmax = theta.clone(), 0.0
    for idx, A, w, yy in problem.block_systems(theta, X, label_tensor(y)):
        if A is None:
            continue
        block, g = newton_block_step(theta[idx].numpy(), A.numpy(), yy.numpy(), w.numpy(), l2)
        out[idx] = torch.from_numpy(block)
        gmax = max(gmax, g)
    return LinearHeads.from_tensors(problem.to_tensors(out)), gmax


def frozen_linear_objective(heads: LinearHeads, phi: torch.Tensor, y: Targets, l2: float) -> torch.Tensor:
    """The exact objective the frozen_linear heads minimise, differentiable in the head tensors: heads.py's
    GuardHeadsProblem (written once there; its docstring states J block by block)."""
    from services.moderation.heads import label_tensor

    problem, theta = heads_problem(heads, l2)
    return problem.loss(theta, torch.as_tensor(phi, dtype=torch.float64), label_tensor(y))


def fit_frozen_linear(phi: np.ndarray, y: Targets, l2: float, *, max_iter: int = 50, tol: float = 1e-8,
                      heads: LinearHeads | None = None,
                      on_iter: Callable[[int, LinearHeads, float], None] | None = None) -> LinearHeads:
    """Newton's method to the minimum (max |grad| < tol). `on_iter(i, heads, grad)` after each iteration."""
    h = heads or LinearHeads.init(phi.shape[1])
    for i in range(max_iter):
        h, g = newton_step(h, phi, y, l2)
        if on_iter:
            on_iter(i, h, g)
        if g < tol:
            break
    return h


# ------------------------------------------------------------------------------------------------ the model
class GuardModel:
    """A trained guard. Construct with `from_registry(tensors, config)` or the training functions below."""

    def __init__(self, kind: str, heads: LinearHeads, config: dict[str, Any], encoder: MiniLMEncoder,
                 *, encoder_tensors: dict[str, torch.Tensor] | None = None, version: str | None = None):
        if kind not in KINDS:
            raise InvalidArgument("kind", f"must be one of {list(KINDS)}")
        self.kind, self.heads, self.config, self.encoder = kind, heads, dict(config), encoder
        self.encoder_tensors = dict(encoder_tensors or {})
        self.version = version or self.fingerprint()

    # -- identity and storage
    def fingerprint(self) -> str:
        h = hashlib.sha256(self.kind.encode())
        for k, v in sorted({**self.heads.tensors(), **self.encoder_tensors}.items()):
            h.update(k.encode())
            h.update(v.detach().contiguous().numpy().tobytes())
        return "sha256:" + h.hexdigest()[:16]

    def to_registry(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(tensors, config) for ctx.register_model(name, tensors, kind=self.kind, config=config)."""
        tensors = {**self.heads.tensors(), **{"encoder." + k: v for k, v in self.encoder_tensors.items()}}
        return tensors, dict(self.config)

    @classmethod
    def from_registry(cls, tensors: dict[str, torch.Tensor], config: dict[str, Any],
                      *, version: str | None = None, base: MiniLMEncoder | None = None) -> GuardModel:
        kind = config.get("kind")
        if kind not in KINDS:
            raise FailedPrecondition(f"unknown guard model kind {kind!r}")
        if config.get("feature_spec") != FEATURE_SPEC:
            raise FailedPrecondition(f"guard model feature spec {config.get('feature_spec')!r} is not {FEATURE_SPEC}")
        base = base or get_base_encoder()
        heads = LinearHeads.from_tensors(tensors)
        enc_t = {k[len("encoder."):]: v for k, v in tensors.items() if k.startswith("encoder.")}
        encoder = base
        if kind == "finetune":
            encoder = _encoder_with(base, enc_t)
        return cls(kind, heads, config, encoder, encoder_tensors=enc_t, version=version)

    # -- features and predictions
    def features(self, texts: Sequence[str], roles: Sequence[str],
                 contexts: Sequence[str | None] | None = None) -> np.ndarray:
        """phi(text, role, context) float64 [N, FEATURE_DIM]; canonical (each text encoded alone, bit-reproducible,
        see encoder.py). contexts[i]: the prompt response i answers, or None."""
        validate_roles(roles, len(texts))
        mask = context_mask(roles, contexts)
        ctx_emb = None
        if mask.any():
            ctx_emb = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
            ctx_emb[mask] = self.encoder.embed([c for c, m in zip(contexts, mask, strict=False) if m])
        return role_features(self.encoder.embed(list(texts)), roles, ctx_emb, mask)

    def features_from_embeddings(self, emb: np.ndarray, roles: Sequence[str], ctx_emb: np.ndarray | None = None,
                                 has_context: np.ndarray | None = None) -> np.ndarray:
        """phi from precomputed embeddings of this guard's encoder (the engine encodes once, batched)."""
        return role_features(emb, roles, ctx_emb, has_context)

    def logits_from_features(self, phi: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                           torch.Tensor]:
        phi_t = torch.as_tensor(phi, dtype=torch.float64)
        return self.heads.logits(phi_t)

    def predict_from_features(self, phi: np.ndarray) -> dict[str, np.ndarray]:
        """Probabilities from features, computed row by row so a row's result never depends on its batch (or on
        its position in it): the same (text, role) always gets bit-identical outputs within a process."""
        # Everything per row, on fresh memory: BLAS and vectorised sigmoid may round differently with the batch
        # size or a row's offset, and decisions must not depend on what else was in the batch.
        phi_t = torch.as_tensor(phi, dtype=torch.float64)
        rows = []
        with torch.no_grad():
            for i in range(phi_t.shape[0]):
                rows.append(probabilities(*self.heads.logits(phi_t[i:i + 1].clone())))
        if not rows:
            return {"unsafe": np.zeros(0), "topics": np.zeros((0, N_TOPICS)),
                    "severity_ge": np.zeros((0, N_TOPICS, N_LEVELS)), "severity": np.zeros((0, N_TOPICS), int)}
        return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}

    def predict_proba(self, texts: Sequence[str], roles: Sequence[str],
                      contexts: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
        """{"unsafe": [N], "topics": [N, 11], "severity_ge": [N, 11, 4] (non-increasing in k),
        "severity": int [N, 11] (0..4)} for whole texts (no chunking; see decision.py for that)."""
        return self.predict_from_features(self.features(texts, roles, contexts))

    def linear_heads(self) -> dict[str, dict[str, np.ndarray]]:
        """The linear heads in plain numpy: {"unsafe": {"weight": [1, D], "bias": [1]},
        "topics": {"weight": [11, D], "bias": [11]}, "severity": {"weight": [11, D], "bias": [11, 4]}} plus
        {"l2": value}. severity logit (t, k) = phi . weight[t] + bias[t, k-1]. See frozen_linear_objective."""
        h = self.heads
        return {"unsafe": {"weight": h.unsafe_w.numpy().copy(), "bias": h.unsafe_b.numpy().copy()},
                "topics": {"weight": h.topic_w.numpy().copy(), "bias": h.topic_b.numpy().copy()},
                "severity": {"weight": h.sev_w.numpy().copy(), "bias": h.sev_b.numpy().copy()},
                "l2": {"value": np.array(float(self.config.get("l2", 0.0)))}}


def base_config(kind: str, encoder: MiniLMEncoder, l2: float, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "feature_spec": FEATURE_SPEC, "feature_dim": FEATURE_DIM, "topics": list(TOPICS),
            "encoder": {"name": ENCODER_NAME, "sha256": encoder.weights_sha256(), "max_tokens": encoder.max_tokens},
            "l2": float(l2), **extra}


# ------------------------------------------------------------------------------------------------ finetune
def _encoder_with(base: MiniLMEncoder, enc_tensors: dict[str, torch.Tensor]) -> MiniLMEncoder:
    model = copy.deepcopy(base.model)
    missing = [k for k in enc_tensors if k not in dict(model.named_parameters())]
    if missing:
        raise FailedPrecondition(f"fine-tuned tensors do not match the encoder: {missing[:3]}")
    with torch.no_grad():
        params = dict(model.named_parameters())
        for k, v in enc_tensors.items():
            params[k].copy_(v)
    model.eval()
    return MiniLMEncoder.from_parts(base.tokenizer, model, model_dir=base.model_dir, max_tokens=base.max_tokens)


def trainable_parameter_names(model: torch.nn.Module, trainable_layers: int) -> list[str]:
    n_layers = model.config.num_hidden_layers
    if not 1 <= trainable_layers <= n_layers:
        raise InvalidArgument("params.trainable_layers", f"must be between 1 and {n_layers}")
    prefixes = tuple(f"encoder.layer.{i}." for i in range(n_layers - trainable_layers, n_layers))
    return [k for k, _ in model.named_parameters() if k.startswith(prefixes)]


class FinetuneTrainer:
    """Trains the top encoder layers and the heads on the frozen_linear objective's terms (mini-batch AdamW).
    Deterministic: dropout off (eval mode), epoch e shuffles with seed (seed, e). Checkpoint with state()."""

    def __init__(self, base: MiniLMEncoder, heads: LinearHeads, *, trainable_layers: int, l2: float,
                 lr: float, head_lr: float, batch_size: int, seed: int):
        self.model = copy.deepcopy(base.model).eval()
        self.base = base
        self.names = trainable_parameter_names(self.model, trainable_layers)
        params = dict(self.model.named_parameters())
        for k, p in params.items():
            p.requires_grad_(k in self.names)
        self.heads = heads.clone()
        self.head_params = [getattr(self.heads, k).requires_grad_(True) for k in LinearHeads.NAMES]
        self.l2, self.batch_size, self.seed = l2, batch_size, seed
        self.opt = torch.optim.AdamW([{"params": [params[k] for k in self.names], "lr": lr, "weight_decay": 0.0},
                                      {"params": self.head_params, "lr": head_lr, "weight_decay": 0.0}])
        self.enc = MiniLMEncoder.from_parts(base.tokenizer, self.model, model_dir=base.model_dir,
                                            max_tokens=base.max_tokens)

    @staticmethod
    def topic_class_weights(y: Targets) -> np.ndarray:
        """[2, 11] per-element weights (negative, positive) making a mini-batch mean an unbiased estimate of the
        class-balanced topic loss of frozen_linear_objective (each class carries half of a topic's weight)."""
        yt = y.topic[y.topic_known]
        n = max(len(yt), 1)
        pos = yt.sum(0)
        neg = len(yt) - pos
        return np.stack([np.where(neg > 0, 0.5 * n / np.maximum(neg, 1), 0.0),
                         np.where(pos > 0, 0.5 * n / np.maximum(pos, 1), 0.0)])

    def _loss(self, phi: torch.Tensor, y: Targets, cw: np.ndarray) -> torch.Tensor:
        u, tl, s = self.heads.logits(phi)
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        loss = bce(u, torch.from_numpy(y.unsafe))
        known = torch.from_numpy(y.topic_known)
        if known.any():
            yt = torch.from_numpy(y.topic)[known]
            w = torch.where(yt > 0.5, torch.from_numpy(cw[1]), torch.from_numpy(cw[0]))
            loss = loss + (w * bce(tl[known], yt, reduction="none")).sum() / known.sum()
        sev = torch.from_numpy(y.severity)
        mask = sev >= 0
        if mask.any():
            tgt = (sev[..., None] >= torch.arange(1, N_LEVELS + 1)).to(torch.float64)
            per = bce(s, tgt, reduction="none").sum(-1)
            loss = loss + per[mask].sum() / mask.sum()
        reg = sum(p.pow(2).sum() for p in self.head_params)
        return loss + 0.5 * self.l2 * reg

    def train_epoch(self, texts: Sequence[str], roles: Sequence[str], y: Targets, epoch: int,
                    contexts: Sequence[str | None] | None = None) -> float:
        g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(len(texts), generator=g).numpy()
        r = torch.from_numpy(validate_roles(roles, len(texts)))
        has = torch.from_numpy(context_mask(roles, contexts).astype(np.float64))
        total = 0.0
        cw = self.topic_class_weights(y)
        for k in range(0, len(order), self.batch_size):
            idx = order[k:k + self.batch_size]
            batch = self.enc.tokenize([texts[i] for i in idx], padding=True)
            e = self.enc.forward(batch).to(torch.float64)
            ri, hi = r[idx][:, None], has[idx][:, None]
            c = torch.zeros_like(e)
            sel = [j for j, i in enumerate(idx) if has[i] > 0]
            if sel:  # the prompt contexts go through the same (trainable) encoder
                cb = self.enc.tokenize([contexts[idx[j]] for j in sel], padding=True)
                c[sel] = self.enc.forward(cb).to(torch.float64)
            phi = torch.cat([e, ri * e, ri, c, c * e, hi], dim=1)
            loss = self._loss(phi, y.subset(idx), cw)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            total += float(loss.detach()) * len(idx)
        return total / len(texts)

    def encoder_tensors(self) -> dict[str, torch.Tensor]:
        params = dict(self.model.named_parameters())
        return {k: params[k].detach().clone() for k in self.names}

    def state(self) -> dict[str, Any]:
        return {"encoder": self.encoder_tensors(),
                "heads": {k: v.detach().clone() for k, v in self.heads.tensors("").items()},
                "opt": self.opt.state_dict()}

    def load_state(self, st: dict[str, Any]) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for k, v in st["encoder"].items():
                params[k].copy_(v)
            for k in LinearHeads.NAMES:
                getattr(self.heads, k).copy_(st["heads"][k])
        self.opt.load_state_dict(st["opt"])

    def to_model(self, config: dict[str, Any]) -> GuardModel:
        enc_t = self.encoder_tensors()
        heads = LinearHeads(**{k: getattr(self.heads, k).detach().clone() for k in LinearHeads.NAMES})
        return GuardModel("finetune", heads, config, _encoder_with(self.base, enc_t), encoder_tensors=enc_t)
