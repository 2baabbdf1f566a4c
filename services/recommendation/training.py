"""Training loop shared by every model kind: AdamW, shuffled mini-batches, per-epoch validation Recall@5, early
stopping with patience, full-state checkpoints (model, optimizer, epoch, best state, RNG state, early-stop counters)
and deterministic resume.

Determinism: parameters are initialised after torch.manual_seed(seed); epoch e shuffles with its own generator seeded
from (seed, e); the draws inside the loss (t, noise, null mask, dropout) use the global torch RNG, whose state is
checkpointed at each epoch boundary; evaluation samples from a generator seeded from the seed alone, so it never
touches the training stream. A run resumed from an epoch checkpoint therefore replays exactly the epochs an
uninterrupted run would have (same process settings / thread count)."""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from services.common.errors import FailedPrecondition, FieldViolation, InvalidArgument
from services.recommendation.data import Dataset, Samples
from services.recommendation.metrics import KS, evaluate
from services.recommendation.model import MODEL_KINDS, ModelConfig, build_model

CHECKPOINT_FORMAT = 1
EVAL_SEED_OFFSET = 7919


@dataclass
class TrainConfig:
    model_kind: str = "preferdiff"
    epochs: int = 50
    batch_size: int = 256
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0  # 0: no clipping; the reference trainer (trainer.py) defines max_grad_norm but never clips
    dim: int = 64
    heads: int = 2
    layers: int = 1
    dropout: float = 0.1
    emb_init_std: float = 0.0  # 0: 1.0 for the diffusion kinds (reference init), dim**-0.5 for sasrec_ce
    lam: float = 0.4
    gamma: float = 5.0
    loss_type: str = "cosine"  # "mse": the original DreamRec error (ablation / baseline variant)
    p_null: float = 0.1
    guidance_w: float = 2.0
    sample_steps: int = 20
    timesteps: int = 2000
    seed: int = 0
    patience: int = 10
    max_history: int = 0  # 0: the dataset's max_history
    exclude_history: bool = False
    eval_batch_size: int = 1024
    cancel_check_every: int = 50  # batches

    @classmethod
    def from_params(cls, params: dict[str, Any], ignore: tuple[str, ...] = ()) -> "TrainConfig":
        """Validate job params; unknown names and out-of-range values are InvalidArgument(params.<name>)."""
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        bad: list[tuple[str, str]] = []
        for k, v in params.items():
            if k in ignore:
                continue
            if k not in kinds:
                bad.append((f"params.{k}", "unknown parameter"))
                continue
            default = getattr(cls, k)
            if isinstance(default, bool):
                ok = isinstance(v, bool)
            elif isinstance(default, int):
                ok = isinstance(v, int) and not isinstance(v, bool)
            elif isinstance(default, float):
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                v = float(v) if ok else v
            else:
                ok = isinstance(v, str)
            if not ok:
                bad.append((f"params.{k}", f"expected {type(default).__name__}, got {type(v).__name__}"))
            else:
                values[k] = v
        cfg = cls(**values)
        checks = [
            ("model_kind", cfg.model_kind in MODEL_KINDS, f"one of {', '.join(MODEL_KINDS)}"),
            ("epochs", 1 <= cfg.epochs <= 10_000, "1..10000"),
            ("batch_size", 2 <= cfg.batch_size <= 65_536, "2..65536"),
            ("lr", 0 < cfg.lr <= 1.0, "in (0, 1]"),
            ("weight_decay", 0 <= cfg.weight_decay <= 1.0, "in [0, 1]"),
            ("max_grad_norm", cfg.max_grad_norm >= 0, ">= 0 (0 disables clipping)"),
            ("dim", 2 <= cfg.dim <= 4096 and cfg.heads >= 1 and cfg.dim % cfg.heads == 0,
             "2..4096 and divisible by heads"),
            ("heads", 1 <= cfg.heads <= 64, "1..64"),
            ("layers", 1 <= cfg.layers <= 12, "1..12"),
            ("dropout", 0 <= cfg.dropout < 1, "in [0, 1)"),
            ("emb_init_std", 0 <= cfg.emb_init_std <= 10, "in [0, 10] (0 = the kind's default)"),
            ("lam", 0 <= cfg.lam <= 1, "in [0, 1]"),
            ("gamma", 0 < cfg.gamma <= 100, "in (0, 100]"),
            ("loss_type", cfg.loss_type in ("cosine", "mse"), "'cosine' or 'mse'"),
            ("p_null", 0 <= cfg.p_null < 1, "in [0, 1)"),
            ("guidance_w", 0 <= cfg.guidance_w <= 50, "in [0, 50]"),
            ("timesteps", 10 <= cfg.timesteps <= 10_000, "10..10000"),
            ("sample_steps", 1 <= cfg.sample_steps <= cfg.timesteps, "1..timesteps"),
            ("seed", 0 <= cfg.seed < 2 ** 31, "0..2^31-1"),
            ("patience", 1 <= cfg.patience <= 10_000, "1..10000"),
            ("max_history", 0 <= cfg.max_history <= 200, "0..200 (0 = the dataset's)"),
            ("eval_batch_size", 1 <= cfg.eval_batch_size <= 65_536, "1..65536"),
            ("cancel_check_every", cfg.cancel_check_every >= 1, ">= 1"),
        ]
        names_given = {b[0] for b in bad}
        for name, ok, want in checks:
            if not ok and f"params.{name}" not in names_given:
                bad.append((f"params.{name}", f"must be {want}"))
        if bad:
            raise InvalidArgument(violations=[FieldViolation(f, d) for f, d in bad])
        if cfg.model_kind == "dreamrec":
            cfg.lam = 1.0
        return cfg

    def model_config(self, n_items: int, max_history: int) -> ModelConfig:
        return ModelConfig(kind=self.model_kind, n_items=n_items, dim=self.dim, max_history=max_history,
                           heads=self.heads, layers=self.layers, dropout=self.dropout,
                           emb_init_std=self.emb_init_std or (
                               self.dim ** -0.5 if self.model_kind == "sasrec_ce" else 1.0), timesteps=self.timesteps, sample_steps=self.sample_steps,
                           guidance_w=self.guidance_w, p_null=self.p_null, lam=self.lam, gamma=self.gamma,
                           loss_type=self.loss_type)


@dataclass
class TrainResult:
    kind: str
    model: torch.nn.Module | None  # None for popularity
    model_config: ModelConfig | None
    popularity: torch.Tensor  # [N + 1]
    best_epoch: int
    epochs_run: int
    valid_metrics: dict[str, float]
    test_metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)


class Hooks:
    """What the loop needs from its host (the job context, or nothing in a benchmark)."""

    def progress(self, fraction: float, message: str, **metrics: float) -> None: ...

    def check_cancelled(self) -> None: ...

    def save_checkpoint(self, state: Any) -> None: ...

    def load_checkpoint(self) -> Any | None:
        return None


def _eval_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET)


def evaluate_model(model: torch.nn.Module | None, popularity: torch.Tensor, samples: Samples, *, seed: int,
                   exclude_history: bool, batch_size: int = 1024, ks: tuple[int, ...] = KS) -> dict[str, float]:
    if model is None:
        table = popularity[1:].unsqueeze(1)
        return evaluate(lambda h, n: torch.ones(h.shape[0], 1), table, samples.history, samples.lengths,
                        samples.target, ks=ks, exclude_history=exclude_history, batch_size=batch_size)
    was_training = model.training
    model.eval()
    gen = _eval_generator(seed)
    try:
        with torch.no_grad():
            table = model.item_table().detach()
            return evaluate(lambda h, n: model.queries(h, n, generator=gen), table, samples.history,
                            samples.lengths, samples.target, ks=ks, exclude_history=exclude_history,
                            batch_size=batch_size)
    finally:
        model.train(was_training)


def _trim(s: Samples, L: int) -> Samples:
    """Keep the last L items of each history (right-padded)."""
    if s.history.shape[1] == L:
        return s
    if s.history.shape[1] < L:
        pad = torch.zeros(s.history.shape[0], L - s.history.shape[1], dtype=torch.long)
        return Samples(torch.cat([s.history, pad], 1), s.lengths, s.target, s.user, s.target_record_id)
    n = s.lengths.clamp(max=L)
    start = (s.lengths - n).unsqueeze(1)
    idx = (start + torch.arange(L).unsqueeze(0)).clamp(max=s.history.shape[1] - 1)
    h = s.history.gather(1, idx)
    h = torch.where(torch.arange(L).unsqueeze(0) < n.unsqueeze(1), h, torch.zeros_like(h))
    return Samples(h, n, s.target, s.user, s.target_record_id)


def train(cfg: TrainConfig, dataset: Dataset, hooks: Hooks | None = None) -> TrainResult:
    hooks = hooks or Hooks()
    L = cfg.max_history or dataset.max_history
    train_s = _trim(dataset.samples("train"), L)
    valid_s = _trim(dataset.samples("valid"), L)
    test_s = _trim(dataset.samples("test"), L)
    if len(train_s) < 2:
        raise FailedPrecondition("the dataset has fewer than 2 training samples", reason="DATASET_TOO_SMALL")
    popularity = dataset.popularity()

    if cfg.model_kind == "popularity":
        kw = dict(seed=cfg.seed, exclude_history=cfg.exclude_history, batch_size=cfg.eval_batch_size)
        valid = evaluate_model(None, popularity, valid_s, **kw)
        test = evaluate_model(None, popularity, test_s, **kw)
        hooks.progress(1.0, "popularity counted", valid_recall_5=valid["recall@5"])
        return TrainResult("popularity", None, None, popularity, 0, 0, valid, test, [])

    torch.manual_seed(cfg.seed)
    mcfg = cfg.model_config(dataset.n_items, L)
    model = build_model(mcfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start_epoch, best_score, best_epoch, bad_epochs = 0, -1.0, 0, 0
    best_state = copy.deepcopy(model.state_dict())
    history: list[dict[str, float]] = []
    stopped = False

    ckpt = hooks.load_checkpoint()
    if ckpt is not None:
        if ckpt.get("format") != CHECKPOINT_FORMAT or ckpt.get("config") != asdict(cfg) \
                or ckpt.get("n_items") != dataset.n_items:
            raise FailedPrecondition("the checkpoint belongs to a run with other parameters or data",
                                     reason="CHECKPOINT_MISMATCH")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optim"])
        best_state = ckpt["best_model"]
        start_epoch, best_score = int(ckpt["epoch"]), float(ckpt["best_score"])
        best_epoch, bad_epochs = int(ckpt["best_epoch"]), int(ckpt["bad_epochs"])
        history = [dict(h) for h in ckpt["history"]]
        stopped = bool(ckpt["stopped"])
        torch.set_rng_state(ckpt["rng"])

    n = len(train_s)
    eval_kw = dict(seed=cfg.seed, exclude_history=cfg.exclude_history, batch_size=cfg.eval_batch_size)
    epoch = start_epoch
    while epoch < cfg.epochs and not stopped:
        hooks.check_cancelled()
        model.train()
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch))
        total, batches = 0.0, 0
        part_sums: dict[str, float] = {}
        for bi, lo in enumerate(range(0, n, cfg.batch_size)):
            idx = perm[lo:lo + cfg.batch_size]
            if idx.numel() < 2:
                continue  # centroid negatives need two targets
            if bi and bi % cfg.cancel_check_every == 0:
                hooks.check_cancelled()
            b = train_s.subset(idx)
            loss, parts = model.loss(b.history, b.lengths, b.target)
            for k_, v_ in parts.items():
                part_sums[k_] = part_sums.get(k_, 0.0) + v_
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            total += float(loss.detach())
            batches += 1
        epoch += 1
        valid = evaluate_model(model, popularity, valid_s, **eval_kw)
        score = valid["recall@5"]
        if score > best_score:
            best_score, best_epoch, bad_epochs = score, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad_epochs += 1
        stopped = bad_epochs >= cfg.patience
        rec = {"epoch": float(epoch), "loss": total / max(batches, 1), "valid_recall_5": score,
               "valid_ndcg_10": valid["ndcg@10"]}
        rec.update({k_: v_ / max(batches, 1) for k_, v_ in part_sums.items() if k_ != "loss"})
        history.append(rec)
        hooks.save_checkpoint({
            "format": CHECKPOINT_FORMAT, "config": asdict(cfg), "n_items": dataset.n_items, "epoch": epoch,
            "model": model.state_dict(), "optim": opt.state_dict(), "best_model": best_state,
            "best_score": best_score, "best_epoch": best_epoch, "bad_epochs": bad_epochs, "stopped": stopped,
            "history": history, "rng": torch.get_rng_state()})
        hooks.progress(epoch / cfg.epochs, f"epoch {epoch}/{cfg.epochs}" + (" (early stop)" if stopped else ""),
                       **rec, best_epoch=float(best_epoch))

    model.load_state_dict(best_state)
    model.eval()
    valid = evaluate_model(model, popularity, valid_s, **eval_kw)
    test = evaluate_model(model, popularity, test_s, **eval_kw)
    return TrainResult(cfg.model_kind, model, mcfg, popularity, best_epoch, epoch, valid, test, history)
