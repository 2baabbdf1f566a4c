"""The unlearning service's long jobs, written against services.common.jobcontext.JobContext.

  run_training(ctx)   train a certified (noisy-published) L2 linear model from a dataset artifact
  run_unlearning(ctx) forget records from a model version; registers the new version and a JSON report
  run_audit(ctx)      audit an unlearned version: empirical epsilon vs retraining, MIA AUC, utility gap
Parameters are typed (params.py: TrainParams, UnlearnParams, AuditParams), parsed once here from ctx.params.
The long part of each job is a Steps object (Training, ConvexUnlearning, ApproximateUnlearning, AuditRetraining)
under services.common.jobcontext.run_steps, which owns resume, cancellation, checkpoints and progress; a step
advances a descent by `checkpoint_every` iterations (certified.CertifiedRun).
Branches: kind dpsgd_softmax trains and audit method hidden_state_canary audits in dpsgd_jobs.py; a moderation
guard version (moderation's guard-heads adapter: guard_jobs.adapter_of) is unlearned in guard_jobs.py. Every unlearning result carries its
"guarantee" (certified (eps, delta) for a named mechanism, or audited_only).

Model config convention for the linear kinds (what run_training registers, what run_unlearning reads):
  kind                 "logreg_l2" | "softmax_l2" | "ridge_l2" ("frozen_linear" heads are read as softmax_l2
                       and need "mu" in the config or in params)
  mu, r                L2 regularisation (strong convexity) and certified radius
  epsilon, delta       the (eps, delta) the published weights were certified for; sigma the noise used
  feature_dim, num_classes
  dataset_artifact_id  the training-data artifact (see data.py); params may override it
  state_artifact_id    PRIVATE state artifact (safetensors via services.common.state) holding the pre-noise
                       warm start "theta_start" [P] float64; never published. Without it the published
                       (noisy) weights are the warm start: still certified, just slower.
  excluded_record_ids  records already forgotten by this lineage (cumulative)
  robust               null, or {"trim", "capacity", "removed"} for robust training (robust.py)
  certificate          the certificate of these weights
Weights: {"W": [C, D], "b": [C]} float32.
Non-convex kinds: any kind with a module builder (approximate.register_module_builder; "mlp_classifier"
is built in); config "feature_dim", "num_classes", "dataset_artifact_id".
"""
from __future__ import annotations

import json
import math
import time
from typing import Any

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.common.state import dumps_state, loads_state
from services.unlearning import approximate, audit, certified, guard_jobs, robust
from services.unlearning.data import Dataset, decode_forget_set, parse_forget_ids, read_dataset
from services.unlearning.linear import (DTYPE, LinearProblem, canonical_kind, is_convex_kind,
                                       problem_from_config)
from services.unlearning.params import FIELD_PATHS, AuditParams, TrainParams, UnlearnParams, fingerprint, require_mu

CERTIFIED_METHODS = ("certified_noisy_minimizer", "robust_certified")
# flat and npo unlearn causal language models only (llm_jobs.py; gradient_ascent serves both)
METHODS = CERTIFIED_METHODS + approximate.METHODS + ("flat", "npo")
STATE_CONTENT_TYPE = "application/vnd.praxon.unlearning-state+safetensors"
REPORT_CONTENT_TYPE = "application/json"

DEFAULTS = {"r": 1e-3, "epsilon": certified.DEFAULT_EPSILON, "delta": certified.DEFAULT_DELTA, "max_steps": 100_000, "checkpoint_every": 50,
            "robust_max_steps": 1000, "robust_noise_std": 0.0}


# ---- parameters ------------------------------------------------------------------------------------------
def check_forget_request(method: str, config: dict, forget_ids: list[str], forgotten: set[str],
                         dataset_ids: set[str] | dict | None = None) -> None:
    """The checks of an unlearning request that need no descent: run by the service at request time (so bad
    input is INVALID_ARGUMENT / FAILED_PRECONDITION on the call) and again by the job (authoritative).
    `forgotten`: the dataset's tombstones; `dataset_ids`: the ids the dataset holds before dropping them
    (None: not checked here)."""
    if method not in METHODS:
        raise InvalidArgument("method", f"one of {', '.join(METHODS)}")
    from services.unlearning import llm_jobs

    if llm_jobs.is_lm_config(config):
        return llm_jobs.check_lm_request(method, config, forget_ids, forgotten,
                                         None if dataset_ids is None else set(dataset_ids))
    if method in llm_jobs.LM_ONLY_METHODS:
        raise InvalidArgument("method", f"method {method} unlearns causal language models; this version is of kind "
                              f"{config.get('kind', '')!r}")
    kind = str(config.get("kind", ""))
    convex = is_convex_kind(kind)
    if guard_jobs.adapter_of(config) is not None:
        guard_jobs.check_guard_request(method, config)
        convex = True
    elif method in CERTIFIED_METHODS and not convex:
        raise FailedPrecondition(f"model kind {kind!r} is non-convex: use method noisy_finetune (uncertified); "
                                 f"method {method} cannot certify it", reason="NOT_CERTIFIABLE",
                                 metadata={"method": method, "kind": kind, "suggested_method": "noisy_finetune"})
    excluded = set(config.get("excluded_record_ids") or [])
    if method == "robust_certified":
        robust_cfg = config.get("robust")
        if not robust_cfg:
            raise FailedPrecondition("this model was not trained robustly: method robust_certified cannot certify "
                                     "it; use method certified_noisy_minimizer, or retrain with capacity > 0",
                                     reason="NOT_ROBUST", metadata={"method": method,
                                                                    "suggested_method": "certified_noisy_minimizer"})
        if robust_cfg["removed"] + len(forget_ids) > robust_cfg["capacity"]:
            raise FailedPrecondition(
                f"robust deletion capacity exhausted ({robust_cfg['removed']} + {len(forget_ids)} > "
                f"{robust_cfg['capacity']}): use certified_noisy_minimizer or retrain", reason="CAPACITY_EXHAUSTED",
                metadata={"method": method, "suggested_method": "certified_noisy_minimizer"})
    unknown = [r for r in forget_ids if dataset_ids is not None and r not in dataset_ids]
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
        raise InvalidArgument("forget_record_ids", f"unknown record ids of the model's training dataset: {shown}",
                              reason="UNKNOWN_RECORD_IDS")
    already = [r for r in forget_ids if r in forgotten or r in excluded]
    if already:
        raise InvalidArgument("forget_record_ids", f"{len(already)} record ids were already forgotten from this "
                              f"dataset (e.g. {already[0]})", reason="ALREADY_FORGOTTEN")
    stale = set(forgotten) - excluded
    if stale and not (convex and method in ("certified_noisy_minimizer", "retrain")):
        raise FailedPrecondition(
            f"this model version predates the deletion of {len(stale)} records from its dataset and method "
            f"{method} cannot remove their influence: unlearn from the newest version of its lineage, or use "
            "method certified_noisy_minimizer (or retrain)", reason="STALE_VERSION",
            metadata={"method": method, "suggested_method": "certified_noisy_minimizer"})


def _forget_ids(ctx: JobContext, p: UnlearnParams) -> list[str]:
    if p.forget_record_ids is not None and p.forget_set_artifact_id:
        raise InvalidArgument("forget_record_ids", "give forget_record_ids or forget_set_artifact_id, not both")
    if p.forget_record_ids is not None:
        return parse_forget_ids(p.forget_record_ids)
    if p.forget_set_artifact_id:
        return decode_forget_set(ctx.read_artifact(p.forget_set_artifact_id))
    raise InvalidArgument("forget_record_ids", "name the records to forget (or forget_set_artifact_id)")


def _write_state(ctx: JobContext, theta_start: torch.Tensor, theta_private: torch.Tensor) -> str:
    blob = dumps_state({"theta_start": theta_start.to(DTYPE).clone(), "theta_private": theta_private.to(DTYPE).clone()})
    return ctx.write_artifact("unlearning_state.safetensors", blob, STATE_CONTENT_TYPE,
                              metadata={"visibility": "private", "purpose": "certified unlearning warm start"})


def _read_state(ctx: JobContext, config: dict, problem: LinearProblem, tensors: dict) -> tuple[torch.Tensor, str]:
    sid = config.get("state_artifact_id")
    if sid:
        st = loads_state(ctx.read_artifact(sid))
        theta = st["theta_start"].to(DTYPE)
        if theta.numel() != problem.num_params:
            raise FailedPrecondition("the model's private unlearning state does not match its weights")
        return theta, "private_state"
    return problem.from_tensors(tensors), "published_weights"


def _report(ctx: JobContext, name: str, report: dict) -> str:
    return ctx.write_artifact(name, json.dumps(report, indent=2, sort_keys=True, default=float).encode(),
                              REPORT_CONTENT_TYPE, metadata={"kind": "unlearning_report"})


def _num_classes(kind: str, num_classes: int, y: torch.Tensor) -> int:
    if kind != "softmax_l2":
        return 1
    if num_classes:
        return num_classes
    return int(y.max()) + 1 if y.numel() else 2


# ---- training --------------------------------------------------------------------------------------------
class Training:
    """unlearning.train of the linear kinds as Steps (run_steps owns resume, cancellation and progress): with a
    deletion capacity, robust training first (`every` iterations a step), then the descent to radius r (`every`
    iterations a step). The step that finishes the descent draws the secret noise: run_steps checkpoints the state
    after it, so the draw is kept privately before anything is published and a resumed job publishes that one
    release."""

    def __init__(self, tp: TrainParams, problem: LinearProblem, X: torch.Tensor, y: torch.Tensor, eps: float,
                 delta: float, trim: int | None):
        self.tp, self.problem, self.X, self.y, self.eps, self.delta, self.trim = tp, problem, X, y, eps, delta, trim
        self.every = tp.checkpoint_every

    def setup(self, ctx: JobContext) -> None:
        self.robust_st: robust.RobustState | None = None
        self.robust_chunks = 0
        self.robust_done: dict | None = None
        # hint: progress only, the number of descent steps is not known in advance
        self.erm = certified.CertifiedRun(self.problem, self._erm_chunk, every=self.every, hint=1000,
                                          radius=self.tp.r, epsilon=self.eps, delta=self.delta,
                                          start="zero" if self.trim is None else "warm")

    @property
    def robust_phase(self) -> bool:
        return self.trim is not None and self.robust_done is None

    @property
    def total(self) -> int:
        if self.trim is None:
            return self.erm.total
        robust_total = self.robust_chunks if self.robust_done is not None else math.ceil(
            self.tp.robust_max_steps / self.every)
        return robust_total + self.erm.total

    def message(self, done: int, total: int) -> str:
        if self.robust_phase:
            return f"robust: step {self.robust_st.step if self.robust_st else 0}"
        return f"erm: step {self.erm.step}"

    def theta0(self) -> torch.Tensor:
        return self.problem.zeros() if self.trim is None else self.robust_done["theta"].to(DTYPE)

    def _erm_chunk(self, state: certified.GDState | None, k: int) -> certified.GDResult:
        return certified.gd_to_radius(self.problem, self.X, self.y, self.theta0(), self.tp.r,
                                      max_steps=self.tp.max_steps, state=state, max_iters=k)

    def step(self, i: int) -> dict[str, float]:
        tp = self.tp
        if self.robust_phase:
            res = robust.robust_train(self.problem, self.X, self.y, trim=self.trim, seed=tp.seed,
                                      max_steps=tp.robust_max_steps, noise_std=tp.robust_noise_std,
                                      state=self.robust_st, max_iters=self.every)
            self.robust_st, self.robust_chunks = res.state, self.robust_chunks + 1
            if res.finished:
                self.robust_done = {"theta": res.theta, "steps": res.steps, "grad_evals": res.grad_evals,
                                    "direction_norm": res.direction_norm}
            return {"direction_norm": res.direction_norm}
        return self.erm.advance()

    def state(self) -> dict[str, Any]:
        return {"phase": "robust" if self.robust_phase else "erm",
                "robust": None if self.robust_st is None else self.robust_st.to_dict(),
                "robust_chunks": self.robust_chunks, "robust_done": self.robust_done, **self.erm.state()}

    def load_state(self, st: dict[str, Any]) -> None:
        self.robust_st = None if st["robust"] is None else robust.RobustState.from_dict(st["robust"])
        self.robust_chunks, self.robust_done = int(st["robust_chunks"]), st["robust_done"]
        self.erm.load_state(st)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        return {"out": self.erm.publish()}


def run_training(ctx: JobContext) -> dict:
    """Train an L2 linear model to radius r and publish it through the Gaussian mechanism (so a trained
    model and a retrained one are outputs of the same procedure).

    params: dataset_artifact_id, kind (logreg_l2 | softmax_l2 | ridge_l2), mu, r, epsilon, delta, name,
            seed (robust training's minibatch order only: the published noise is always secret and fresh),
            num_classes (softmax; default max label + 1), capacity (> 0: robust training that keeps
            unlearning of up to `capacity` arbitrary points cheap), trim_fraction, robust_noise_std,
            max_steps, eval_dataset_artifact_id (optional held-out data for metrics)."""
    tp = parse_params(TrainParams, ctx.params)
    if tp.kind == "dpsgd_softmax":
        from services.unlearning import dpsgd_jobs

        return dpsgd_jobs.run_dpsgd_training(ctx, tp)
    if tp.kind == "causal_lm_qa":
        from services.unlearning import llm_jobs

        return llm_jobs.run_qa_finetune(ctx, tp, report_of=_report, fingerprint=fingerprint(ctx, "train"))
    kind = canonical_kind(tp.kind)
    mu = require_mu(tp)
    r, (eps, delta), capacity = tp.r, certified.privacy_budget(tp.epsilon, tp.delta), tp.capacity
    ds_id = tp.dataset_artifact_id
    ds, dropped = read_dataset(ctx, ds_id, "dataset_artifact_id")
    if len(ds) == 0:
        raise InvalidArgument("dataset_artifact_id", "no records left to train on (all were forgotten)")
    problem = LinearProblem(kind=kind, mu=mu, dim=ds.X.shape[1], num_outputs=_num_classes(kind, tp.num_classes, ds.y))
    X, y = problem.check_data(ds.X, ds.y, "dataset_artifact_id")
    name = tp.name
    trim = robust.trim_count(len(ds), capacity, tp.trim_fraction) if capacity > 0 else None

    t0 = time.perf_counter()
    job = Training(tp, problem, X, y, eps, delta, trim)
    out = run_steps(ctx, job, message=job.message, fingerprint=fingerprint(ctx, "train"))["out"]
    robust_info, robust_evals = None, 0
    if trim is not None:
        done = job.robust_done
        robust_evals = int(done["grad_evals"])
        robust_info = {"trim": trim, "capacity": capacity, "removed": 0, "steps": int(done["steps"]),
                       "grad_evals": robust_evals, "noise_std": tp.robust_noise_std}
    # The warm start kept for later requests: the minimizer approximation, or the robust iterate.
    theta_start = job.theta0() if trim is not None else out.theta_private
    state_id = _write_state(ctx, theta_start, out.theta_private)
    cert = out.certificate.to_dict()
    metrics = {f"train_{k}": v for k, v in problem.utility(out.theta_published, X, y).items()}
    if tp.eval_dataset_artifact_id:
        ev = read_dataset(ctx, tp.eval_dataset_artifact_id, "eval_dataset_artifact_id")[0]
        metrics.update({f"eval_{k}": v for k, v in problem.utility(out.theta_published, ev.X, ev.y).items()})
    config = {"kind": kind, "name": name, "mu": mu, "r": r, "epsilon": eps, "delta": delta,
              "sigma": out.certificate.sigma, "feature_dim": problem.dim, "num_classes": problem.num_outputs,
              "dataset_artifact_id": ds_id, "state_artifact_id": state_id, "excluded_record_ids": dropped,
              "robust": robust_info, "certificate": cert}
    info = ctx.register_model(name, problem.to_tensors(out.theta_published), kind=kind, config=config,
                              metrics=metrics, dataset_artifact_id=ds_id)
    costs = {"grad_evals": out.certificate.grad_evals + robust_evals, "robust_grad_evals": robust_evals,
             "erm_grad_evals": out.certificate.grad_evals, "steps": out.certificate.steps,
             "wall_s": time.perf_counter() - t0}
    report = {"job": "train", "model_version_id": info.model_version_id, "certificate": cert, "costs": costs,
              "metrics": metrics, "robust": robust_info, "n": len(ds),
              "data": {"n": len(ds), "forgotten_dropped": len(dropped), "record_ids_sha256": ds.fingerprint()}}
    rid = _report(ctx, "training_report.json", report)
    ctx.progress(1.0, "trained", **{k: float(v) for k, v in metrics.items()})
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "certificate": cert,
            "costs": costs, "metrics": metrics, "data": report["data"]}


# ---- unlearning ------------------------------------------------------------------------------------------
MECHANISMS = {
    "certified_noisy_minimizer": "gaussian output perturbation of a noisy minimizer approximation "
                                 "(Allouah et al. 2025, Algorithm 1)",
    "robust_certified": "gaussian output perturbation after robust (trimmed-mean) training "
                        "(Allouah et al. 2025, Algorithm 2, reconstructed)",
    "retrain": "retraining on the retain set, published through the same gaussian output perturbation",
}


def guarantee(method: str, report: dict) -> dict:
    """What an unlearning record promises: "certified" ((eps, delta) indistinguishability from retraining,
    proved for the named mechanism) or "audited_only" (no proof: the report's empirical evidence only)."""
    cert = report.get("certificate") or {}
    if report.get("certified") and cert.get("certified"):
        eps, delta = float(cert["epsilon"]), float(cert["delta"])
        return {"kind": "certified", "epsilon": eps, "delta": delta, "mechanism": MECHANISMS.get(method, method),
                "statement": f"the published weights are ({eps:g}, {delta:g})-indistinguishable from retraining "
                             "without the forgotten records and publishing through the same mechanism"}
    mia = report.get("mia_auc") or {}
    evidence = ", ".join(f"membership-inference AUC {k} {v:.3f}" for k, v in mia.items() if v is not None)
    return {"kind": "audited_only", "epsilon": None, "delta": None, "mechanism": method,
            "statement": f"method {method} carries no proof of forgetting; evidence is empirical only"
                         + (f" ({evidence})" if evidence else "")}


def _mia(loss_fn, forget: tuple, heldout: tuple | None) -> float | None:
    if heldout is None or forget[0].shape[0] == 0:
        return None
    return audit.loss_mia_auc(loss_fn, forget, heldout)


def run_unlearning(ctx: JobContext) -> dict:
    """Forget records from a model version.

    params: model_version_id, forget_record_ids | forget_set_artifact_id, method (one of METHODS),
            epsilon, delta (certified methods; default: the model's), seed, name, dataset_artifact_id
            (default: the model config's), eval_dataset_artifact_id (held-out data: utility + MIA),
            max_steps, allow_retrain_fallback (certified_noisy_minimizer: restart from 0 when the request is
            out-of-distribution, default true), mu (for frozen_linear heads without one);
            approximate methods: steps, lr, batch_size, noise_std."""
    p = parse_params(UnlearnParams, ctx.params, field_paths=FIELD_PATHS)
    method, mvid, seed = p.method, p.model_version_id, p.seed
    eps_in = p.epsilon, p.delta
    tensors, config = ctx.load_model(mvid)
    if guard_jobs.adapter_of(config) is not None:
        return guard_jobs.run_guard_unlearning(ctx, p, tensors, config, forget_ids_of=_forget_ids,
                                               write_state=_write_state, report_of=_report, guarantee_of=guarantee)
    from services.unlearning import llm_jobs

    if llm_jobs.is_lm_config(config):  # a causal language model: flat, npo or gradient ascent on QA records
        return llm_jobs.run_lm_unlearning(ctx, p, tensors, config, forget_ids_of=_forget_ids, report_of=_report,
                                          guarantee_of=guarantee, fingerprint=fingerprint(ctx, "unlearn"))
    kind = str(config.get("kind", ""))
    convex = is_convex_kind(kind)
    check_forget_request(method, config, [], set())
    if method in CERTIFIED_METHODS or (convex and method == "retrain"):
        eps, delta = certified.privacy_budget(p.epsilon, p.delta, config)
    elif eps_in != (None, None):
        eps, delta = certified.privacy_budget(p.epsilon, p.delta, config)  # validated even where they do not apply
    ds_id = p.dataset_artifact_id or config.get("dataset_artifact_id")
    if not ds_id:
        raise InvalidArgument("dataset_artifact_id", "the model config names no training data: pass it")
    ds, dropped = read_dataset(ctx, ds_id, "dataset_artifact_id")
    forget_ids = _forget_ids(ctx, p)
    check_forget_request(method, config, forget_ids, set(dropped), set(ds.record_ids) | set(dropped))
    excluded = list(config.get("excluded_record_ids") or [])
    retain_mask, forget_mask = ds.split(forget_ids, excluded=excluded)
    if int(retain_mask.sum()) == 0:
        raise InvalidArgument("forget_record_ids", "nothing would be left to train on")
    heldout = None
    if p.eval_dataset_artifact_id:
        ev = read_dataset(ctx, p.eval_dataset_artifact_id, "eval_dataset_artifact_id")[0]
        heldout = (ev.X, ev.y)
    name = p.name or str(config.get("name") or "unlearning-model")
    # everything this lineage no longer holds: earlier exclusions, records tombstoned since, this request
    new_excluded = list(dict.fromkeys(excluded + dropped + forget_ids))
    t0 = time.perf_counter()
    if convex and method in CERTIFIED_METHODS + ("retrain",):
        job: ConvexUnlearning | ApproximateUnlearning = ConvexUnlearning(
            p, method, config, tensors, ds, retain_mask, forget_mask, eps, delta, heldout)
    else:
        job = ApproximateUnlearning(p, method, config, tensors, ds, retain_mask, forget_mask, seed, heldout)
    out = run_steps(ctx, job, message=job.message, progress_span=(0.0, 0.9), fingerprint=fingerprint(ctx, "unlearn"))
    new_tensors, new_config, report, metrics = out["tensors"], out["config"], out["report"], out["metrics"]
    report["guarantee"] = guarantee(method, report)
    new_config["guarantee"] = report["guarantee"]
    new_config.update({"name": name, "excluded_record_ids": new_excluded, "dataset_artifact_id": ds_id,
                       "parent_model_version_id": mvid, "unlearning_method": method})
    report["costs"]["wall_s"] = time.perf_counter() - t0
    report.update({"job": "unlearn", "method": method, "parent_model_version_id": mvid,
                   "forget_count": int(forget_mask.sum()), "retain_count": int(retain_mask.sum()),
                   "previously_excluded": len(excluded)})
    info = ctx.register_model(name, new_tensors, kind=kind, config=new_config, metrics=metrics,
                              dataset_artifact_id=ds_id, parent_version_ids=[mvid])
    # the dataset's tombstones: committed with this job, from then on every reader drops these records
    ctx.forget_records(ds_id, forget_ids)
    report["model_version_id"] = info.model_version_id
    rid = _report(ctx, "unlearning_report.json", report)
    ctx.progress(1.0, "unlearned", **{k: float(v) for k, v in metrics.items()})
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "certified": report["certified"],
            "certificate": report.get("certificate"), "regime": report.get("regime"), "costs": report["costs"],
            "metrics": metrics, "guarantee": report["guarantee"]}


class _DescentSteps:
    """The Steps methods of a job whose work is one certified.CertifiedRun (`self.gd`, built in setup): a step runs
    one chunk of its descent, the checkpoint is its state."""

    gd: certified.CertifiedRun

    @property
    def total(self) -> int:
        return self.gd.total

    def step(self, i: int) -> dict[str, float]:
        return self.gd.advance()

    def state(self) -> dict[str, Any]:
        return self.gd.state()

    def load_state(self, st: dict[str, Any]) -> None:
        self.gd.load_state(st)


class ConvexUnlearning(_DescentSteps):
    """Certified unlearning (or certified retraining) of a convex linear model as Steps: setup reads the warm start
    and classifies the request (in-distribution or not: where the descent starts); then the descent on the retain
    set to radius r, `every` iterations a step, the last of which draws the secret noise (kept in the checkpoint
    before anything is published)."""

    def __init__(self, p: UnlearnParams, method: str, config: dict, tensors: dict, ds: Dataset,
                 retain_mask: torch.Tensor, forget_mask: torch.Tensor, eps: float, delta: float, heldout):
        mu = p.mu if config.get("mu") is None else None
        self.problem = problem = problem_from_config(config, mu=mu, tensors=tensors)
        self.p, self.method, self.config, self.tensors, self.eps, self.delta, self.heldout = (
            p, method, config, tensors, eps, delta, heldout)
        self.r = p.r if p.r is not None else float(config.get("r", DEFAULTS["r"]))
        X, y = problem.check_data(ds.X, ds.y, "dataset_artifact_id")
        self.Xr, self.yr = X[retain_mask], y[retain_mask]
        self.Xf, self.yf = X[forget_mask], y[forget_mask]
        self.robust_cfg = config.get("robust")
        self.n_forget = int(forget_mask.sum())
        if method == "robust_certified":
            if not self.robust_cfg:
                raise FailedPrecondition("this model was not trained robustly: use method certified_noisy_minimizer, "
                                         "or retrain with params.capacity > 0", reason="NOT_ROBUST")
            if self.robust_cfg["removed"] + self.n_forget > self.robust_cfg["capacity"]:
                raise FailedPrecondition(
                    f"robust deletion capacity exhausted ({self.robust_cfg['removed']} + {self.n_forget} > "
                    f"{self.robust_cfg['capacity']}): use certified_noisy_minimizer or retrain",
                    reason="CAPACITY_EXHAUSTED")

    def setup(self, ctx: JobContext) -> None:
        # cheap (two retain gradients) and deterministic: redone on a resume rather than checkpointed
        self.theta_start, self.start_source = _read_state(ctx, self.config, self.problem, self.tensors)
        self.reg = robust.classify_request(self.problem, self.Xr, self.yr, self.theta_start, radius=self.r).to_dict()
        if self.method == "retrain":
            self.start = "zero"
        elif self.method == "certified_noisy_minimizer" and self.reg["regime"] == "out_of_distribution" \
                and self.p.allow_retrain_fallback:
            self.start = "zero"
        else:
            self.start = "warm"
        hint = self.reg["predicted_steps_warm"] if self.start == "warm" else self.reg["predicted_steps_retrain"]
        self.gd = certified.CertifiedRun(self.problem, self._chunk, every=self.p.checkpoint_every, hint=hint,
                                         radius=self.r, epsilon=self.eps, delta=self.delta, start=self.start)

    def message(self, done: int, total: int) -> str:
        return f"gd: step {self.gd.step}"

    def _chunk(self, state: certified.GDState | None, k: int) -> certified.GDResult:
        theta0 = self.theta_start if self.start == "warm" else self.problem.zeros()
        return certified.gd_to_radius(self.problem, self.Xr, self.yr, theta0, self.r, max_steps=self.p.max_steps,
                                      state=state, max_iters=k)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        problem, config, r, reg = self.problem, self.config, self.r, self.reg
        Xr, yr, Xf, yf = self.Xr, self.yr, self.Xf, self.yf
        out = self.gd.publish()
        # next request's warm start: the robust iterate is kept (capacity permitting), else the new minimizer
        keep_robust = self.method == "robust_certified"
        state_id = _write_state(ctx, self.theta_start if keep_robust else out.theta_private, out.theta_private)
        cert = out.certificate.to_dict()
        new_config = {k: v for k, v in config.items()}
        new_config.update({"kind": config["kind"], "mu": problem.mu, "r": r, "epsilon": self.eps, "delta": self.delta,
                           "sigma": out.certificate.sigma, "state_artifact_id": state_id, "certificate": cert,
                           "num_classes": problem.num_outputs, "feature_dim": problem.dim})
        if self.robust_cfg:
            new_config["robust"] = (dict(self.robust_cfg, removed=self.robust_cfg["removed"] + self.n_forget)
                                    if keep_robust else None)
        metrics = {f"retain_{k}": v for k, v in problem.utility(out.theta_published, Xr, yr).items()}
        mia = {}
        if self.heldout is not None:
            Xh, yh = problem.check_data(self.heldout[0], self.heldout[1], "eval_dataset_artifact_id")
            metrics.update({f"eval_{k}": v for k, v in problem.utility(out.theta_published, Xh, yh).items()})

            def loss_at(theta):
                return lambda A, b: problem.per_example_loss(theta, A, b)

            mia = {"before": _mia(loss_at(problem.from_tensors(self.tensors)), (Xf, yf), (Xh, yh)),
                   "after": _mia(loss_at(out.theta_published), (Xf, yf), (Xh, yh))}
            metrics.update({f"mia_auc_{k}": v for k, v in mia.items() if v is not None})
        report = {"certified": True, "certificate": cert,
                  "regime": dict(reg, start=self.start, start_source=self.start_source),
                  "costs": {"grad_evals": out.certificate.grad_evals + reg["grad_evals"],
                            "descent_grad_evals": out.certificate.grad_evals,
                            "classification_grad_evals": reg["grad_evals"], "steps": out.certificate.steps},
                  "mia_auc": mia, "metrics": metrics}
        return {"tensors": problem.to_tensors(out.theta_published), "config": new_config, "report": report,
                "metrics": metrics}


class ApproximateUnlearning:
    """An uncertified method (approximate.METHODS) as Steps: `every` SGD steps a step, the parameters and the
    generator's state in every checkpoint, so a resumed run replays exactly."""

    def __init__(self, p: UnlearnParams, method: str, config: dict, tensors: dict, ds: Dataset,
                 retain_mask: torch.Tensor, forget_mask: torch.Tensor, seed: int, heldout):
        self.p, self.method, self.config, self.tensors, self.ds, self.seed, self.heldout = (
            p, method, config, tensors, ds, seed, heldout)
        self.retain_mask, self.forget_mask = retain_mask, forget_mask
        self.noise_std = p.noise_std if p.noise_std is not None else (1e-3 if method == "noisy_finetune" else 0.0)
        self.total = math.ceil(p.steps / p.checkpoint_every)

    def setup(self, ctx: JobContext) -> None:
        self.module, self.loss_fn = approximate.build_module(self.tensors, self.config)
        X = self.ds.X.to(next(self.module.parameters()).dtype)
        y = self.ds.y
        self.Xr, self.yr = X[self.retain_mask], y[self.retain_mask]
        self.Xf, self.yf = X[self.forget_mask], y[self.forget_mask]
        self.mia_before = None
        if self.heldout is not None:
            Xh = self.heldout[0].to(X.dtype)
            self.mia_before = _mia(approximate.per_example_loss_fn(self.module, self.loss_fn), (self.Xf, self.yf),
                                   (Xh, self.heldout[1]))
        self.sgd: approximate.SGDState | None = None

    def message(self, done: int, total: int) -> str:
        return f"{self.method}: step {0 if self.sgd is None else self.sgd.step}"

    def step(self, i: int) -> dict[str, float]:
        p = self.p
        self.sgd = approximate.run_method(self.method, self.module, self.loss_fn, retain=(self.Xr, self.yr),
                                          forget=(self.Xf, self.yf), steps=p.steps, lr=p.lr, batch_size=p.batch_size,
                                          seed=self.seed, noise_std=self.noise_std, state=self.sgd,
                                          max_iters=p.checkpoint_every)
        return {"grad_evals": float(self.sgd.grad_evals)}

    def state(self) -> dict[str, Any]:
        return {"sgd": self.sgd.to_dict()}

    def load_state(self, st: dict[str, Any]) -> None:
        self.sgd = approximate.SGDState.from_dict(st["sgd"])
        self.module.load_state_dict(self.sgd.params)  # a job killed after its last step publishes these

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p, config, module, loss_fn = self.p, self.config, self.module, self.loss_fn
        Xf, yf = self.Xf, self.yf
        res = approximate.approx_result(self.method, self.sgd)
        metrics: dict[str, float] = {"final_loss": res.final_loss}
        mia = {}
        if self.heldout is not None:
            Xh = self.heldout[0].to(self.Xr.dtype)
            if config.get("num_classes") or getattr(module, "kind", "") in ("logreg_l2", "softmax_l2"):
                metrics["eval_accuracy"] = approximate.accuracy(module, Xh, self.heldout[1])
            mia = {"before": self.mia_before, "after": _mia(approximate.per_example_loss_fn(module, loss_fn),
                                                            (Xf, yf), (Xh, self.heldout[1]))}
            metrics.update({f"mia_auc_{k}": v for k, v in mia.items() if v is not None})
        new_config = {k: v for k, v in config.items()}
        if is_convex_kind(str(config.get("kind", ""))):
            # the weights no longer carry a certificate nor a matching private state
            new_config.update({"certificate": None, "state_artifact_id": None, "robust": None})
        report = {"certified": False, "approximate": res.to_dict(), "certificate": None,
                  "costs": {"grad_evals": res.grad_evals, "steps": res.steps}, "mia_auc": mia, "metrics": metrics,
                  "hyperparameters": {"steps": p.steps, "lr": p.lr, "batch_size": p.batch_size,
                                      "noise_std": self.noise_std}}
        return {"tensors": approximate.module_tensors(module), "config": new_config, "report": report,
                "metrics": metrics}


# ---- audit -----------------------------------------------------------------------------------------------
class AuditRetraining(_DescentSteps):
    """The audit's reference as Steps: the same certified procedure run on the retain set from scratch, `every`
    descent iterations a step; its noise draw is kept in the checkpoint like a release's."""

    def __init__(self, problem: LinearProblem, X: torch.Tensor, y: torch.Tensor, r: float, eps: float, delta: float,
                 max_steps: int, every: int):
        self.problem, self.X, self.y, self.r, self.eps, self.delta, self.max_steps, self.every = (
            problem, X, y, r, eps, delta, max_steps, every)
        certified.validate_privacy(eps, delta)

    def setup(self, ctx: JobContext) -> None:
        self.X, self.y = self.problem.check_data(self.X, self.y)
        self.gd = certified.CertifiedRun(self.problem, self._chunk, every=self.every, hint=1000,  # progress only
                                         radius=self.r, epsilon=self.eps, delta=self.delta, start="zero")

    def message(self, done: int, total: int) -> str:
        return f"retrain: step {self.gd.step}"

    def _chunk(self, state: certified.GDState | None, k: int) -> certified.GDResult:
        return certified.gd_to_radius(self.problem, self.X, self.y, self.problem.zeros(), self.r,
                                      max_steps=self.max_steps, state=state, max_iters=k)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        return {"out": self.gd.publish()}


def run_audit(ctx: JobContext) -> dict:
    """Audit an unlearned (certified, linear) model version against retraining from scratch.

    params: model_version_id (the unlearned version), runs (noise draws per side, default 1000), alpha (0.05),
            seed, eval_dataset_artifact_id (held-out data: MIA + utility), dataset_artifact_id (override),
            original_model_version_id (for MIA before), max_steps.
    Empirical epsilon: the version's pre-noise parameters (its private state) vs the same procedure run on
    the retain set from scratch, each published with the version's sigma over `runs` draws; score direction
    and threshold chosen on one half of the draws, FP/FN counted on the other (audit.py). Utility and membership
    inference compare the published version with the reference plus the version's own noise draw."""
    p = parse_params(AuditParams, ctx.params)
    if p.method == "hidden_state_canary":
        from services.unlearning import dpsgd_jobs

        return dpsgd_jobs.run_canary_audit(ctx, p)
    mvid, runs, alpha, seed = p.model_version_id, p.runs, p.alpha, p.seed
    tensors, config = ctx.load_model(mvid)
    kind = str(config.get("kind", ""))
    if not is_convex_kind(kind) or not config.get("certificate"):
        raise FailedPrecondition(f"model version {mvid} carries no certificate (kind {kind!r}): the epsilon audit "
                                 "applies to certified outputs; membership inference is in the unlearning report")
    if not config.get("state_artifact_id"):
        raise FailedPrecondition("the version's private pre-noise state is missing: cannot audit")
    problem = problem_from_config(config, tensors=tensors)
    cert = config["certificate"]
    r, eps, delta, sigma = float(config["r"]), float(cert["epsilon"]), float(cert["delta"]), float(cert["sigma"])
    ds_id = p.dataset_artifact_id or config.get("dataset_artifact_id")
    ds, dropped = read_dataset(ctx, ds_id, "dataset_artifact_id")
    X, y = problem.check_data(ds.X, ds.y, "dataset_artifact_id")
    excluded = list(config.get("excluded_record_ids") or [])
    stale = set(dropped) - set(excluded)
    if stale:
        raise FailedPrecondition(f"{len(stale)} records were forgotten from the dataset after this version was "
                                 "produced: audit the newest version of its lineage", reason="STALE_VERSION")
    # forgotten records are tombstoned (dropped by the reader): the forget set is what is still readable
    _, forget_mask = ds.split([r for r in excluded if r in ds.index], field_name="excluded_record_ids")
    retain_mask = ~forget_mask
    theta_u = loads_state(ctx.read_artifact(config["state_artifact_id"]))["theta_private"].to(DTYPE)
    job = AuditRetraining(problem, X[retain_mask], y[retain_mask], r, eps, delta, p.max_steps, p.checkpoint_every)
    ref = run_steps(ctx, job, message=job.message, progress_span=(0.0, 0.8),
                    fingerprint=fingerprint(ctx, "audit"))["out"]
    eps_audit = audit.audit_gaussian_outputs(theta_u, ref.theta_private, sigma, runs=runs, delta=delta, seed=seed,
                                             alpha=alpha, claimed_epsilon=eps)
    theta_pub = problem.from_tensors(tensors)
    # The reference is compared as if published with this version's own noise draw (published - private): the
    # utility and membership gaps then measure the unlearning alone, not two independent draws of the noise (one
    # draw moves accuracy by about a point at these sigmas).
    ref_pub = ref.theta_private + (theta_pub - theta_u)
    result: dict[str, Any] = {
        "job": "audit", "model_version_id": mvid, "claimed": {"epsilon": eps, "delta": delta, "sigma": sigma, "r": r},
        "epsilon_audit": eps_audit.to_dict(),
        "pre_noise_distance": float((theta_u - ref.theta_private).norm()), "sensitivity_bound": 2 * r,
        "retrain_cost": {"grad_evals": ref.certificate.grad_evals, "steps": ref.certificate.steps},
        "unlearning_cost": {"grad_evals": cert.get("grad_evals"), "steps": cert.get("steps")},
    }
    result["utility"] = {"unlearned": problem.utility(theta_pub, X[retain_mask], y[retain_mask]),
                         "retrained": problem.utility(ref_pub, X[retain_mask], y[retain_mask])}
    if p.eval_dataset_artifact_id:
        ev = read_dataset(ctx, p.eval_dataset_artifact_id, "eval_dataset_artifact_id")[0]
        Xh, yh = problem.check_data(ev.X, ev.y, "eval_dataset_artifact_id")
        u, rt = problem.utility(theta_pub, Xh, yh), problem.utility(ref_pub, Xh, yh)
        result["utility"].update({"eval_unlearned": u, "eval_retrained": rt, "eval_gap": audit.utility_gap(u, rt)})
        Xf, yf = X[forget_mask], y[forget_mask]
        if Xf.shape[0]:
            mia = {"after": audit.loss_mia_auc(lambda A, b: problem.per_example_loss(theta_pub, A, b), (Xf, yf), (Xh, yh)),
                   "retrained": audit.loss_mia_auc(lambda A, b: problem.per_example_loss(ref_pub, A, b),
                                                   (Xf, yf), (Xh, yh))}
            if p.original_model_version_id:
                t0, _ = ctx.load_model(p.original_model_version_id)
                th0 = problem.from_tensors(t0)
                mia["before"] = audit.loss_mia_auc(lambda A, b: problem.per_example_loss(th0, A, b), (Xf, yf), (Xh, yh))
            result["mia_auc"] = mia
    rid = _report(ctx, "audit_report.json", result)
    ctx.progress(1.0, "audited", eps_lower=eps_audit.eps_lower, claimed_epsilon=eps)
    result["report_artifact_id"] = rid
    return result
