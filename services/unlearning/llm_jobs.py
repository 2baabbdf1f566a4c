"""The unlearning jobs' branches for causal language models (registry versions in the Hugging Face format of
services/common/hf.py): fine-tuning on question-answer records (unlearning.train, kind causal_lm_qa) and
unlearning records from such a model (unlearning.unlearn, methods flat / npo / gradient_ascent). The losses and the
training loop are flat.py; this file reads the data, runs the loop under run_steps (resume, cancel, progress), and
registers the new version with its lineage.

QA dataset artifact: JSONL, one {"id", "question", "answer", ...} record a line (authors.to_jsonl writes one; extra
keys such as "author" or "paraphrased_answer" are kept but not needed). A record id is its "id". The version a
causal_lm_qa job registers names this artifact as its dataset (lineage), so its records can later be forgotten by id;
forgotten records are tombstoned like every other dataset's (ctx.forgotten_records), and no job reads them again.

The new version of an unlearning job: the source's Hugging Face config with the new weights (LoRA merged), its
parent version (lineage), the excluded records, and an "audited_only" guarantee (a non-convex model: no certificate
is claimed; the report carries the empirical evidence: forget / template / retain probabilities and, with an
eval_dataset_artifact_id of records never trained on, the loss-threshold membership-inference AUC before and
after)."""
from __future__ import annotations

import json
import time
from typing import Any, Callable

import torch

from services.common import hf
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.unlearning import audit
from services.unlearning.flat import LM_METHODS, QA, TEMPLATE_ANSWERS, TrainConfig, Trainer
from services.unlearning.params import LanguageModelParams, TrainParams, UnlearnParams

LM_ONLY_METHODS = ("flat", "npo")
MAX_TEXT = 4000


def is_lm_config(config: dict) -> bool:
    return isinstance(config, dict) and config.get("format") == hf.HF_FORMAT


def parse_qa(blob: bytes, field: str = "dataset_artifact_id") -> list[dict]:
    """The records of a QA JSONL artifact; InvalidArgument naming `field` (and the line) when malformed."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(field, "a QA dataset is UTF-8 JSONL") from None
    out, seen = [], set()
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise InvalidArgument(field, f"line {i + 1} is not JSON (a QA dataset is JSONL: one "
                                  '{"id", "question", "answer"} object a line)') from None
        if not isinstance(rec, dict):
            raise InvalidArgument(field, f"line {i + 1}: a record is a JSON object")
        for k in ("id", "question", "answer"):
            v = rec.get(k)
            if not isinstance(v, str) or not v.strip() or len(v) > MAX_TEXT:
                raise InvalidArgument(field, f"line {i + 1}: {k!r} must be a non-empty string of at most "
                                      f"{MAX_TEXT} characters")
        if rec["id"] in seen:
            raise InvalidArgument(field, f"line {i + 1}: duplicate id {rec['id']!r}")
        seen.add(rec["id"])
        out.append(rec)
    if not out:
        raise InvalidArgument(field, "no QA records")
    return out


def check_lm_request(method: str, config: dict, forget_ids: list[str], forgotten: set[str],
                     dataset_ids: set[str] | None) -> None:
    """The request checks of a causal LM (the service at request time, the job again)."""
    if method not in LM_METHODS:
        raise InvalidArgument("method", f"a causal language model is unlearned with {', '.join(LM_METHODS)} "
                              f"(got {method})")
    unknown = [r for r in forget_ids if dataset_ids is not None and r not in dataset_ids]
    if unknown:
        raise InvalidArgument("forget_record_ids", f"unknown record ids of the model's QA dataset: "
                              f"{', '.join(unknown[:5])}", reason="UNKNOWN_RECORD_IDS")
    excluded = set(config.get("excluded_record_ids") or [])
    already = [r for r in forget_ids if r in forgotten or r in excluded]
    if already:
        raise InvalidArgument("forget_record_ids", f"{len(already)} record ids were already forgotten from this "
                              f"dataset (e.g. {already[0]})", reason="ALREADY_FORGOTTEN")
    stale = set(forgotten) - excluded
    if stale:
        raise FailedPrecondition(f"this model version predates the deletion of {len(stale)} records from its "
                                 "dataset: unlearn from the newest version of its lineage", reason="STALE_VERSION")


def train_config(lm: LanguageModelParams | None, method: str, seed: int, *, training: bool) -> TrainConfig:
    lm = lm or LanguageModelParams()
    full = lm.adaptation == "full"
    lr = lm.learning_rate or ((1e-5 if full else 1e-3) if training else (1e-5 if full else 1e-4))
    dropout = lm.lora_dropout if lm.lora_dropout is not None else (0.0 if training else 0.05)
    return TrainConfig(method=method, divergence=lm.divergence, adaptation=lm.adaptation, lora_rank=lm.lora_rank,
                       lora_alpha=lm.lora_alpha, lora_dropout=dropout, lr=lr, weight_decay=lm.weight_decay,
                       epochs=lm.epochs, batch_size=lm.batch_size, grad_accum=lm.grad_accum,
                       max_length=lm.max_length, npo_beta=lm.npo_beta, npo_retain_weight=lm.npo_retain_weight,
                       seed=seed, templates=tuple(lm.template_answers or TEMPLATE_ANSWERS))


def _qa(recs: list[dict]) -> list[QA]:
    return [QA(r["question"], r["answer"], r["id"]) for r in recs]


def _probability(model, tok, pairs: list[tuple[str, str]]) -> float | None:
    from services.unlearning.llm_eval import avg_losses

    if not pairs:
        return None
    return float(torch.exp(-avg_losses(model, tok, pairs)).mean())


class LmRun:
    """flat.Trainer as Steps (run_steps): one optimiser step a step; the checkpoint is the trainer's state (the
    trainable weights, AdamW's state, the RNG, the step). setup reloads the source weights and measures the
    "before" numbers (deterministic: redone on a resume)."""

    def __init__(self, tensors: dict, config: dict, cfg: TrainConfig, forget: list[dict], retain: list[dict],
                 heldout: list[dict] | None, max_eval: int):
        self.tensors, self.config, self.cfg = tensors, config, cfg
        self.forget, self.retain, self.heldout, self.max_eval = forget, retain, heldout, max_eval

    def setup(self, ctx: JobContext) -> None:
        model, self.tok = hf.load_model(self.tensors, self.config)
        self.before = self.measure(model)
        try:
            self.trainer = Trainer(model, self.tok, _qa(self.forget), self.cfg, retain=_qa(self.retain))
        except ValueError as exc:  # e.g. a record longer than max_length
            raise InvalidArgument("language_model", str(exc)) from None

    @property
    def total(self) -> int:
        return self.trainer.total

    def message(self, done: int, total: int) -> str:
        return f"{self.cfg.method}: step {done}/{total}"

    def step(self, i: int) -> dict[str, float]:
        return self.trainer.step()

    def state(self) -> dict[str, Any]:
        return self.trainer.state()

    def load_state(self, st: dict[str, Any]) -> None:
        self.trainer.load_state(st)

    def measure(self, model) -> dict[str, float | None]:
        from services.unlearning.llm_eval import avg_losses

        f = [(r["question"], r["answer"]) for r in self.forget[:self.max_eval]]
        out = {"forget_probability": _probability(model, self.tok, f),
               "retain_probability": _probability(model, self.tok,
                                                  [(r["question"], r["answer"]) for r in self.retain[:self.max_eval]])}
        if self.cfg.method != "finetune":
            out["template_probability"] = _probability(
                model, self.tok, [(q, t) for q, _ in f[:16] for t in self.cfg.templates[:4]])
        if self.heldout:
            h = [(r["question"], r["answer"]) for r in self.heldout[:self.max_eval]]
            out["mia_auc"] = audit.auc(-avg_losses(model, self.tok, f), -avg_losses(model, self.tok, h))
        return out

    def result(self, ctx: JobContext) -> dict[str, Any]:
        model = self.trainer.final_model()
        after = self.measure(model)
        tensors, cfg_files = hf.from_pretrained_objects(model, self.tok)
        return {"tensors": tensors, "files": cfg_files, "before": self.before, "after": after,
                "last": dict(self.trainer.last), "steps": self.trainer.total}


def _metrics(before: dict, after: dict) -> dict[str, float]:
    m = {}
    for k, v in after.items():
        if v is not None:
            m[f"{k}_after"] = float(v)
    for k, v in before.items():
        if v is not None:
            m[f"{k}_before"] = float(v)
    return m


def _heldout(ctx: JobContext, artifact_id: str | None) -> list[dict] | None:
    if not artifact_id:
        return None
    return parse_qa(ctx.read_artifact(artifact_id), "eval_dataset_artifact_id")


def run_lm_unlearning(ctx: JobContext, p: UnlearnParams, tensors: dict, config: dict, *,
                      forget_ids_of: Callable, report_of: Callable, guarantee_of: Callable,
                      fingerprint: str) -> dict:
    """Forget QA records from a causal LM version (methods flat, npo, gradient_ascent)."""
    method, mvid = p.method, p.model_version_id
    check_lm_request(method, config, [], set(), None)
    ds_id = p.dataset_artifact_id or config.get("dataset_artifact_id")
    if not ds_id:
        raise FailedPrecondition("this language model has no QA dataset in its lineage: fine-tune it with "
                                 "StartTrainingJob(kind MODEL_KIND_CAUSAL_LM_QA) first", reason="NO_DATASET_LINEAGE")
    recs = parse_qa(ctx.read_artifact(ds_id))
    dropped = ctx.forgotten_records(ds_id)
    forget_ids = forget_ids_of(ctx, p)
    check_lm_request(method, config, forget_ids, dropped, {r["id"] for r in recs})
    excluded = list(config.get("excluded_record_ids") or [])
    fset = set(forget_ids)
    forget = [r for r in recs if r["id"] in fset]
    retain = [r for r in recs if r["id"] not in fset and r["id"] not in dropped and r["id"] not in set(excluded)]
    heldout = _heldout(ctx, p.eval_dataset_artifact_id)
    lm = p.language_model or LanguageModelParams()
    cfg = train_config(lm, method, p.seed, training=False)
    name = p.name or str(config.get("name") or "unlearned-lm")
    t0 = time.perf_counter()
    job = LmRun(tensors, config, cfg, forget, retain, heldout, lm.max_eval_records)
    out = run_steps(ctx, job, checkpoint_every=lm.checkpoint_every, message=job.message, progress_span=(0.0, 0.9),
                    fingerprint=fingerprint)
    metrics = _metrics(out["before"], out["after"])
    hyper = {k: getattr(cfg, k) for k in ("method", "divergence", "adaptation", "lora_rank", "lora_alpha",
                                          "lora_dropout", "lr", "weight_decay", "epochs", "batch_size", "grad_accum",
                                          "max_length", "npo_beta", "npo_retain_weight", "seed")}
    if method != "flat":
        hyper.pop("divergence")
        hyper.pop("max_length")
    if method != "npo":
        hyper.pop("npo_beta")
        hyper.pop("npo_retain_weight")
    mia = {k: out[k].get("mia_auc") for k in ("before", "after")} if heldout else {}
    report = {"certified": False, "certificate": None, "costs": {"steps": out["steps"]}, "metrics": metrics,
              "mia_auc": mia, "hyperparameters": hyper, "before": out["before"], "after": out["after"],
              "last_step": out["last"], "uses_retain_data": method == "npo" and cfg.npo_retain_weight > 0,
              "uses_reference_model": method == "npo"}
    report["guarantee"] = guarantee_of(method, report)
    new_excluded = list(dict.fromkeys(excluded + sorted(dropped - set(excluded)) + forget_ids))
    new_config = {k: v for k, v in config.items() if k not in out["files"]}
    new_config.update(out["files"])
    new_config.update({"name": name, "excluded_record_ids": new_excluded, "dataset_artifact_id": ds_id,
                       "parent_model_version_id": mvid, "unlearning_method": method, "guarantee": report["guarantee"],
                       "unlearning": hyper})
    report["costs"]["wall_s"] = time.perf_counter() - t0
    report.update({"job": "unlearn", "method": method, "parent_model_version_id": mvid,
                   "forget_count": len(forget), "retain_count": len(retain), "previously_excluded": len(excluded)})
    info = ctx.register_model(name, out["tensors"], kind=hf.REGISTRY_KIND, config=new_config, metrics=metrics,
                              dataset_artifact_id=ds_id, parent_version_ids=[mvid])
    ctx.forget_records(ds_id, forget_ids)
    report["model_version_id"] = info.model_version_id
    rid = report_of(ctx, "unlearning_report.json", report)
    ctx.progress(1.0, "unlearned", **metrics)
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "certified": False,
            "certificate": None, "regime": None, "costs": report["costs"], "metrics": metrics,
            "guarantee": report["guarantee"]}


def run_qa_finetune(ctx: JobContext, tp: TrainParams, *, report_of: Callable, fingerprint: str) -> dict:
    """unlearning.train, kind causal_lm_qa: fine-tune a registered causal LM on a QA dataset (answer-token NLL)."""
    if not tp.base_model_version_id:
        raise InvalidArgument("base_model", "name the causal language model to fine-tune")
    tensors, config = ctx.load_model(tp.base_model_version_id)
    if not is_lm_config(config):
        hf.check_version_config(config, "base_model")
    ds_id = tp.dataset_artifact_id
    recs = parse_qa(ctx.read_artifact(ds_id))
    dropped = ctx.forgotten_records(ds_id)
    train = [r for r in recs if r["id"] not in dropped]
    if not train:
        raise InvalidArgument("dataset_artifact_id", "no records left to train on (all were forgotten)")
    heldout = _heldout(ctx, tp.eval_dataset_artifact_id)
    lm = tp.language_model or LanguageModelParams()
    cfg = train_config(lm, "finetune", tp.seed, training=True)
    t0 = time.perf_counter()
    job = LmRun(tensors, config, cfg, train, [], heldout, lm.max_eval_records)
    out = run_steps(ctx, job, checkpoint_every=lm.checkpoint_every, message=job.message, fingerprint=fingerprint)
    metrics = _metrics(out["before"], out["after"])
    hyper = {k: getattr(cfg, k) for k in ("adaptation", "lora_rank", "lora_alpha", "lora_dropout", "lr",
                                          "weight_decay", "epochs", "batch_size", "grad_accum", "seed")}
    new_config = {k: v for k, v in config.items() if k not in out["files"]}
    new_config.update(out["files"])
    new_config.update({"name": tp.name, "dataset_artifact_id": ds_id, "excluded_record_ids": sorted(dropped),
                       "parent_model_version_id": tp.base_model_version_id, "qa_finetune": hyper,
                       "guarantee": None})
    new_config.pop("unlearning_method", None)
    info = ctx.register_model(tp.name, out["tensors"], kind=hf.REGISTRY_KIND, config=new_config, metrics=metrics,
                              dataset_artifact_id=ds_id, parent_version_ids=[tp.base_model_version_id])
    costs = {"steps": out["steps"], "wall_s": time.perf_counter() - t0}
    report = {"job": "train", "kind": "causal_lm_qa", "model_version_id": info.model_version_id, "costs": costs,
              "metrics": metrics, "hyperparameters": hyper, "n": len(train),
              "data": {"n": len(train), "forgotten_dropped": len(dropped)}}
    rid = report_of(ctx, "training_report.json", report)
    ctx.progress(1.0, "trained", **metrics)
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "certificate": None,
            "costs": costs, "metrics": metrics, "data": report["data"]}

