"""Long jobs of the moderation service, written against services.common.jobcontext.JobContext.

run_guard_training(ctx)          params: see GuardTrainParams.parse. Trains a guard ("frozen_linear" or "finetune")
                                 from a labeled dataset artifact (praxon / BingoGuard / WildGuardMix JSONL) or the
                                 packaged seed set, reports progress per Newton iteration / epoch, checkpoints after
                                 each one, resumes from the last checkpoint, registers the model.
run_policy_scorer_training(ctx)  trains the SafeWatch-style rule scorer (policies.py) and registers it.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.moderation.encoder import get_base_encoder
from services.moderation.guard import (
    KINDS,
    FinetuneTrainer,
    GuardModel,
    LinearHeads,
    Targets,
    base_config,
    newton_step,
    role_features,
)
from services.moderation.metrics import guard_metrics
from services.moderation.policies import train_policy_scorer
from services.moderation.schema import (
    GuardExample,
    dump_guard_jsonl,
    import_bingoguard,
    import_wildguardmix,
    load_seed_dataset,
    parse_guard_jsonl,
)

FORMATS = ("praxon", "bingoguard", "wildguardmix")
_FEATURE_CHUNK = 64


@dataclass(frozen=True)
class GuardTrainParams:
    dataset_artifact_id: str | None = None   # None: the packaged seed set
    format: str = "praxon"
    model_name: str = "guard"
    kind: str = "frozen_linear"
    l2: float = 1e-3
    max_iter: int = 50                       # Newton iterations (frozen_linear, and the finetune warm start)
    tol: float = 1e-8                        # stop when max |gradient| < tol
    epochs: int = 3                          # finetune only
    trainable_layers: int = 2
    lr: float = 3e-5
    head_lr: float = 1e-3
    batch_size: int = 16
    seed: int = 0
    validation_fraction: float = 0.2         # when no row carries a split

    @classmethod
    def parse(cls, params: dict[str, Any]) -> GuardTrainParams:
        known = set(cls.__dataclass_fields__)
        for k in params:
            if k not in known:
                raise InvalidArgument(f"params.{k}", "unknown parameter")
        p = cls(**params)

        def check(ok: bool, f: str, msg: str) -> None:
            if not ok:
                raise InvalidArgument(f"params.{f}", msg)

        isint = lambda v: isinstance(v, int) and not isinstance(v, bool)
        isnum = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        check(p.dataset_artifact_id is None or (isinstance(p.dataset_artifact_id, str) and p.dataset_artifact_id),
              "dataset_artifact_id", "must be an artifact id")
        check(p.format in FORMATS, "format", f"must be one of {list(FORMATS)}")
        check(p.kind in KINDS, "kind", f"must be one of {list(KINDS)}")
        check(isinstance(p.model_name, str) and 0 < len(p.model_name) <= 100, "model_name", "1..100 characters")
        check(isnum(p.l2) and 0 < p.l2 <= 10, "l2", "must be in (0, 10]")
        check(isint(p.max_iter) and 1 <= p.max_iter <= 500, "max_iter", "must be an integer in 1..500")
        check(isnum(p.tol) and 0 < p.tol < 1, "tol", "must be in (0, 1)")
        check(isint(p.epochs) and 1 <= p.epochs <= 100, "epochs", "must be an integer in 1..100")
        check(isint(p.trainable_layers) and 1 <= p.trainable_layers <= 6, "trainable_layers", "must be 1..6")
        check(isnum(p.lr) and 0 < p.lr < 1, "lr", "must be in (0, 1)")
        check(isnum(p.head_lr) and 0 < p.head_lr < 1, "head_lr", "must be in (0, 1)")
        check(isint(p.batch_size) and 1 <= p.batch_size <= 1024, "batch_size", "must be 1..1024")
        check(isint(p.seed), "seed", "must be an integer")
        check(isnum(p.validation_fraction) and 0 <= p.validation_fraction < 1, "validation_fraction",
              "must be in [0, 1)")
        return p


def load_examples(ctx: JobContext, p: GuardTrainParams) -> list[GuardExample]:
    if p.dataset_artifact_id is None:
        return load_seed_dataset()
    data = ctx.read_artifact(p.dataset_artifact_id)
    if p.format == "praxon":
        return parse_guard_jsonl(data)
    rows = import_bingoguard(data) if p.format == "bingoguard" else import_wildguardmix(data)
    if not rows:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset produced no labeled rows")
    return rows


def split_examples(rows: list[GuardExample], validation_fraction: float) -> tuple[list[GuardExample],
                                                                                  list[GuardExample]]:
    """The rows' own split when any row has one (train = "train"; validation = "validation"); otherwise a fixed
    hash-of-text split so the same text always lands on the same side."""
    if any(r.split for r in rows):
        return [r for r in rows if r.split == "train"], [r for r in rows if r.split == "validation"]
    cut = int(validation_fraction * 2**32)
    val = [zlib.crc32(r.text.encode()) < cut for r in rows]
    return [r for r, v in zip(rows, val) if not v], [r for r, v in zip(rows, val) if v]


def _features(ctx: JobContext, rows: list[GuardExample], lo: float, hi: float, label: str) -> np.ndarray:
    enc = get_base_encoder()
    out = []
    for k in range(0, len(rows), _FEATURE_CHUNK):
        ctx.check_cancelled()
        part = rows[k:k + _FEATURE_CHUNK]
        out.append(role_features(enc.embed([r.text for r in part]), [r.role for r in part]))
        ctx.progress(lo + (hi - lo) * min(1.0, (k + len(part)) / len(rows)), f"features ({label})")
    return np.concatenate(out) if out else np.zeros((0, 2 * 384 + 1))


def run_guard_training(ctx: JobContext) -> dict[str, Any]:
    p = GuardTrainParams.parse(dict(ctx.params))
    rows = load_examples(ctx, p)
    train, val = split_examples(rows, p.validation_fraction)
    if not train:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset has no training rows")
    digest = hashlib.sha256(dump_guard_jsonl(rows)).hexdigest()
    y_tr, y_va = Targets.from_examples(train), Targets.from_examples(val)
    enc = get_base_encoder()

    st = ctx.load_checkpoint()
    if st is not None and st.get("dataset_sha256") != digest:
        st = None  # the checkpoint belongs to other data: start over
    if st is None:
        phi_tr = _features(ctx, train, 0.0, 0.25, "train")
        phi_va = _features(ctx, val, 0.25, 0.3, "validation")
        fid = ctx.write_artifact("guard-features.safetensors",
                                 st_save({"train": torch.from_numpy(phi_tr), "validation": torch.from_numpy(phi_va)}),
                                 "application/vnd.praxon.safetensors", {"dataset_sha256": digest})
        st = {"dataset_sha256": digest, "features_artifact_id": fid, "stage": "linear", "iter": 0, "done": False,
              "heads": LinearHeads.init().tensors("")}
        ctx.save_checkpoint(st)
    else:
        feats = st_load(ctx.read_artifact(st["features_artifact_id"]))
        phi_tr, phi_va = feats["train"].numpy(), feats["validation"].numpy()

    heads = LinearHeads.from_tensors(st["heads" if st["stage"] == "linear" else "warm_heads"], prefix="")
    lin_hi = 0.95 if p.kind == "frozen_linear" else 0.5
    while st["stage"] == "linear" and not st["done"] and st["iter"] < p.max_iter:
        ctx.check_cancelled()
        heads, g = newton_step(heads, phi_tr, y_tr, p.l2)
        st = {**st, "iter": st["iter"] + 1, "done": g < p.tol, "heads": heads.tensors(""), "grad": g}
        ctx.save_checkpoint(st)
        ctx.progress(0.3 + (lin_hi - 0.3) * st["iter"] / p.max_iter, f"newton iteration {st['iter']}", grad_max=g)

    config = base_config(p.kind, enc, p.l2, newton_iterations=int(st.get("iter", 0)),
                         dataset_sha256=digest, n_train=len(train), n_validation=len(val))
    if p.kind == "frozen_linear":
        model = GuardModel("frozen_linear", heads, config, enc)
    else:
        if st["stage"] == "linear":
            st = {k: v for k, v in st.items() if k != "heads"}  # checkpoints may not share tensors
            st.update(stage="finetune", epoch=0, warm_heads={k: v.clone() for k, v in heads.tensors("").items()})
        trainer = FinetuneTrainer(enc, LinearHeads.from_tensors(st["warm_heads"], prefix=""),
                                  trainable_layers=p.trainable_layers, l2=p.l2, lr=p.lr, head_lr=p.head_lr,
                                  batch_size=p.batch_size, seed=p.seed)
        if "trainer" in st:
            trainer.load_state(st["trainer"])
        texts, roles = [r.text for r in train], [r.role for r in train]
        while st["epoch"] < p.epochs:
            ctx.check_cancelled()
            loss = trainer.train_epoch(texts, roles, y_tr, st["epoch"])
            st = {**st, "epoch": st["epoch"] + 1, "trainer": trainer.state()}
            ctx.save_checkpoint(st)
            ctx.progress(0.5 + 0.45 * st["epoch"] / p.epochs, f"epoch {st['epoch']}", loss=loss)
        config.update(trainable_layers=p.trainable_layers, epochs=p.epochs, lr=p.lr, head_lr=p.head_lr,
                      batch_size=p.batch_size, seed=p.seed)
        model = trainer.to_model(config)
        phi_va = model.features([r.text for r in val], [r.role for r in val]) if val else phi_va

    metrics: dict[str, float] = {}
    if val:
        metrics = {f"val_{k}": v for k, v in guard_metrics(model.predict_from_features(phi_va), y_va).items()
                   if np.isfinite(v)}
    tensors, cfg = model.to_registry()
    info = ctx.register_model(p.model_name, tensors, kind=f"guard/{p.kind}", config=cfg, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id)
    ctx.progress(1.0, "registered", **metrics)
    return {"model_version_id": info.model_version_id, "name": info.name, "version": info.version,
            "kind": p.kind, "metrics": metrics, "model_fingerprint": model.fingerprint()}


def run_policy_scorer_training(ctx: JobContext) -> dict[str, Any]:
    """params: dataset_artifact_id / format (as the guard job), model_name ("policy-scorer"), l2, seed."""
    params = dict(ctx.params)
    name = params.pop("model_name", "policy-scorer")
    l2 = params.pop("l2", 1e-3)
    seed = params.pop("seed", 0)
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not 0 < l2 <= 10:
        raise InvalidArgument("params.l2", "must be in (0, 10]")
    p = GuardTrainParams.parse(params)
    train, _ = split_examples(load_examples(ctx, p), p.validation_fraction)
    ctx.check_cancelled()
    ctx.progress(0.1, "training policy scorer")
    scorer = train_policy_scorer(get_base_encoder(), train, l2=float(l2), seed=int(seed))
    tensors, cfg = scorer.to_registry()
    info = ctx.register_model(name, tensors, kind="policy_scorer", config=cfg,
                              dataset_artifact_id=p.dataset_artifact_id)
    ctx.progress(1.0, "registered")
    return {"model_version_id": info.model_version_id, "name": info.name, "version": info.version}
