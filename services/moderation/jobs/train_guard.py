"""moderation.train_guard: train a guard ("frozen_linear" or "finetune") from a labeled dataset artifact or the
packaged seed set, with progress per Newton iteration / epoch, a checkpoint after each one (a killed job resumes from
the last one), decision defaults chosen on the validation split, and the model registered."""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.common.params import parse_params
from services.moderation.encoder import EMBED_DIM, get_base_encoder
from services.moderation.guard import (
    FEATURE_DIM,
    FinetuneTrainer,
    GuardModel,
    LinearHeads,
    Targets,
    base_config,
    newton_step,
    role_features,
)
from services.moderation.jobs.data import load_examples, split_examples
from services.moderation.metrics import guard_metrics
from services.moderation.params import GuardTrainParams
from services.moderation.schema import GuardExample, dump_guard_jsonl

_FEATURE_CHUNK = 64


def example_features(ctx: JobContext | None, rows: list[GuardExample], lo: float = 0.0, hi: float = 1.0,
                     label: str = "") -> np.ndarray:
    """phi of labeled rows with the frozen base encoder (a response row with a prompt is featurised with it)."""
    enc = get_base_encoder()
    out = []
    for k in range(0, len(rows), _FEATURE_CHUNK):
        if ctx is not None:
            ctx.check_cancelled()
        part = rows[k:k + _FEATURE_CHUNK]
        has = np.array([r.prompt is not None for r in part], dtype=bool)
        ctx_emb = np.zeros((len(part), EMBED_DIM), dtype=np.float32)
        if has.any():
            ctx_emb[has] = enc.embed([r.prompt for r in part if r.prompt is not None])
        out.append(role_features(enc.embed([r.text for r in part]), [r.role for r in part], ctx_emb, has))
        if ctx is not None:
            ctx.progress(lo + (hi - lo) * min(1.0, (k + len(part)) / len(rows)), f"features ({label})")
    return np.concatenate(out) if out else np.zeros((0, FEATURE_DIM))


def run_guard_training(ctx: JobContext) -> dict[str, Any]:
    from services.moderation.decision import choose_defaults

    p = parse_params(GuardTrainParams, ctx.params, prefix="params.")
    rows = load_examples(ctx, p.dataset_artifact_id, p.format)
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
        phi_tr = example_features(ctx, train, 0.0, 0.25, "train")
        phi_va = example_features(ctx, val, 0.25, 0.3, "validation")
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
        texts, roles, prompts = [r.text for r in train], [r.role for r in train], [r.prompt for r in train]
        while st["epoch"] < p.epochs:
            ctx.check_cancelled()
            loss = trainer.train_epoch(texts, roles, y_tr, st["epoch"], prompts)
            st = {**st, "epoch": st["epoch"] + 1, "trainer": trainer.state()}
            ctx.save_checkpoint(st)
            ctx.progress(0.5 + 0.45 * st["epoch"] / p.epochs, f"epoch {st['epoch']}", loss=loss)
        config.update(trainable_layers=p.trainable_layers, epochs=p.epochs, lr=p.lr, head_lr=p.head_lr,
                      batch_size=p.batch_size, seed=p.seed)
        model = trainer.to_model(config)
        if val:
            phi_va = model.features([r.text for r in val], [r.role for r in val], [r.prompt for r in val])

    metrics: dict[str, float] = {}
    if val:
        pred = model.predict_from_features(phi_va)
        metrics = {f"val_{k}": v for k, v in guard_metrics(pred, y_va).items() if np.isfinite(v)}
        defaults = choose_defaults(pred, val, target_false_block_rate=p.target_false_block_rate)
        model.config["decision_defaults"] = defaults
        metrics.update({f"val_default_{k}": float(v) for k, v in defaults.items()
                        if k in ("false_block_rate", "recall", "recall_all_unsafe")})
    tensors, cfg = model.to_registry()
    info = ctx.register_model(p.model_name, tensors, kind=f"guard/{p.kind}", config=cfg, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id)
    ctx.progress(1.0, "registered", **metrics)
    return {"model_version_id": info.model_version_id, "name": info.name, "kind": p.kind, "metrics": metrics,
            "decision_defaults": cfg.get("decision_defaults"), "model_fingerprint": model.fingerprint()}
