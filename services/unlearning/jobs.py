"""The unlearning service's long jobs, written against services.common.jobcontext.JobContext.

  run_training(ctx)   train a certified (noisy-published) L2 linear model from a dataset artifact
  run_unlearning(ctx) forget records from a model version; registers the new version and a JSON report
  run_audit(ctx)      audit an unlearned version: empirical epsilon vs retraining, MIA AUC, utility gap
Parameters are typed (params.py: TrainParams, UnlearnParams, AuditParams), parsed once here from ctx.params.
Branches: kind dpsgd_softmax trains and audit method hidden_state_canary audits in dpsgd_jobs.py; a moderation
guard version (guard_heads.is_guard_config) is unlearned in guard_jobs.py. Every unlearning result carries its
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

import hashlib
import json
import math
import time
from typing import Any

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext
from services.common.params import parse_params
from services.common.state import dumps_state, loads_state
from services.unlearning import approximate, audit, certified, guard_heads, robust
from services.unlearning.data import Dataset, decode_dataset, decode_forget_set, parse_forget_ids
from services.unlearning.linear import (DTYPE, LinearProblem, canonical_kind, is_convex_kind,
                                       problem_from_config)
from services.unlearning.params import FIELD_PATHS, AuditParams, TrainParams, UnlearnParams, require_mu

CERTIFIED_METHODS = ("certified_noisy_minimizer", "robust_certified")
METHODS = CERTIFIED_METHODS + approximate.METHODS
STATE_CONTENT_TYPE = "application/vnd.praxon.unlearning-state+safetensors"
REPORT_CONTENT_TYPE = "application/json"

DEFAULTS = {"r": 1e-3, "epsilon": 1.0, "delta": 1e-5, "max_steps": 100_000, "checkpoint_every": 50,
            "robust_max_steps": 1000, "robust_noise_std": 0.0}


# ---- parameters ------------------------------------------------------------------------------------------
def _privacy(epsilon: float | None, delta: float | None, config: dict | None = None) -> tuple[float, float]:
    """(epsilon, delta) of a request: the request's, else the model's, else the defaults; the values come from
    the typed params (already validated) or a model config (validated here)."""
    cfg = config or {}
    eps = float(epsilon if epsilon is not None else cfg.get("epsilon", DEFAULTS["epsilon"]))
    dl = float(delta if delta is not None else cfg.get("delta", DEFAULTS["delta"]))
    if not (math.isfinite(eps) and eps > 0):
        raise InvalidArgument("epsilon", "must be > 0")
    if not 0 < dl < 1:
        raise InvalidArgument("delta", "must be in (0, 1)")
    return eps, dl


def read_dataset(ctx: JobContext, artifact_id: str, field: str = "dataset_artifact_id") -> tuple[Dataset, list[str]]:
    """THE dataset reader of the unlearning jobs (every job reads data through it): decodes the artifact and
    drops every record a succeeded unlearning job tombstoned (ctx.forgotten_records), so deleted data never
    comes back into training, unlearning or audits. Returns the dataset and the ids it dropped."""
    ds = decode_dataset(ctx.read_artifact(artifact_id), field_name=field)
    return ds.without(ctx.forgotten_records(artifact_id))


def _load_dataset(ctx: JobContext, artifact_id: str, field: str) -> Dataset:
    return read_dataset(ctx, artifact_id, field)[0]


def check_forget_request(method: str, config: dict, forget_ids: list[str], forgotten: set[str],
                         dataset_ids: set[str] | dict | None = None) -> None:
    """The checks of an unlearning request that need no descent: run by the service at request time (so bad
    input is INVALID_ARGUMENT / FAILED_PRECONDITION on the call) and again by the job (authoritative).
    `forgotten`: the dataset's tombstones; `dataset_ids`: the ids the dataset holds before dropping them
    (None: not checked here)."""
    if method not in METHODS:
        raise InvalidArgument("method", f"one of {', '.join(METHODS)}")
    kind = str(config.get("kind", ""))
    convex = is_convex_kind(kind)
    if guard_heads.is_guard_config(config):
        from services.unlearning.guard_jobs import check_guard_request

        check_guard_request(method, config)
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


def _checkpoint(ctx: JobContext, job: str) -> dict:
    """This job's checkpoint, or a fresh one. A checkpoint written for other params (or another job kind)
    is ignored, so a stale state can never be resumed into a different request."""
    key = hashlib.sha256(json.dumps(ctx.params, sort_keys=True, default=str).encode()).hexdigest()
    ck = ctx.load_checkpoint()
    if isinstance(ck, dict) and ck.get("job") == job and ck.get("params_sha256") == key:
        return ck
    return {"job": job, "params_sha256": key}


def _gd_callback(ctx: JobContext, ck: dict, phase: str, total_hint: int, base: float, span: float):
    def cb(st: certified.GDState) -> None:
        ck["phase"], ck["gd"] = phase, st.to_dict()
        ctx.save_checkpoint(ck)
        frac = base + span * min(0.99, st.step / max(total_hint, 1))
        ctx.progress(frac, f"{phase}: step {st.step}", grad_norm=st.grad_norm, grad_evals=float(st.grad_evals))
        ctx.check_cancelled()
    return cb


def _keep_noise(ctx: JobContext, ck: dict, out: certified.CertifiedOutput) -> None:
    """Keep the secret noise draw in the private checkpoint before anything is published, so a job resumed
    after a crash publishes the same single release (checkpoints are never served as artifacts)."""
    if ck.get("unit_noise") is None:
        ck["unit_noise"] = out.unit_noise
        ctx.save_checkpoint(ck)


def _resume_gd(ck: dict, phase: str) -> certified.GDState | None:
    if ck.get("phase") == phase and ck.get("gd") is not None:
        return certified.GDState.from_dict(ck["gd"])
    return None


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
    kind = canonical_kind(tp.kind)
    mu = require_mu(tp)
    r, (eps, delta), seed = tp.r, _privacy(tp.epsilon, tp.delta), tp.seed
    max_steps, every, capacity = tp.max_steps, tp.checkpoint_every, tp.capacity
    ds_id = tp.dataset_artifact_id
    ds, dropped = read_dataset(ctx, ds_id, "dataset_artifact_id")
    if len(ds) == 0:
        raise InvalidArgument("dataset_artifact_id", "no records left to train on (all were forgotten)")
    problem = LinearProblem(kind=kind, mu=mu, dim=ds.X.shape[1], num_outputs=_num_classes(kind, tp.num_classes, ds.y))
    X, y = problem.check_data(ds.X, ds.y, "dataset_artifact_id")
    name = tp.name

    ck = _checkpoint(ctx, "train")
    t0 = time.perf_counter()
    ctx.check_cancelled()
    robust_info = None
    theta0 = problem.zeros()
    robust_evals = 0
    if capacity > 0:
        trim = robust.trim_count(len(ds), capacity, tp.trim_fraction)
        if "robust_done" not in ck:
            rst = robust.RobustState.from_dict(ck["robust"]) if ck.get("phase") == "robust" else None

            def rcb(st: robust.RobustState) -> None:
                ck["phase"], ck["robust"] = "robust", st.to_dict()
                ctx.save_checkpoint(ck)
                ctx.progress(0.5 * min(0.99, st.step / tp.robust_max_steps), f"robust: step {st.step}",
                             direction_norm=st.direction_norm)
                ctx.check_cancelled()

            rres = robust.robust_train(problem, X, y, trim=trim, seed=seed,
                                       max_steps=tp.robust_max_steps, noise_std=tp.robust_noise_std,
                                       state=rst, callback=rcb, callback_every=every)
            ck["robust_done"] = {"theta": rres.theta, "steps": rres.steps, "grad_evals": rres.grad_evals,
                                 "direction_norm": rres.direction_norm}
            ck["phase"] = "erm"
            ck.pop("robust", None)
            ctx.save_checkpoint(ck)
        done = ck["robust_done"]
        theta0 = done["theta"].to(DTYPE)
        robust_evals = int(done["grad_evals"])
        robust_info = {"trim": trim, "capacity": capacity, "removed": 0, "steps": int(done["steps"]),
                       "grad_evals": robust_evals, "noise_std": tp.robust_noise_std}

    hint = 1000  # progress display only: the step count is not known in advance
    base = 0.5 if capacity > 0 else 0.0
    out = certified.train_certified(problem, X, y, radius=r, epsilon=eps, delta=delta,
                                    max_steps=max_steps, theta0=theta0 if capacity > 0 else None,
                                    state=_resume_gd(ck, "erm"),
                                    callback=_gd_callback(ctx, ck, "erm", hint, base, 1.0 - base),
                                    callback_every=every, unit_noise=ck.get("unit_noise"))
    _keep_noise(ctx, ck, out)
    # The warm start kept for later requests: the minimizer approximation, or the robust iterate.
    theta_start = theta0 if capacity > 0 else out.theta_private
    state_id = _write_state(ctx, theta_start, out.theta_private)
    cert = out.certificate.to_dict()
    metrics = {f"train_{k}": v for k, v in problem.utility(out.theta_published, X, y).items()}
    if tp.eval_dataset_artifact_id:
        ev = _load_dataset(ctx, tp.eval_dataset_artifact_id, "eval_dataset_artifact_id")
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
    if guard_heads.is_guard_config(config):
        from services.unlearning import guard_jobs

        return guard_jobs.run_guard_unlearning(ctx, p, tensors, config, forget_ids_of=_forget_ids,
                                               checkpoint_of=_checkpoint, keep_noise=_keep_noise,
                                               write_state=_write_state, report_of=_report, guarantee_of=guarantee)
    kind = str(config.get("kind", ""))
    convex = is_convex_kind(kind)
    check_forget_request(method, config, [], set())
    if method in CERTIFIED_METHODS or (convex and method == "retrain"):
        eps, delta = _privacy(p.epsilon, p.delta, config)
    elif eps_in != (None, None):
        eps, delta = _privacy(p.epsilon, p.delta, config)  # validated even where they do not apply
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
        ev = _load_dataset(ctx, p.eval_dataset_artifact_id, "eval_dataset_artifact_id")
        heldout = (ev.X, ev.y)
    name = p.name or str(config.get("name") or "unlearning-model")
    # everything this lineage no longer holds: earlier exclusions, records tombstoned since, this request
    new_excluded = list(dict.fromkeys(excluded + dropped + forget_ids))
    t0 = time.perf_counter()
    ck = _checkpoint(ctx, "unlearn")
    ctx.check_cancelled()

    if convex and method in CERTIFIED_METHODS + ("retrain",):
        result = _unlearn_convex(ctx, ck, p, method, config, tensors, ds, retain_mask, forget_mask, eps, delta,
                                 heldout)
    else:
        result = _unlearn_approximate(ctx, ck, p, method, config, tensors, ds, retain_mask, forget_mask, seed,
                                      heldout)
    new_tensors, new_config, report, metrics = result
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


def _unlearn_convex(ctx, ck, p, method, config, tensors, ds, retain_mask, forget_mask, eps, delta, heldout):
    mu = p.mu if config.get("mu") is None else None
    problem = problem_from_config(config, mu=mu, tensors=tensors)
    r = p.r if p.r is not None else float(config.get("r", DEFAULTS["r"]))
    max_steps, every = p.max_steps, p.checkpoint_every
    X, y = problem.check_data(ds.X, ds.y, "dataset_artifact_id")
    Xr, yr = X[retain_mask], y[retain_mask]
    Xf, yf = X[forget_mask], y[forget_mask]
    theta_old_pub = problem.from_tensors(tensors)
    robust_cfg = config.get("robust")
    n_forget = int(forget_mask.sum())
    if method == "robust_certified":
        if not robust_cfg:
            raise FailedPrecondition("this model was not trained robustly: use method certified_noisy_minimizer, "
                                     "or retrain with params.capacity > 0", reason="NOT_ROBUST")
        if robust_cfg["removed"] + n_forget > robust_cfg["capacity"]:
            raise FailedPrecondition(
                f"robust deletion capacity exhausted ({robust_cfg['removed']} + {n_forget} > "
                f"{robust_cfg['capacity']}): use certified_noisy_minimizer or retrain", reason="CAPACITY_EXHAUSTED")

    if "regime" not in ck:
        theta_start, start_source = _read_state(ctx, config, problem, tensors)
        reg = robust.classify_request(problem, Xr, yr, theta_start, radius=r)
        ck.update({"regime": reg.to_dict(), "theta_start": theta_start, "start_source": start_source})
        ctx.save_checkpoint(ck)
    reg = ck["regime"]
    theta_start = ck["theta_start"].to(DTYPE)
    if method == "retrain":
        start = "zero"
    elif method == "certified_noisy_minimizer" and reg["regime"] == "out_of_distribution" \
            and p.allow_retrain_fallback:
        start = "zero"
    else:
        start = "warm"
    hint = reg["predicted_steps_warm"] if start == "warm" else reg["predicted_steps_retrain"]
    cb = _gd_callback(ctx, ck, "gd", hint, 0.0, 0.9)
    gd_state = _resume_gd(ck, "gd")
    if start == "warm":
        out = certified.unlearn_certified(problem, Xr, yr, theta_start, radius=r, epsilon=eps, delta=delta,
                                          max_steps=max_steps, state=gd_state, callback=cb,
                                          callback_every=every, unit_noise=ck.get("unit_noise"))
    else:
        out = certified.retrain_certified(problem, Xr, yr, radius=r, epsilon=eps, delta=delta,
                                          max_steps=max_steps, state=gd_state, callback=cb, callback_every=every,
                                          unit_noise=ck.get("unit_noise"))
    _keep_noise(ctx, ck, out)
    # next request's warm start: the robust iterate is kept (capacity permitting), else the new minimizer
    keep_robust = method == "robust_certified"
    state_id = _write_state(ctx, theta_start if keep_robust else out.theta_private, out.theta_private)
    cert = out.certificate.to_dict()
    new_config = {k: v for k, v in config.items()}
    new_config.update({"kind": config["kind"], "mu": problem.mu, "r": r, "epsilon": eps, "delta": delta,
                       "sigma": out.certificate.sigma, "state_artifact_id": state_id, "certificate": cert,
                       "num_classes": problem.num_outputs, "feature_dim": problem.dim})
    if robust_cfg:
        new_config["robust"] = dict(robust_cfg, removed=robust_cfg["removed"] + n_forget) if keep_robust else None
    metrics = {f"retain_{k}": v for k, v in problem.utility(out.theta_published, Xr, yr).items()}
    mia = {}
    if heldout is not None:
        Xh, yh = problem.check_data(heldout[0], heldout[1], "eval_dataset_artifact_id")
        metrics.update({f"eval_{k}": v for k, v in problem.utility(out.theta_published, Xh, yh).items()})

        def loss_at(theta):
            return lambda A, b: problem.per_example_loss(theta, A, b)

        mia = {"before": _mia(loss_at(theta_old_pub), (Xf, yf), (Xh, yh)),
               "after": _mia(loss_at(out.theta_published), (Xf, yf), (Xh, yh))}
        metrics.update({f"mia_auc_{k}": v for k, v in mia.items() if v is not None})
    report = {"certified": True, "certificate": cert, "regime": dict(reg, start=start,
                                                                      start_source=ck["start_source"]),
              "costs": {"grad_evals": out.certificate.grad_evals + reg["grad_evals"],
                        "descent_grad_evals": out.certificate.grad_evals, "classification_grad_evals": reg["grad_evals"],
                        "steps": out.certificate.steps},
              "mia_auc": mia, "metrics": metrics}
    return problem.to_tensors(out.theta_published), new_config, report, metrics


def _unlearn_approximate(ctx, ck, p, method, config, tensors, ds, retain_mask, forget_mask, seed, heldout):
    module, loss_fn = approximate.build_module(tensors, config)
    X = ds.X.to(next(module.parameters()).dtype)
    y = ds.y
    Xr, yr, Xf, yf = X[retain_mask], y[retain_mask], X[forget_mask], y[forget_mask]
    mia_before = None
    if heldout is not None:
        Xh = heldout[0].to(X.dtype)
        mia_before = _mia(approximate.per_example_loss_fn(module, loss_fn), (Xf, yf), (Xh, heldout[1]))
    steps, lr, bs, every = p.steps, p.lr, p.batch_size, p.checkpoint_every
    noise_std = p.noise_std if p.noise_std is not None else (1e-3 if method == "noisy_finetune" else 0.0)
    state = approximate.SGDState.from_dict(ck["sgd"]) if ck.get("phase") == "sgd" else None

    def cb(st: approximate.SGDState) -> None:
        ck["phase"], ck["sgd"] = "sgd", st.to_dict()
        ctx.save_checkpoint(ck)
        ctx.progress(0.9 * min(0.99, st.step / steps), f"{method}: step {st.step}", grad_evals=float(st.grad_evals))
        ctx.check_cancelled()

    res = approximate.unlearn_approximate(method, module, loss_fn, retain=(Xr, yr), forget=(Xf, yf), steps=steps,
                                          lr=lr, batch_size=bs, seed=seed, noise_std=noise_std, state=state,
                                          callback=cb, callback_every=every)
    metrics: dict[str, float] = {"final_loss": res.final_loss}
    mia = {}
    if heldout is not None:
        Xh = heldout[0].to(X.dtype)
        if config.get("num_classes") or getattr(module, "kind", "") in ("logreg_l2", "softmax_l2"):
            metrics["eval_accuracy"] = approximate.accuracy(module, Xh, heldout[1])
        mia = {"before": mia_before, "after": _mia(approximate.per_example_loss_fn(module, loss_fn), (Xf, yf),
                                                    (Xh, heldout[1]))}
        metrics.update({f"mia_auc_{k}": v for k, v in mia.items() if v is not None})
    new_config = {k: v for k, v in config.items()}
    if is_convex_kind(str(config.get("kind", ""))):
        # the weights no longer carry a certificate nor a matching private state
        new_config.update({"certificate": None, "state_artifact_id": None, "robust": None})
    report = {"certified": False, "approximate": res.to_dict(), "certificate": None,
              "costs": {"grad_evals": res.grad_evals, "steps": res.steps}, "mia_auc": mia, "metrics": metrics,
              "hyperparameters": {"steps": steps, "lr": lr, "batch_size": bs, "noise_std": noise_std}}
    return approximate.module_tensors(module), new_config, report, metrics


# ---- audit -----------------------------------------------------------------------------------------------
def run_audit(ctx: JobContext) -> dict:
    """Audit an unlearned (certified, linear) model version against retraining from scratch.

    params: model_version_id (the unlearned version), runs (noise draws per side, default 1000), alpha (0.05),
            seed, eval_dataset_artifact_id (held-out data: MIA + utility), dataset_artifact_id (override),
            original_model_version_id (for MIA before), max_steps.
    Empirical epsilon: the version's pre-noise parameters (its private state) vs the same procedure run on
    the retain set from scratch, each published with the version's sigma over `runs` draws; score direction
    and threshold chosen on one half of the draws, FP/FN counted on the other (audit.py)."""
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
    ck = _checkpoint(ctx, "audit")
    ctx.check_cancelled()
    every = p.checkpoint_every
    ref = certified.retrain_certified(problem, X[retain_mask], y[retain_mask], radius=r, epsilon=eps, delta=delta,
                                      max_steps=p.max_steps,
                                      state=_resume_gd(ck, "retrain"),
                                      callback=_gd_callback(ctx, ck, "retrain", 1000, 0.0, 0.8), callback_every=every)
    eps_audit = audit.audit_gaussian_outputs(theta_u, ref.theta_private, sigma, runs=runs, delta=delta, seed=seed,
                                             alpha=alpha, claimed_epsilon=eps)
    theta_pub = problem.from_tensors(tensors)
    result: dict[str, Any] = {
        "job": "audit", "model_version_id": mvid, "claimed": {"epsilon": eps, "delta": delta, "sigma": sigma, "r": r},
        "epsilon_audit": eps_audit.to_dict(),
        "pre_noise_distance": float((theta_u - ref.theta_private).norm()), "sensitivity_bound": 2 * r,
        "retrain_cost": {"grad_evals": ref.certificate.grad_evals, "steps": ref.certificate.steps},
        "unlearning_cost": {"grad_evals": cert.get("grad_evals"), "steps": cert.get("steps")},
    }
    result["utility"] = {"unlearned": problem.utility(theta_pub, X[retain_mask], y[retain_mask]),
                         "retrained": problem.utility(ref.theta_published, X[retain_mask], y[retain_mask])}
    if p.eval_dataset_artifact_id:
        ev = _load_dataset(ctx, p.eval_dataset_artifact_id, "eval_dataset_artifact_id")
        Xh, yh = problem.check_data(ev.X, ev.y, "eval_dataset_artifact_id")
        u, rt = problem.utility(theta_pub, Xh, yh), problem.utility(ref.theta_published, Xh, yh)
        result["utility"].update({"eval_unlearned": u, "eval_retrained": rt, "eval_gap": audit.utility_gap(u, rt)})
        Xf, yf = X[forget_mask], y[forget_mask]
        if Xf.shape[0]:
            mia = {"after": audit.loss_mia_auc(lambda A, b: problem.per_example_loss(theta_pub, A, b), (Xf, yf), (Xh, yh)),
                   "retrained": audit.loss_mia_auc(lambda A, b: problem.per_example_loss(ref.theta_published, A, b),
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
