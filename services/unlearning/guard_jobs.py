"""Certified deletion from a registered moderation guard (kind frozen_linear): the unlearning job's branch for
guard versions. The guard's objective, rows, labels and features come from the moderation service's adapter
(services/moderation/heads.py, found through catalog.model_adapter: this service imports nothing of moderation);
the descent is newton.py's.

The guard's training set is its lineage dataset (a praxon guard JSONL artifact) split the way the moderation
trainer splits it (the rows' own "split" when any row has one, else the hash-of-text split at
validation_fraction), minus every record tombstoned by earlier unlearning jobs; a record id is the row's "id"
(or "row-<line>" without one). Features are the guard's frozen MiniLM features phi, computed by the adapter exactly
as the guard's trainer computes them.

The new version keeps the guard's tensors ("heads.*"), kind and config (so the moderation service loads and
serves it like any guard), with the certificate, the private pre-noise state and the excluded records added."""
from __future__ import annotations

import time
from typing import Any

import torch

from services import catalog
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.state import loads_state
from services.unlearning import audit, certified
from services.unlearning.newton import DTYPE, newton_to_radius
from services.unlearning.params import UnlearnParams, fingerprint

GUARD_METHODS = ("certified_noisy_minimizer", "retrain")


def adapter_of(config: dict):
    """The guard-heads adapter when `config` is a version of such heads (catalog.model_adapter), else None."""
    found = catalog.model_adapter(config)
    return found if found is not None and found.name == "guard_frozen_linear" else None


def check_guard_request(method: str, config: dict) -> float:
    if method not in GUARD_METHODS:
        raise FailedPrecondition(f"method {method} is not available for moderation guards: use "
                                 "certified_noisy_minimizer (certified) or retrain", reason="NOT_CERTIFIABLE",
                                 metadata={"method": method, "suggested_method": "certified_noisy_minimizer"})
    return adapter_of(config).check_certifiable(config)


class GuardUnlearning:
    """The guard's deletion as Steps: step 0 computes the frozen encoder's features of the training and validation
    rows (its own progress, below 0.35; kept in the checkpoint so a resumed job does not encode again), then one
    damped Newton iteration a step on the retain rows, the last of which draws the secret noise (kept in the
    checkpoint before anything is published)."""

    def __init__(self, adapter, problem, config: dict, rows: list, val_rows: list, keep: list[int],
                 theta0: torch.Tensor, r: float, eps: float, delta: float, start: str, max_steps: int):
        self.adapter, self.problem, self.config = adapter, problem, config
        self.rows, self.val_rows, self.keep = rows, val_rows, keep
        self.theta0, self.r, self.eps, self.delta, self.start, self.max_steps = theta0, r, eps, delta, start, max_steps

    def setup(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.Y, self.Y_val = self.adapter.labels(self.rows), self.adapter.labels(self.val_rows)
        self.phi: torch.Tensor | None = None
        # Newton converges in a handful of iterations (the hint is for progress only)
        self.newton = certified.CertifiedRun(self.problem, self._chunk, every=1, hint=20, radius=self.r,
                                             epsilon=self.eps, delta=self.delta, start=self.start)

    @property
    def total(self) -> int:
        return 1 + self.newton.total

    def message(self, done: int, total: int) -> str:
        return "features" if done == 1 else f"newton: step {self.newton.step}"

    def _features_ready(self, phi: torch.Tensor, phi_val: torch.Tensor) -> None:
        self.phi, self.phi_val = phi.to(DTYPE), phi_val.to(DTYPE)
        keep_t = torch.tensor(self.keep, dtype=torch.long)
        self.Xr, self.Yr = self.phi[keep_t], self.Y[keep_t]

    def _chunk(self, state: certified.GDState | None, k: int) -> certified.GDResult:
        return newton_to_radius(self.problem, self.Xr, self.Yr, self.theta0, self.r, max_steps=self.max_steps,
                                state=state, max_iters=k)

    def step(self, i: int) -> dict[str, float] | None:
        if i == 0:
            self._features_ready(self.adapter.features(self.ctx, self.config, self.rows, 0.0, 0.3),
                                 self.adapter.features(self.ctx, self.config, self.val_rows, 0.3, 0.35))
            return None
        return {"grad_norm": self.newton.advance()["grad_norm"]}

    def state(self) -> dict[str, Any]:
        return {"phi": self.phi, "phi_val": self.phi_val, **self.newton.state()}

    def load_state(self, st: dict[str, Any]) -> None:
        self._features_ready(st["phi"], st["phi_val"])
        self.newton.load_state(st)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        return {"out": self.newton.publish()}


def run_guard_unlearning(ctx: JobContext, p: UnlearnParams, tensors: dict, config: dict, *,
                         forget_ids_of, write_state, report_of, guarantee_of) -> dict:
    """The guard branch of jobs.run_unlearning (the helpers are jobs.py's, passed in to keep one definition)."""
    l2 = check_guard_request(p.method, config)
    adapter = adapter_of(config)
    mvid = p.model_version_id
    ds_id = p.dataset_artifact_id or config.get("dataset_artifact_id")
    if not ds_id:
        raise FailedPrecondition("the guard was trained on the packaged seed set (no dataset artifact in its "
                                 "lineage): records cannot be named", reason="NO_DATASET_LINEAGE")

    eps, delta = certified.privacy_budget(p.epsilon, p.delta, config if config.get("certificate") else None)
    r = p.r if p.r is not None else float(config.get("r", 1e-3))
    rows, ids, val_rows = adapter.records(ctx.read_artifact(ds_id), config)
    forgotten = ctx.forgotten_records(ds_id)
    excluded = set(config.get("excluded_record_ids") or [])
    forget_ids = forget_ids_of(ctx, p)
    known = set(ids)
    unknown = [f for f in forget_ids if f not in known]
    if unknown:
        raise InvalidArgument("forget_record_ids", "unknown record ids of the guard's training set: "
                              + ", ".join(unknown[:5]), reason="UNKNOWN_RECORD_IDS")
    already = [f for f in forget_ids if f in forgotten or f in excluded]
    if already:
        raise InvalidArgument("forget_record_ids", f"{len(already)} record ids were already forgotten (e.g. "
                              f"{already[0]})", reason="ALREADY_FORGOTTEN")
    gone = set(forget_ids) | forgotten | excluded
    keep = [i for i, rid in enumerate(ids) if rid not in gone]
    forget_idx = [i for i, rid in enumerate(ids) if rid in set(forget_ids)]
    if not keep:
        raise InvalidArgument("forget_record_ids", "nothing would be left to train on")
    problem = adapter.problem(mu=l2, dim=int(config["feature_dim"]))
    t0 = time.perf_counter()
    if config.get("state_artifact_id"):
        theta_start = loads_state(ctx.read_artifact(config["state_artifact_id"]))["theta_start"].to(DTYPE)
        start_source = "private_state"
    else:  # the moderation trainer publishes its exact minimizer without noise: that is the warm start
        theta_start = problem.from_tensors(tensors)
        start_source = "published_weights"
    start = "zero" if p.method == "retrain" else "warm"
    job = GuardUnlearning(adapter, problem, config, rows, val_rows, keep, theta_start if start == "warm" else problem.zeros(),
                          r, eps, delta, start, max_steps=min(p.max_steps, 200))
    out = run_steps(ctx, job, message=job.message, progress_span=(0.35, 0.9),
                    fingerprint=fingerprint(ctx, "unlearn_guard"))["out"]
    phi, phi_val, Xr, Yr, Y_val = job.phi, job.phi_val, job.Xr, job.Yr, job.Y_val
    forget_t = torch.tensor(forget_idx, dtype=torch.long)
    state_id = write_state(ctx, out.theta_private, out.theta_private)
    cert = out.certificate.to_dict()
    new_tensors = {k: v for k, v in tensors.items() if not k.startswith("heads.")}
    new_tensors.update(problem.to_tensors(out.theta_published))
    metrics = {f"retain_{k}": v for k, v in problem.utility(out.theta_published, Xr, Yr).items()}
    mia: dict[str, Any] = {}
    if len(val_rows) and len(forget_idx):
        Xf, Yf = phi[forget_t], job.Y[forget_t]
        theta_old = problem.from_tensors(tensors)

        def mia_at(theta):
            return audit.loss_mia_auc(lambda A, B: problem.per_example_loss(theta, A, B), (Xf, Yf), (phi_val, Y_val))

        mia = {"before": mia_at(theta_old), "after": mia_at(out.theta_published)}
        metrics.update({f"mia_auc_{k}": v for k, v in mia.items()})
        metrics.update({f"val_{k}": v for k, v in problem.utility(out.theta_published, phi_val, Y_val).items()})
    new_excluded = list(dict.fromkeys(list(config.get("excluded_record_ids") or [])
                                      + [i for i in ids if i in forgotten] + forget_ids))
    report = {"certified": True, "certificate": cert, "kind": "guard_frozen_linear",
              "regime": {"regime": "guard", "start": start, "start_source": start_source},
              "costs": {"grad_evals": cert["grad_evals"], "steps": cert["steps"], "newton_steps": cert["steps"],
                        "wall_s": time.perf_counter() - t0},
              "mia_auc": mia, "metrics": metrics}
    report["guarantee"] = guarantee_of(p.method, report)
    new_config = dict(config)
    if config.get("decision_defaults") and len(val_rows):
        # the parent's thresholds were chosen with heads trained on the forgotten records: choose them again with
        # the published (unlearned) heads on the same validation rows, as the guard's trainer does
        new_config["decision_defaults"] = adapter.decision_defaults(new_tensors, config, phi_val, val_rows)
    new_config.update({"mu": l2, "r": r, "epsilon": eps, "delta": delta, "sigma": out.certificate.sigma,
                       "certificate": cert, "state_artifact_id": state_id, "excluded_record_ids": new_excluded,
                       "dataset_artifact_id": ds_id, "parent_model_version_id": mvid, "unlearning_method": p.method,
                       "n_retained": len(keep), "guarantee": report["guarantee"]})  # n_train: the split's size
    name = p.name or str(config.get("name") or "guard")
    info = ctx.register_model(name, new_tensors, kind="guard/frozen_linear", config=new_config, metrics=metrics,
                              dataset_artifact_id=ds_id, parent_version_ids=[mvid])
    ctx.forget_records(ds_id, forget_ids)
    report.update({"job": "unlearn", "method": p.method, "parent_model_version_id": mvid,
                   "forget_count": len(forget_idx), "retain_count": len(keep), "model_version_id": info.model_version_id})
    rid = report_of(ctx, "unlearning_report.json", report)
    ctx.progress(1.0, "unlearned", **{k: float(v) for k, v in metrics.items()})
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "certified": True,
            "certificate": cert, "regime": report["regime"], "costs": report["costs"], "metrics": metrics,
            "guarantee": report["guarantee"]}
