"""The recommendation service's long jobs, written against services.common.jobcontext.JobContext; parameters are
validated once with the job kind's model (params.py), whoever submitted them.

- run_import(ctx): raw CSV/TSV/Parquet artifact (or a builtin: ml-100k, synthetic) -> dataset artifact, with its
  split protocol (user_split | leave_one_out) recorded in the dataset.
- run_training(ctx): dataset artifact -> trained, evaluated, registered model (preferdiff | dreamrec | sasrec_ce |
  gru4rec | popularity); the epochs are training.TrainRun's steps under run_steps (progress, cancellation,
  checkpoints, deterministic resume).
- run_sweep(ctx): one child `recommendation.train` job per grid point (each registers its own model version), waited
  for without holding a worker; the table of validation/test metrics per point and the best point on validation.
"""
from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.recommendation.data import (DATASET_CONTENT_TYPE, Dataset, build_dataset, load_movielens_100k,
                                          read_interactions, synthetic_interactions)
from services.recommendation.params import (METRICS, ImportParams, SweepParams, SyntheticParams, TrainParams,
                                            grid_points)
from services.recommendation.recommender import MODEL_FORMAT, REGISTRY_KIND, load_recommender
from services.recommendation.training import TrainResult, TrainRun


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
SWEEP_CHILD_KIND = "recommendation.train"


def sweep_model_name(p: SweepParams, sweep_job_id: str, i: int) -> str:
    """Each point's child registers its own model: `<base model_name>-<i>`, or `rec-sweep-<first 8 hex digits of
    the sweep's job id>-<i>` when the base names none (one name per point, so a point's version is its own)."""
    return f"{p.base.get('model_name') or 'rec-sweep-' + sweep_job_id.replace('-', '')[:8]}-{i}"


def _split_metrics(metrics: dict[str, float], split: str) -> dict[str, float]:
    """The training job's flat metrics ("valid_masked_ndcg_10") back to a split's table ("masked_ndcg@10")."""
    return {m: metrics[f"{split}_{_metric_key(m)}"] for m in METRICS if f"{split}_{_metric_key(m)}" in metrics}


def sweep_row(point: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """One line of the table from a finished child: metrics of a point that trained, or the child's end state and
    reason (a failed or cancelled point does not fail the sweep)."""
    row: dict[str, Any] = {"point": point, "job_id": child["job_id"], "state": child["state"],
                           "seconds": child["seconds"], "valid": None, "test": None, "best_epoch": None,
                           "epochs_run": None, "model": None, "error": None}
    if child["state"] == "SUCCEEDED":
        r = child["result"]
        model = child["models"][0] if child["models"] else {"name": r["model_name"], "version": None}
        row.update(valid=_split_metrics(r["metrics"], "valid"), test=_split_metrics(r["metrics"], "test"),
                   best_epoch=r["best_epoch"], epochs_run=r["epochs_run"],
                   model={"name": model["name"], "version": model["version"],
                          "model_version_id": r["model_version_id"]})
    else:
        row["error"] = {"reason": child["error_reason"] or child["state"], "message": child["error_message"] or ""}
    return row


def run_sweep(ctx: JobContext) -> dict:
    """params: SweepParams. Every grid point is a child `recommendation.train` job (base + point, its own model
    name: sweep_model_name); the sweep starts them all, waits for them without holding a worker
    (JobContext.wait_for_children: a single worker runs the children meanwhile), then reports the table.
    Returns {"rows": [{point, job_id, state, valid, test, best_epoch, epochs_run, seconds, model {name, version,
    model_version_id}, error}], "best_point", "best_test", "best_job_id", "metric", "protocol"}; the best point is
    chosen on validation among the points that trained. Re-run from the start after each wait: cheap, since
    start_child returns the existing child for a point's key."""
    p = parse_params(SweepParams, ctx.params, prefix="params.")
    points = grid_points(p)
    configs = []  # every point is validated now, so a bad grid fails before any training
    for i, pt in enumerate(points):
        data = {**p.base, **pt, "dataset_artifact_id": p.dataset_artifact_id,
                "model_name": sweep_model_name(p, ctx.job_id, i)}
        configs.append(parse_params(TrainParams, data, prefix="params.base."))
    ids = [ctx.start_child(SWEEP_CHILD_KIND, cfg.model_dump(exclude_none=True), key=f"point-{i}")
           for i, cfg in enumerate(configs)]
    children = ctx.wait_for_children(ids)
    rows = [sweep_row(pt, child) for pt, child in zip(points, children, strict=True)]
    m = p.metric
    trained = [r for r in rows if r["state"] == "SUCCEEDED"]
    best = max(trained, key=lambda r: r["valid"][m]) if trained else None
    protocol = next((c["result"]["protocol"] for c in children if c["state"] == "SUCCEEDED"), None)
    ctx.progress(0.99, f"{len(trained)}/{len(rows)} grid points trained")
    return {"protocol": protocol, "metric": m, "rows": rows, "best_point": best["point"] if best else None,
            "best_test": best["test"][m] if best else None, "best_job_id": best["job_id"] if best else None}


__all__ = ["run_import", "run_training", "run_sweep", "load_recommender"]
