"""moderation.calibrate: Conformal Fairness thresholds over a guard's severity predictions (conformal.py), registered
as kind "guard.conformal". Scoring the rows is the job's steps under run_steps (a killed job resumes where it was)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import torch

from services.common.errors import FieldViolation, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.moderation.params import CalibrationParams
from services.moderation.schema import GuardExample, validate_row

_CAL_CHUNK = 64          # rows a step
_CAL_CKPT_EVERY = 4      # steps per checkpoint


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


class Calibration:
    """The Steps of one calibration: the guard's topic and severity probabilities for _CAL_CHUNK rows a step; then
    (result) the thresholds, their coverage and fairness report, and the registered model."""

    def __init__(self, p: CalibrationParams, data: bytes, rows: list[GuardExample], labels: np.ndarray,
                 groups: np.ndarray, names: list[str], n_skipped: int):
        self.p, self.data, self.rows, self.labels, self.groups, self.names = p, data, rows, labels, groups, names
        self.n_skipped = n_skipped
        self.total = -(-len(rows) // _CAL_CHUNK)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.data + self.p.guard_model_version_id.encode() + self.p.group_field.encode()
                              ).hexdigest()

    def setup(self, ctx: JobContext) -> None:
        from services.moderation.gemma_guard import guard_from_registry  # any teacher kind, the Gemma guard too

        tensors, gconfig = ctx.load_model(self.p.guard_model_version_id)
        self.guard = guard_from_registry(tensors, gconfig, version=self.p.guard_model_version_id)
        self.topics: list[np.ndarray] = []
        self.sev_ge: list[np.ndarray] = []

    def step(self, i: int) -> None:
        part = self.rows[i * _CAL_CHUNK:(i + 1) * _CAL_CHUNK]
        pr = self.guard.predict_proba([r.text for r in part], [r.role for r in part], [r.prompt for r in part])
        self.topics.append(pr["topics"])
        self.sev_ge.append(pr["severity_ge"])

    def state(self) -> dict[str, Any]:
        return {"topics": torch.from_numpy(np.concatenate(self.topics)),
                "severity_ge": torch.from_numpy(np.concatenate(self.sev_ge))}

    def load_state(self, st: dict[str, Any]) -> None:
        self.topics, self.sev_ge = [st["topics"].numpy()], [st["severity_ge"].numpy()]

    def result(self, ctx: JobContext) -> dict[str, Any]:
        from services.moderation import conformal as cf

        p, labels, groups, names = self.p, self.labels, self.groups, self.names
        proba = {"topics": np.concatenate(self.topics), "severity_ge": np.concatenate(self.sev_ge)}
        scores = cf.class_scores(cf.severity_distribution(proba, p.distribution), p.score)
        held = _eval_split(groups, p.eval_fraction, p.seed)
        cal = ~held
        fc = cf.fair_thresholds(scores[cal], labels[cal], groups[cal], alpha=p.alpha, c=p.closeness(),
                                metric=p.metric, classwise=p.classwise)
        plain_th = np.full(cf.N_LEVELS, fc.q_hat)
        report: dict[str, Any] = {}
        metrics: dict[str, float] = {"q_hat": fc.q_hat, "n_calibration": float(cal.sum()),
                                     "n_eval": float(held.sum())}
        for part_name, mask in (("calibration", cal), ("eval", held)):
            if not mask.any():
                continue
            for method, th in (("plain", plain_th), ("fair", fc.thresholds)):
                rep = cf.fairness_report(cf.prediction_set_mask(scores[mask], th), labels[mask], groups[mask],
                                         p.metric, n_groups=len(names))
                report[f"{part_name}_{method}"] = rep
                for k in ("coverage", "violation", "gap", "ratio", "mean_set_size"):
                    metrics[f"{part_name}_{method}_{k}"] = rep[k]
        model = cf.ConformalSeverity.from_calibration(
            fc, score_kind=p.score, distribution=p.distribution, groups=names,
            guard_model_version_id=p.guard_model_version_id, classwise=p.classwise, group_field=p.group_field,
            label="max known severity over the row's topics (0 for a safe row)", n_calibration=int(cal.sum()),
            dataset_sha256=hashlib.sha256(self.data).hexdigest())
        t, cfg = model.to_registry()
        info = ctx.register_model(p.model_name, t, kind="guard.conformal", config=cfg, metrics=metrics,
                                  dataset_artifact_id=p.dataset_artifact_id,
                                  parent_version_ids=[p.guard_model_version_id])
        ctx.progress(1.0, "registered", **{k: v for k, v in metrics.items() if np.isfinite(v)})
        return {"model_version_id": info.model_version_id, "name": info.name,
                "thresholds": [float(v) for v in fc.thresholds], "q_hat": fc.q_hat,
                "satisfied": [bool(v) for v in fc.satisfied], "groups": names, "metrics": metrics,
                "report": report, "n_skipped_unknown_severity": self.n_skipped}


def run_calibration(ctx: JobContext) -> dict[str, Any]:
    """params: CalibrationParams. Scores every row with the guard (its serving path, predict_proba), calibrates on
    the non-held-out rows, reports coverage / group gaps of plain conformal vs Conformal Fairness on the held-out
    rows (and in-sample), and registers kind "guard.conformal" (tensors: thresholds [5], q_hat [1])."""
    p = parse_params(CalibrationParams, ctx.params, prefix="params.")
    data = ctx.read_artifact(p.dataset_artifact_id)
    rows, group_names = parse_grouped_jsonl(data, p.group_field)
    labels_all = [severity_label(r) for r in rows]
    keep = [i for i, y in enumerate(labels_all) if y is not None]
    if not keep:
        raise InvalidArgument("params.dataset_artifact_id", "no row has a known severity")
    names = sorted({group_names[i] for i in keep})
    if len(names) < 2:
        raise InvalidArgument("params.dataset_artifact_id", "the calibration set needs at least two groups")
    gid = {g: k for k, g in enumerate(names)}
    job = Calibration(p, data, [rows[i] for i in keep], np.array([labels_all[i] for i in keep], dtype=np.int64),
                      np.array([gid[group_names[i]] for i in keep], dtype=np.int64), names,
                      n_skipped=len(labels_all) - len(keep))
    return run_steps(ctx, job, checkpoint_every=_CAL_CKPT_EVERY, progress_span=(0.0, 0.9),
                     message=lambda done, total: "scoring calibration rows", fingerprint=job.fingerprint())
