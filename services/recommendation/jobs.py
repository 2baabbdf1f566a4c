"""The recommendation service's long jobs, written against services.common.jobcontext.JobContext; parameters are
validated once with the job kind's model (params.py), whoever submitted them.

- run_import(ctx): raw CSV/TSV/Parquet artifact (or a builtin: ml-100k, synthetic) -> dataset artifact, with its
  split protocol (user_split | leave_one_out) recorded in the dataset.
- run_training(ctx): dataset artifact -> trained, evaluated, registered model (preferdiff | dreamrec | sasrec_ce |
  gru4rec | popularity); the epochs are training.TrainRun's steps under run_steps (progress, cancellation,
  checkpoints, deterministic resume).
- run_sweep(ctx): one training run per grid point, each a checkpointed step (a killed sweep resumes at the next
  point), and the table of validation/test metrics. Simplification: the points run inside the sweep job, one after
  the other, not as separate child jobs (the job context has no way to submit jobs); the table and the best point
  are the result, no model is registered.
"""
from __future__ import annotations

import time
from typing import Any

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.recommendation.data import (DATASET_CONTENT_TYPE, Dataset, build_dataset, load_movielens_100k,
                                          read_interactions, synthetic_interactions)
from services.recommendation.params import (ImportParams, SweepParams, SyntheticParams, TrainParams,
                                            grid_points)
from services.recommendation.recommender import MODEL_FORMAT, REGISTRY_KIND, load_recommender
from services.recommendation.training import TrainResult, TrainRun, fit


# --------------------------------------------------------------------------------------------------- import job
def run_import(ctx: JobContext) -> dict:
    """params: ImportParams. Returns {"dataset_artifact_id", n_users, n_items, n_interactions, n_train_users, ...,
    "protocol"}."""
    p = parse_params(ImportParams, ctx.params, prefix="params.")
    ctx.progress(0.0, "reading interactions")
    if p.builtin == "ml-100k":
        df, source = load_movielens_100k(), "ml-100k"
    elif p.builtin == "synthetic":
        syn = (p.synthetic or SyntheticParams()).model_dump()
        syn["seed"] = syn.pop("synthetic_seed")
        df, source = synthetic_interactions(**syn), "synthetic"
    else:
        df, source = read_interactions(ctx.read_artifact(p.artifact_id), fmt=p.format), f"artifact:{p.artifact_id}"
    ctx.check_cancelled()
    ctx.progress(0.5, f"building sequences ({p.protocol})")
    ds = build_dataset(df, seed=p.seed, max_history=p.max_history, source=source, protocol=p.protocol)
    stats = ds.stats()
    name = p.name or f"rec-dataset-{source.replace(':', '-')}"
    aid = ctx.write_artifact(name, ds.to_bytes(), DATASET_CONTENT_TYPE, metadata=stats)
    ctx.progress(1.0, "dataset written", n_users=float(stats["n_users"]), n_items=float(stats["n_items"]),
                 n_interactions=float(stats["n_interactions"]))
    return {"dataset_artifact_id": aid, **stats}


# ------------------------------------------------------------------------------------------------- training job
def _metric_key(name: str) -> str:
    return name.replace("@", "_")


def result_metrics(result: TrainResult) -> dict[str, float]:
    """test_/valid_ Recall and NDCG @5/10/20, unmasked ("test_ndcg_10") and masked ("test_masked_ndcg_10")."""
    metrics = {f"test_{_metric_key(k)}": v for k, v in result.test_metrics.items()}
    metrics.update({f"valid_{_metric_key(k)}": v for k, v in result.valid_metrics.items()})
    metrics["best_epoch"] = float(result.best_epoch)
    metrics["epochs_run"] = float(result.epochs_run)
    metrics["seconds_to_best"] = float(result.seconds_to_best)
    return metrics


class TrainingJob(TrainRun):
    """TrainRun whose data come from the dataset artifact and whose result is a registered model version."""

    def __init__(self, cfg: TrainParams):
        super().__init__(cfg)

    def setup(self, ctx: JobContext) -> None:
        self.dataset = Dataset.from_bytes(ctx.read_artifact(self.cfg.dataset_artifact_id),
                                          field="params.dataset_artifact_id")
        super().setup(ctx)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        cfg, ds = self.cfg, self.dataset
        result = self.finish()
        metrics = result_metrics(result)
        tensors = {"popularity": result.popularity.clone()}
        if result.model is not None:
            tensors.update({f"model.{k}": v.detach().clone() for k, v in result.model.state_dict().items()})
        mcfg = result.model_config.to_dict() if result.model_config else {
            "kind": "popularity", "n_items": ds.n_items, "max_history": cfg.max_history or ds.max_history}
        config = {"format": MODEL_FORMAT, "model_kind": cfg.model_kind, "model": mcfg, "item_ids": ds.item_ids,
                  "seed": cfg.seed, "protocol": ds.protocol, "train": cfg.model_dump()}
        name = cfg.model_name or f"rec-{cfg.model_kind}"
        info = ctx.register_model(name, tensors, kind=REGISTRY_KIND, config=config, metrics=metrics,
                                  dataset_artifact_id=cfg.dataset_artifact_id)
        ctx.progress(1.0, "model registered", **{k: v for k, v in metrics.items() if k.startswith("test_")})
        return {"model_version_id": info.model_version_id, "model_name": info.name, "model_kind": cfg.model_kind,
                "protocol": ds.protocol, "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
                "metrics": metrics}


def run_training(ctx: JobContext) -> dict:
    """params: TrainParams (dataset_artifact_id required). Returns the registered version's id and name, the
    dataset's protocol and the validation/test metrics (masked and unmasked)."""
    cfg = parse_params(TrainParams, ctx.params, prefix="params.")
    if not cfg.dataset_artifact_id:
        raise InvalidArgument("params.dataset_artifact_id", "required: the id of an imported dataset artifact")
    job = TrainingJob(cfg)
    return run_steps(ctx, job, message=lambda done, total: f"epoch {done}/{cfg.epochs}" +
                     (" (early stop)" if job.stopped else ""))


# ---------------------------------------------------------------------------------------------------- sweep job
class Sweep:
    """One step per grid point: train base + point to its end, record its metrics."""

    def __init__(self, p: SweepParams):
        self.p = p
        self.points = grid_points(p)
        self.total = len(self.points)
        self.rows: list[dict[str, Any]] = []
        # every point is validated now, so a bad grid fails before any training
        self.configs = [parse_params(TrainParams, {**p.base, **pt}, prefix="params.base.") for pt in self.points]

    def setup(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.dataset = Dataset.from_bytes(ctx.read_artifact(self.p.dataset_artifact_id),
                                          field="params.dataset_artifact_id")

    def step(self, i: int) -> dict[str, float]:
        t0 = time.perf_counter()
        r = fit(self.configs[i], self.dataset, on_epoch=lambda e, m: self.ctx.check_cancelled())
        row = {"point": self.points[i], "valid": r.valid_metrics, "test": r.test_metrics,
               "best_epoch": r.best_epoch, "epochs_run": r.epochs_run, "seconds": time.perf_counter() - t0}
        self.rows.append(row)
        return {f"valid_{_metric_key(self.p.metric)}": r.valid_metrics[self.p.metric],
                f"test_{_metric_key(self.p.metric)}": r.test_metrics[self.p.metric]}

    def state(self) -> dict[str, Any]:
        return {"rows": self.rows}

    def load_state(self, state: dict[str, Any]) -> None:
        self.rows = list(state["rows"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        m = self.p.metric
        best = max(self.rows, key=lambda r: r["valid"][m]) if self.rows else None
        return {"protocol": self.dataset.protocol, "metric": m, "rows": self.rows,
                "best_point": best["point"] if best else None,
                "best_test": best["test"][m] if best else None}


def run_sweep(ctx: JobContext) -> dict:
    """params: SweepParams. Returns {"rows": [{point, valid, test, best_epoch, epochs_run, seconds}], "best_point",
    "best_test", "metric", "protocol"}; the best point is chosen on validation."""
    p = parse_params(SweepParams, ctx.params, prefix="params.")
    return run_steps(ctx, Sweep(p), message=lambda done, total: f"grid point {done}/{total}")


__all__ = ["run_import", "run_training", "run_sweep", "load_recommender"]
