"""moderation.train_guard: train a guard ("frozen_linear", "finetune", "gemma_frozen" or "gemma_lora") from a
labeled dataset artifact or a packaged set (data.packaged_for), as steps under run_steps (services.common.jobcontext: progress, cancellation, a checkpoint after
every step, so a killed job resumes from the last one): the encoder's features, one Newton iteration a step, then
(finetune) one epoch a step; decision defaults chosen on the validation split, and the model registered."""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.common.minilm import EMBED_DIM, get_base_encoder
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
from services.moderation.jobs.data import load_examples, load_guard, packaged_for, split_examples
from services.moderation.metrics import guard_metrics
from services.moderation.params import GuardTrainParams
from services.moderation.schema import GuardExample, dump_guard_jsonl

_FEATURE_CHUNK = 64


def validation_defaults(model, phi_val: np.ndarray, val: list[GuardExample], target_false_block_rate: float
                        ) -> dict[str, float]:
    """A trained guard's validation metrics; its decision defaults are chosen on the same rows (for at most
    `target_false_block_rate` of benign rows blocked) and set in model.config. Every guard kind's trainer ends here."""
    from services.moderation.decision import choose_defaults

    pred = model.predict_from_features(phi_val)
    metrics = {f"val_{k}": v for k, v in guard_metrics(pred, Targets.from_examples(val)).items() if np.isfinite(v)}
    defaults = choose_defaults(pred, val, target_false_block_rate=target_false_block_rate)
    model.config["decision_defaults"] = defaults
    metrics.update({f"val_default_{k}": float(v) for k, v in defaults.items()
                    if k in ("false_block_rate", "recall", "recall_all_unsafe")})
    return metrics


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


class GuardTraining:
    """The Steps of one guard training. Step 0: the frozen encoder's features of the train and validation rows (its
    own progress, below 0.3), stored as an artifact so that a resumed job reads them back instead of encoding again.
    Then one Newton iteration a step, until max |gradient| < tol (the Newton steps end there: total shrinks) or
    max_iter. Then, for "finetune", one epoch a step, starting from the Newton heads."""

    def __init__(self, p: GuardTrainParams, train: list[GuardExample], val: list[GuardExample], digest: str):
        self.p, self.train, self.val, self.digest = p, train, val, digest
        self.newton = p.max_iter  # Newton steps; lowered to the iterations run when the gradient is below tol
        self.epochs = p.epochs if p.kind == "finetune" else 0

    @property
    def total(self) -> int:
        return 1 + self.newton + self.epochs

    def message(self, done: int, total: int) -> str:
        if done == 1:
            return "features"
        if done <= 1 + self.newton:
            return f"newton iteration {done - 1}"
        return f"epoch {done - 1 - self.newton}"

    def setup(self, ctx: JobContext) -> None:
        self.ctx, self.enc = ctx, get_base_encoder()
        self.y_tr = Targets.from_examples(self.train)
        self.heads, self.iters, self.trainer = LinearHeads.init(), 0, None

    def step(self, i: int) -> dict[str, float] | None:
        if i == 0:
            self.phi_tr = example_features(self.ctx, self.train, 0.0, 0.25, "train")
            self.phi_va = example_features(self.ctx, self.val, 0.25, 0.3, "validation")
            self.features_id = self.ctx.write_artifact(
                "guard-features.safetensors",
                st_save({"train": torch.from_numpy(self.phi_tr), "validation": torch.from_numpy(self.phi_va)}),
                "application/vnd.praxon.safetensors", {"dataset_sha256": self.digest})
            return None
        if i <= self.newton:
            self.heads, g = newton_step(self.heads, self.phi_tr, self.y_tr, self.p.l2)
            self.iters = i
            if g < self.p.tol:
                self.newton = i
            return {"grad_max": g}
        if self.trainer is None:
            self.trainer = self._finetune_trainer()
        t = self.train
        loss = self.trainer.train_epoch([r.text for r in t], [r.role for r in t], self.y_tr, i - 1 - self.newton,
                                        [r.prompt for r in t])
        return {"loss": loss}

    def _finetune_trainer(self) -> FinetuneTrainer:
        p = self.p
        return FinetuneTrainer(self.enc, self.heads, trainable_layers=p.trainable_layers, l2=p.l2, lr=p.lr,
                               head_lr=p.head_lr, batch_size=p.batch_size, seed=p.seed)

    def state(self) -> dict[str, Any]:
        st = {"features_artifact_id": self.features_id, "newton": self.newton, "iters": self.iters,
              "heads": self.heads.tensors("")}
        if self.trainer is not None:
            st["trainer"] = self.trainer.state()
        return st

    def load_state(self, st: dict[str, Any]) -> None:
        self.features_id = st["features_artifact_id"]
        feats = st_load(self.ctx.read_artifact(self.features_id))
        self.phi_tr, self.phi_va = feats["train"].numpy(), feats["validation"].numpy()
        self.newton, self.iters = int(st["newton"]), int(st["iters"])
        self.heads = LinearHeads.from_tensors(st["heads"], prefix="")
        if "trainer" in st:
            self.trainer = self._finetune_trainer()
            self.trainer.load_state(st["trainer"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p, val = self.p, self.val
        config = base_config(p.kind, self.enc, p.l2, newton_iterations=self.iters, dataset_sha256=self.digest,
                             n_train=len(self.train), n_validation=len(val))
        phi_va = self.phi_va
        if p.kind == "frozen_linear":
            model = GuardModel("frozen_linear", self.heads, config, self.enc)
        else:
            config.update(trainable_layers=p.trainable_layers, epochs=p.epochs, lr=p.lr, head_lr=p.head_lr,
                          batch_size=p.batch_size, seed=p.seed)
            model = self.trainer.to_model(config)
            if val:  # the fine-tuned encoder's features
                phi_va = model.features([r.text for r in val], [r.role for r in val], [r.prompt for r in val])
        metrics = validation_defaults(model, phi_va, val, p.target_false_block_rate) if val else {}
        tensors, cfg = model.to_registry()
        teacher = [p.teacher_model_version_id] if p.teacher_model_version_id else []
        if teacher:
            cfg["teacher_model_version_id"] = teacher[0]
        info = ctx.register_model(p.model_name, tensors, kind=f"guard/{p.kind}", config=cfg, metrics=metrics,
                                  dataset_artifact_id=p.dataset_artifact_id, parent_version_ids=teacher or None)
        ctx.progress(1.0, "registered", **metrics)
        return {"model_version_id": info.model_version_id, "name": info.name, "kind": p.kind, "metrics": metrics,
                "decision_defaults": cfg.get("decision_defaults"), "model_fingerprint": model.fingerprint()}


def teacher_labelled(ctx: JobContext, teacher, rows: list[GuardExample], train: list[GuardExample],
                     val: list[GuardExample]) -> list[GuardExample]:
    """The rows for distilling `teacher` into frozen_linear heads: each train row gains the teacher's probabilities
    as soft labels (unsafe_p, topic_p: guard.Targets trains P(unsafe) and the topics on them; the severity heads keep
    the row's own levels, the teacher's being no probabilities); validation rows keep their labels only (the decision
    defaults are chosen against them). Every row's split is written out, so the stored set splits the same way."""
    import dataclasses

    from services.moderation.taxonomy import TOPICS

    predict = getattr(teacher, "predict_proba_batched", teacher.predict_proba)
    out: list[GuardExample] = []
    for k in range(0, len(train), _FEATURE_CHUNK):
        ctx.check_cancelled()
        part = train[k:k + _FEATURE_CHUNK]
        pred = predict([r.text for r in part], [r.role for r in part], [r.prompt for r in part])
        for i, r in enumerate(part):
            out.append(dataclasses.replace(r, split="train", unsafe_p=float(pred["unsafe"][i]),
                                           topic_p={t: float(pred["topics"][i, j]) for j, t in enumerate(TOPICS)}))
        ctx.progress(0.0, f"teacher labels {k + len(part)}/{len(train)}")
    return out + [dataclasses.replace(r, split="validation") for r in val]


def run_guard_training(ctx: JobContext) -> dict[str, Any]:
    p = parse_params(GuardTrainParams, ctx.params, prefix="params.")
    # without a dataset: the packaged set of the kind (a distilled guard: of its teacher's kind)
    teacher = load_guard(ctx, p.teacher_model_version_id) if p.teacher_model_version_id is not None else None
    kind = p.kind if teacher is None else teacher.config.get("kind")
    rows = load_examples(ctx, p.dataset_artifact_id, p.format, packaged_for(kind))
    train, val = split_examples(rows, p.validation_fraction)
    if not train:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset has no training rows")
    if teacher is not None:   # the soft-labelled set is the version's lineage dataset
        rows = teacher_labelled(ctx, teacher, rows, train, val)
        train, val = split_examples(rows, p.validation_fraction)
        p = p.model_copy(update={"dataset_artifact_id": ctx.write_artifact(
            "guard-distilled.jsonl", dump_guard_jsonl(rows), "application/jsonl",
            {"teacher_model_version_id": p.teacher_model_version_id})})
    digest = hashlib.sha256(dump_guard_jsonl(rows)).hexdigest()
    if p.kind == "gemma_frozen":  # the heads over a registered LM's hidden states (gemma_guard.py)
        from services.moderation.gemma_guard import GemmaGuardTraining

        job = GemmaGuardTraining(p, train, val, digest)
    elif p.kind == "gemma_lora":  # the same, then LoRA epochs on the layers up to the read-out (gemma_lora.py)
        from services.moderation.gemma_lora import GemmaLoRATraining

        job = GemmaLoRATraining(p, train, val, digest)
    else:
        job = GuardTraining(p, train, val, digest)
    # the features (step 0) report progress up to 0.3; registration reports 1.0
    return run_steps(ctx, job, message=job.message, progress_span=(0.3, 0.95), fingerprint=digest)
