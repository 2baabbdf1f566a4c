"""Long jobs of the moderation service, written against services.common.jobcontext.JobContext.

run_guard_training(ctx)          params: see GuardTrainParams.parse. Trains a guard ("frozen_linear" or "finetune")
                                 from a labeled dataset artifact (praxon / BingoGuard / WildGuardMix JSONL) or the
                                 packaged seed set, reports progress per Newton iteration / epoch, checkpoints after
                                 each one, resumes from the last checkpoint, registers the model.
run_policy_scorer_training(ctx)  trains the SafeWatch-style rule scorer (policies.py) and registers it.
run_calibration(ctx)             Conformal Fairness thresholds over a guard's severity predictions (conformal.py):
                                 see CalibrationParams; registers kind "guard.conformal".
run_distillation(ctx)            HarmAug distillation of a guard into a small student (distill.py, augment.py): see
                                 DistillParams; registers kind "guard.student".
"""
from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import FieldViolation, InvalidArgument
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
from services.moderation.metrics import average_precision, f1_score, guard_metrics
from services.moderation.policies import train_policy_scorer
from services.moderation.schema import (
    GuardExample,
    dump_guard_jsonl,
    import_bingoguard,
    import_wildguardmix,
    load_seed_dataset,
    parse_guard_jsonl,
    validate_row,
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


# ================================================================================================ calibration
# run_calibration(ctx)   Conformal Fairness thresholds for a guard's severity predictions (conformal.py).
# run_distillation(ctx)  HarmAug distillation of a guard into a small student (distill.py, augment.py).
_CAL_CHUNK = 64          # rows per progress step
_CAL_CKPT_EVERY = 4      # chunks per checkpoint


def _check(ok: bool, f: str, msg: str) -> None:
    if not ok:
        raise InvalidArgument(f"params.{f}", msg)


def _isint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _isnum(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _parse_known(cls: type, params: dict[str, Any]) -> Any:
    known = set(cls.__dataclass_fields__)
    for k in params:
        if k not in known:
            raise InvalidArgument(f"params.{k}", "unknown parameter")
    return cls(**params)


@dataclass(frozen=True)
class CalibrationParams:
    guard_model_version_id: str = ""
    dataset_artifact_id: str = ""            # praxon guard JSONL + a group column
    format: str = "praxon"                   # the only format with a group column
    group_field: str = "group"
    alpha: float = 0.1
    c: float | None = None                   # None: 0.1 (coverage gap), 0.8 (disparate impact ratio)
    tolerance: float | None = None           # the API's name for c (give one of them)
    metric: str = "equal_opportunity"        # conformal.METRICS; "none" = plain split conformal
    score: str = "tps"
    distribution: str = "top_topic"
    classwise: bool = True
    eval_fraction: float = 0.3               # held out (per group) to report coverage and gaps before/after
    seed: int = 0
    model_name: str = "guard-conformal"

    @classmethod
    def parse(cls, params: dict[str, Any]) -> CalibrationParams:
        from services.moderation import conformal as cf

        p = _parse_known(cls, params)
        _check(isinstance(p.guard_model_version_id, str) and bool(p.guard_model_version_id),
               "guard_model_version_id", "required: the guard model version to calibrate")
        _check(isinstance(p.dataset_artifact_id, str) and bool(p.dataset_artifact_id), "dataset_artifact_id",
               "required: a JSONL calibration set with a group column")
        _check(p.format == "praxon", "format", "calibration needs praxon guard JSONL rows with a group column")
        _check(isinstance(p.group_field, str) and 0 < len(p.group_field) <= 100, "group_field", "1..100 characters")
        _check(_isnum(p.alpha) and 0 < p.alpha < 1, "alpha", "must be in (0, 1)")
        _check(p.c is None or p.tolerance is None, "tolerance", "give c or tolerance, not both")
        _check(p.metric in cf.METRICS, "metric", f"must be one of {list(cf.METRICS)}")
        _check(p.score in cf.SCORE_KINDS, "score", f"must be one of {list(cf.SCORE_KINDS)}")
        _check(p.distribution in cf.DISTRIBUTIONS, "distribution", f"must be one of {list(cf.DISTRIBUTIONS)}")
        _check(isinstance(p.classwise, bool), "classwise", "must be true or false")
        c = p.tolerance if p.c is None else p.c
        c = cf.default_closeness(p.metric) if c is None else c
        if p.metric in cf.RATIO_METRICS:
            _check(_isnum(c) and 0 < c <= 1, "c", "a disparate-impact ratio must be in (0, 1]")
        else:
            _check(_isnum(c) and 0 <= c < 1, "c", "a coverage gap must be in [0, 1)")
        _check(_isnum(p.eval_fraction) and 0 <= p.eval_fraction < 1, "eval_fraction", "must be in [0, 1)")
        _check(_isint(p.seed), "seed", "must be an integer")
        _check(isinstance(p.model_name, str) and 0 < len(p.model_name) <= 100, "model_name", "1..100 characters")
        return replace(p, c=float(c), tolerance=None)


def parse_grouped_jsonl(data: bytes, group_field: str) -> tuple[list[GuardExample], list[str]]:
    """Guard JSONL rows (schema.validate_row) each with a non-empty string/int `group_field`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument("rows", f"dataset is not valid UTF-8 (byte {e.start})") from None
    rows, groups, vs = [], [], []
    for i, line in enumerate(text.split("\n")):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            vs.append(FieldViolation(f"rows[{i}]", f"invalid JSON: {e.msg} at column {e.colno}"))
            continue
        ex, row_vs = validate_row(obj, i)
        g = obj.get(group_field) if isinstance(obj, dict) else None
        if isinstance(g, bool) or not isinstance(g, (str, int)) or str(g).strip() == "":
            row_vs = row_vs + [FieldViolation(f"rows[{i}].{group_field}", "must be a non-empty string or integer")]
        vs.extend(row_vs)
        if ex is not None and not row_vs:
            rows.append(ex)
            groups.append(str(g))
        if len(vs) >= 20:
            break
    if vs:
        raise InvalidArgument(violations=vs[:20])
    if not rows:
        raise InvalidArgument("rows", "dataset has no rows")
    return rows, groups


def severity_label(ex: GuardExample) -> int | None:
    """A row's severity: the max known severity over its topics; 0 for a safe row; None if unknown."""
    if ex.severity:
        return int(max(ex.severity.values()))
    return None if ex.unsafe else 0


def _eval_split(groups: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """bool mask of held-out rows: `fraction` of each group, by a seeded permutation."""
    rng = np.random.default_rng(seed)
    held = np.zeros(len(groups), dtype=bool)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        k = round(fraction * len(idx))
        if fraction > 0 and len(idx) >= 2:
            held[rng.permutation(idx)[:max(1, min(k, len(idx) - 1))]] = True
    return held


def run_calibration(ctx: JobContext) -> dict[str, Any]:
    """params: CalibrationParams. Scores every row with the guard (its serving path, predict_proba), calibrates on
    the non-held-out rows, reports coverage / group gaps of plain conformal vs Conformal Fairness on the held-out
    rows (and in-sample), and registers kind "guard.conformal" (tensors: thresholds [5], q_hat [1])."""
    from services.moderation import conformal as cf

    p = CalibrationParams.parse(dict(ctx.params))
    data = ctx.read_artifact(p.dataset_artifact_id)
    rows, group_names = parse_grouped_jsonl(data, p.group_field)
    labels_all = [severity_label(r) for r in rows]
    keep = [i for i, y in enumerate(labels_all) if y is not None]
    if not keep:
        raise InvalidArgument("params.dataset_artifact_id", "no row has a known severity")
    rows = [rows[i] for i in keep]
    labels = np.array([labels_all[i] for i in keep], dtype=np.int64)
    names = sorted({group_names[i] for i in keep})
    if len(names) < 2:
        raise InvalidArgument("params.dataset_artifact_id", "the calibration set needs at least two groups")
    gid = {g: k for k, g in enumerate(names)}
    groups = np.array([gid[group_names[i]] for i in keep], dtype=np.int64)
    tensors, gconfig = ctx.load_model(p.guard_model_version_id)
    guard = GuardModel.from_registry(tensors, gconfig, version=p.guard_model_version_id)

    digest = hashlib.sha256(data + p.guard_model_version_id.encode() + p.group_field.encode()).hexdigest()
    st = ctx.load_checkpoint()
    if st is None or st.get("kind") != "calibration" or st.get("digest") != digest:
        st = {"kind": "calibration", "digest": digest, "done": 0,
              "topics": torch.zeros(0, 11, dtype=torch.float64), "severity_ge": torch.zeros(0, 11, 4, dtype=torch.float64)}
    topics, sev_ge = [st["topics"].numpy()], [st["severity_ge"].numpy()]
    done, n, chunks = int(st["done"]), len(rows), 0
    while done < n:
        ctx.check_cancelled()
        part = rows[done:done + _CAL_CHUNK]
        pr = guard.predict_proba([r.text for r in part], [r.role for r in part])
        topics.append(pr["topics"])
        sev_ge.append(pr["severity_ge"])
        done += len(part)
        chunks += 1
        if chunks % _CAL_CKPT_EVERY == 0 or done == n:
            ctx.save_checkpoint({**st, "done": done, "topics": torch.from_numpy(np.concatenate(topics)),
                                 "severity_ge": torch.from_numpy(np.concatenate(sev_ge))})
        ctx.progress(0.9 * done / n, "scoring calibration rows")
    proba = {"topics": np.concatenate(topics), "severity_ge": np.concatenate(sev_ge)}

    ctx.check_cancelled()
    scores = cf.class_scores(cf.severity_distribution(proba, p.distribution), p.score)
    held = _eval_split(groups, p.eval_fraction, p.seed)
    cal = ~held
    fc = cf.fair_thresholds(scores[cal], labels[cal], groups[cal], alpha=p.alpha, c=p.c, metric=p.metric,
                            classwise=p.classwise)
    plain_th = np.full(cf.N_LEVELS, fc.q_hat)
    report: dict[str, Any] = {}
    metrics: dict[str, float] = {"q_hat": fc.q_hat, "n_calibration": float(cal.sum()), "n_eval": float(held.sum())}
    for part_name, mask in (("calibration", cal), ("eval", held)):
        if not mask.any():
            continue
        for method, th in (("plain", plain_th), ("fair", fc.thresholds)):
            rep = cf.fairness_report(cf.prediction_set_mask(scores[mask], th), labels[mask], groups[mask], p.metric,
                                     n_groups=len(names))
            report[f"{part_name}_{method}"] = rep
            for k in ("coverage", "violation", "gap", "ratio", "mean_set_size"):
                metrics[f"{part_name}_{method}_{k}"] = rep[k]
    model = cf.ConformalSeverity.from_calibration(
        fc, score_kind=p.score, distribution=p.distribution, groups=names,
        guard_model_version_id=p.guard_model_version_id, classwise=p.classwise, group_field=p.group_field,
        label="max known severity over the row's topics (0 for a safe row)", n_calibration=int(cal.sum()),
        dataset_sha256=hashlib.sha256(data).hexdigest())
    t, cfg = model.to_registry()
    info = ctx.register_model(p.model_name, t, kind="guard.conformal", config=cfg, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id,
                              parent_version_ids=[p.guard_model_version_id])
    ctx.progress(1.0, "registered", **{k: v for k, v in metrics.items() if np.isfinite(v)})
    return {"model_version_id": info.model_version_id, "name": info.name, "version": info.version,
            "thresholds": [float(v) for v in fc.thresholds], "q_hat": fc.q_hat,
            "satisfied": [bool(v) for v in fc.satisfied], "groups": names, "metrics": metrics, "report": report,
            "n_skipped_unknown_severity": len(labels_all) - len(keep)}


# ================================================================================================ distillation
_DIST_CHUNK = 64
_DIST_CKPT_EVERY = 4


@dataclass(frozen=True)
class DistillParams:
    teacher_model_version_id: str = ""
    dataset_artifact_id: str | None = None   # None: the packaged seed set
    format: str = "praxon"
    validation_fraction: float = 0.2
    model_name: str = "guard-student"
    n_augment: int = 1200                    # generated texts (teacher-labelled); 0 = plain distillation only
    augment: bool | None = None              # the API's switch: False = n_augment 0
    augment_seed: int = 0
    train_plain: bool = True                 # also train the no-augmentation student, as the baseline
    dim: int = 64
    hidden: int = 64
    buckets: int = 4096
    min_count: int = 1
    max_vocab: int = 50_000
    epochs: int = 30
    batch_size: int = 32
    lr: float = 5e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_norm: float = 1.0
    aux_weight: float = 0.5
    seed: int = 0

    @classmethod
    def parse(cls, params: dict[str, Any]) -> DistillParams:
        from services.moderation.distill import StudentConfig

        p = _parse_known(cls, params)
        _check(isinstance(p.teacher_model_version_id, str) and bool(p.teacher_model_version_id),
               "teacher_model_version_id", "required: the guard model version to distill")
        _check(p.dataset_artifact_id is None or (isinstance(p.dataset_artifact_id, str) and p.dataset_artifact_id),
               "dataset_artifact_id", "must be an artifact id")
        _check(p.format in FORMATS, "format", f"must be one of {list(FORMATS)}")
        _check(_isnum(p.validation_fraction) and 0 <= p.validation_fraction < 1, "validation_fraction",
               "must be in [0, 1)")
        _check(isinstance(p.model_name, str) and 0 < len(p.model_name) <= 100, "model_name", "1..100 characters")
        _check(_isint(p.n_augment) and 0 <= p.n_augment <= 100_000, "n_augment", "must be an integer in 0..100000")
        _check(_isint(p.augment_seed), "augment_seed", "must be an integer")
        _check(isinstance(p.train_plain, bool), "train_plain", "must be true or false")
        _check(p.augment is None or isinstance(p.augment, bool), "augment", "must be true or false")
        if p.augment is False:
            p = replace(p, n_augment=0)
        StudentConfig(p.dim, p.hidden, p.buckets, p.min_count, p.max_vocab).validate()
        _check(_isint(p.epochs) and 1 <= p.epochs <= 1000, "epochs", "must be an integer in 1..1000")
        _check(_isint(p.batch_size) and 1 <= p.batch_size <= 4096, "batch_size", "must be 1..4096")
        _check(_isnum(p.lr) and 0 < p.lr < 1, "lr", "must be in (0, 1)")
        _check(_isnum(p.weight_decay) and 0 <= p.weight_decay < 1, "weight_decay", "must be in [0, 1)")
        _check(_isnum(p.warmup_fraction) and 0 <= p.warmup_fraction < 1, "warmup_fraction", "must be in [0, 1)")
        _check(_isnum(p.max_norm) and p.max_norm > 0, "max_norm", "must be > 0")
        _check(_isnum(p.aux_weight) and p.aux_weight >= 0, "aux_weight", "must be >= 0")
        _check(_isint(p.seed), "seed", "must be an integer")
        _check(p.train_plain or p.n_augment > 0, "n_augment", "nothing to train: n_augment is 0 and train_plain false")
        return p


def _unsafe_metrics(prefix: str, p_unsafe: np.ndarray, y: np.ndarray) -> dict[str, float]:
    if len(y) == 0:
        return {}
    out = {f"{prefix}_val_unsafe_f1": f1_score(p_unsafe >= 0.5, y > 0.5),
           f"{prefix}_val_unsafe_auprc": average_precision(p_unsafe, y > 0.5)}
    return {k: float(v) for k, v in out.items() if np.isfinite(v)}


def run_distillation(ctx: JobContext) -> dict[str, Any]:
    """params: DistillParams. Teacher = the registered guard `teacher_model_version_id`. Steps (checkpointed):
    teacher labels for train + augmented + validation texts; the plain student (train rows only) and the HarmAug
    student (train + augmented rows), an epoch a step; F1 / AUPRC (unsafe) of teacher, plain and augmented
    students on the validation split; registers the augmented student (kind "guard.student") with the metrics."""
    from services.moderation.augment import TemplateGenerator
    from services.moderation.distill import (
        StudentConfig,
        StudentTrainer,
        TrainConfig,
        Vocabulary,
        encode_data,
    )

    p = DistillParams.parse(dict(ctx.params))
    gp = GuardTrainParams(dataset_artifact_id=p.dataset_artifact_id, format=p.format,
                          validation_fraction=p.validation_fraction)
    rows = load_examples(ctx, gp)
    train, val = split_examples(rows, p.validation_fraction)
    if not train:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset has no training rows")
    tensors, tconfig = ctx.load_model(p.teacher_model_version_id)
    teacher = GuardModel.from_registry(tensors, tconfig, version=p.teacher_model_version_id)
    gen = TemplateGenerator()
    aug = gen.generate(p.n_augment, seed=p.augment_seed, exclude=[r.text for r in rows]) if p.n_augment else []
    texts = [r.text for r in train] + [a.text for a in aug] + [r.text for r in val]
    roles = [r.role for r in train] + [a.role for a in aug] + [r.role for r in val]
    n_tr, n_aug = len(train), len(aug)
    digest = hashlib.sha256(json.dumps([p.teacher_model_version_id, texts, roles]).encode()).hexdigest()

    st = ctx.load_checkpoint()
    if st is None or st.get("kind") != "distillation" or st.get("digest") != digest:
        st = {"kind": "distillation", "digest": digest, "done": 0, "unsafe": torch.zeros(0, dtype=torch.float64),
              "topics": torch.zeros(0, 11, dtype=torch.float64),
              "severity_ge": torch.zeros(0, 11, 4, dtype=torch.float64), "metrics": {}}
    parts = {k: [st[k].numpy()] for k in ("unsafe", "topics", "severity_ge")}
    done, chunks = int(st["done"]), 0
    while done < len(texts):
        ctx.check_cancelled()
        pr = teacher.predict_proba(texts[done:done + _DIST_CHUNK], roles[done:done + _DIST_CHUNK])
        for k, v in parts.items():
            v.append(pr[k])
        done = min(len(texts), done + _DIST_CHUNK)
        chunks += 1
        if chunks % _DIST_CKPT_EVERY == 0 or done == len(texts):
            st = {**st, "done": done, **{k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}}
            ctx.save_checkpoint(st)
        ctx.progress(0.4 * done / len(texts), "teacher labels")
    tl = {k: np.concatenate(v) for k, v in parts.items()}

    y_val = np.array([float(r.unsafe) for r in val])
    metrics: dict[str, float] = dict(st.get("metrics", {}))
    metrics.update(_unsafe_metrics("teacher", tl["unsafe"][n_tr + n_aug:], y_val))
    hard_tr = np.array([int(r.unsafe) for r in train])
    hard_aug = (tl["unsafe"][n_tr:n_tr + n_aug] > 0.5).astype(np.int64)
    scfg = StudentConfig(p.dim, p.hidden, p.buckets, p.min_count, p.max_vocab)
    tc = TrainConfig(epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay,
                     warmup_fraction=p.warmup_fraction, max_norm=p.max_norm, aux_weight=p.aux_weight, seed=p.seed)
    runs = ([("plain", n_tr)] if p.train_plain else []) + ([("augmented", n_tr + n_aug)] if n_aug else [])
    student = None
    for ri, (name, n_rows) in enumerate(runs):
        last = ri == len(runs) - 1
        if st.get(f"{name}_done") and not last:
            continue  # finished before a crash: its metrics are in st["metrics"], its weights are not needed
        lo, hi = 0.4 + 0.55 * ri / len(runs), 0.4 + 0.55 * (ri + 1) / len(runs)
        t_texts, t_roles = texts[:n_rows], roles[:n_rows]
        hard = np.concatenate([hard_tr, hard_aug])[:n_rows]
        vocab = Vocabulary.build(t_texts, buckets=scfg.buckets, min_count=scfg.min_count, max_size=scfg.max_vocab)
        d = encode_data(vocab, t_texts, t_roles, hard, {k: v[:n_rows] for k, v in tl.items()})
        trainer = StudentTrainer(vocab, scfg, tc, n_rows)
        key = f"{name}_trainer"
        epoch = int(st.get(f"{name}_epoch", 0))
        if key in st:
            trainer.load_state(st[key])
        while epoch < p.epochs:
            ctx.check_cancelled()
            loss = trainer.train_epoch(d, epoch)
            epoch += 1
            st = {**{k: v for k, v in st.items() if not k.endswith("_trainer")}, key: trainer.state(),
                  f"{name}_epoch": epoch}
            ctx.save_checkpoint(st)
            ctx.progress(lo + (hi - lo) * epoch / p.epochs, f"{name} student epoch {epoch}", loss=loss)
        student = trainer.to_student()
        if val:
            pv = student.predict_proba([r.text for r in val], [r.role for r in val])["unsafe"]
            metrics.update(_unsafe_metrics("plain" if name == "plain" else "student", pv, y_val))
        if not last:
            st = {**{k: v for k, v in st.items() if k != key}, "metrics": dict(metrics), f"{name}_done": True}
            ctx.save_checkpoint(st)
    assert student is not None
    metrics.update(n_train=float(n_tr), n_augment=float(n_aug), n_validation=float(len(val)),
                   augment_teacher_unsafe_fraction=float(hard_aug.mean()) if n_aug else 0.0)
    student.config = {"teacher_model_version_id": p.teacher_model_version_id, "augmented": bool(n_aug),
                      "augment_generator": gen.name if n_aug else None, "n_train": n_tr, "n_augment": n_aug,
                      "train": {k: v for k, v in asdict(tc).items()},
                      "loss": "0.5*(CE(hard)+KL(teacher||student)) + aux_weight*BCE(topics,severity; teacher)"}
    t, cfg = student.to_registry()
    info = ctx.register_model(p.model_name, t, kind="guard.student", config=cfg, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id,
                              parent_version_ids=[p.teacher_model_version_id])
    ctx.progress(1.0, "registered", **metrics)
    return {"model_version_id": info.model_version_id, "name": info.name, "version": info.version,
            "metrics": metrics, "student_fingerprint": student.fingerprint(), "augmented": bool(n_aug)}
