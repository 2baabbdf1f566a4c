"""The DP-SGD jobs of the unlearning service (dpsgd.py holds the algorithms):

  run_dpsgd_training(ctx, p)  kind dpsgd_softmax of unlearning.train: DP-SGD through Opacus, the accountant's
                              (epsilon, delta) recorded as the version's guarantee
  run_canary_audit(ctx, p)    method hidden_state_canary of unlearning.audit: the crafted-gradient canary audit
                              of the version's DP-SGD configuration on its training data, beside the accountant

Both are Steps jobs under run_steps (checkpoint, resume from there after a crash, cancellation, progress): the
training a chunk of DP-SGD steps a step, its secret generator state kept only in the private checkpoint; the audit
a pair of runs a step, its scores so far in every checkpoint."""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import params_json
from services.unlearning import dpsgd
from services.unlearning.data import read_dataset
from services.unlearning.params import AuditParams, DpSgdParams, TrainParams

REPORT_CONTENT_TYPE = "application/json"
MECHANISM = "DP-SGD (Opacus: per-sample clipping, Gaussian noise, Poisson sampling)"


def _params_key(ctx: JobContext) -> str:
    """What a checkpoint is valid for: a state saved for other params is never resumed into this request."""
    return hashlib.sha256(json.dumps(params_json(ctx.params), sort_keys=True, default=str).encode()).hexdigest()


def _report(ctx: JobContext, name: str, report: dict) -> str:
    return ctx.write_artifact(name, json.dumps(report, indent=2, sort_keys=True, default=float).encode(),
                              REPORT_CONTENT_TYPE, metadata={"kind": "unlearning_report"})


def config_of(p: DpSgdParams, delta: float) -> dpsgd.DpSgdConfig:
    return dpsgd.DpSgdConfig(noise_multiplier=p.noise_multiplier, max_grad_norm=p.max_grad_norm, steps=p.steps,
                             sample_rate=p.sample_rate, lr=p.lr, delta=delta, accountant=p.accountant)


class DpSgdTraining:
    """DP-SGD training as Steps: a chunk of max(1, steps // 50) DP-SGD steps a step (progress about every 2%), a
    checkpoint about every `checkpoint_every` DP-SGD steps (rounded down to whole chunks); the weights and the
    secret generator's state are the checkpointed state (private: checkpoints are never served)."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor, num_classes: int, cfg: dpsgd.DpSgdConfig,
                 checkpoint_every: int):
        self.X, self.y, self.num_classes, self.cfg = X, y, num_classes, cfg
        self.chunk = max(1, cfg.steps // 50)
        self.total = -(-cfg.steps // self.chunk)
        self.checkpoint_every = max(1, checkpoint_every // self.chunk)

    def setup(self, ctx: JobContext) -> None:
        self.res: dpsgd.DpSgdResult | None = None

    def message(self, done: int, total: int) -> str:
        return f"dp-sgd: step {self.res.steps}/{self.cfg.steps}"

    def step(self, i: int) -> None:
        self.res = dpsgd.train_dpsgd(self.X, self.y, self.num_classes, self.cfg,
                                     resume=None if self.res is None else self.res.state, max_iters=self.chunk)

    def state(self) -> dict[str, Any]:
        return {"dpsgd": self.res.state}

    def load_state(self, state: dict[str, Any]) -> None:
        st = state["dpsgd"]
        self.res = dpsgd.DpSgdResult(weight=st["weight"], bias=st["bias"], steps=int(st["step"]),
                                     batch_sizes=[int(b) for b in st["batch_sizes"]],
                                     canary_insertions=int(st["insertions"]), state=st)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        return {"res": self.res}


def run_dpsgd_training(ctx: JobContext, p: TrainParams) -> dict[str, Any]:

    dp = p.dpsgd or DpSgdParams()
    cfg = config_of(dp, p.delta)
    ds, dropped = read_dataset(ctx, p.dataset_artifact_id, "dataset_artifact_id")
    if len(ds) == 0:
        raise InvalidArgument("dataset_artifact_id", "no records left to train on (all were forgotten)")
    y = ds.y.to(torch.int64)
    if ds.y.is_floating_point() and not bool((ds.y == ds.y.round()).all()):
        raise InvalidArgument("dataset_artifact_id", "dpsgd_softmax needs integer class labels")
    c = p.num_classes or (int(y.max()) + 1 if y.numel() else 2)
    if int(y.min()) < 0 or int(y.max()) >= c or c < 2:
        raise InvalidArgument("dataset_artifact_id", f"labels must be in [0, {c}) with at least 2 classes")
    eps = dpsgd.accountant_epsilon(cfg)
    t0 = time.perf_counter()
    job = DpSgdTraining(ds.X, y, c, cfg, p.checkpoint_every)
    res = run_steps(ctx, job, checkpoint_every=job.checkpoint_every, message=job.message, progress_span=(0.0, 0.95),
                    fingerprint=_params_key(ctx))["res"]
    tensors = {"W": res.weight.contiguous(), "b": res.bias.contiguous()}
    logits = ds.X.to(dpsgd.DTYPE) @ res.weight.T + res.bias
    metrics = {"train_accuracy": float((logits.argmax(1) == y).float().mean())}
    if p.eval_dataset_artifact_id:
        ev = read_dataset(ctx, p.eval_dataset_artifact_id, "eval_dataset_artifact_id")[0]
        le = ev.X.to(dpsgd.DTYPE) @ res.weight.T + res.bias
        metrics["eval_accuracy"] = float((le.argmax(1) == ev.y.to(torch.int64)).float().mean())
    guarantee = {"kind": "dp_training", "epsilon": eps, "delta": p.delta, "mechanism": MECHANISM,
                 "statement": f"the weights are ({eps:.4g}, {p.delta:g})-DP with respect to each training record "
                              f"({cfg.accountant} accountant over {cfg.steps} steps, q={cfg.sample_rate:g}, "
                              f"sigma={cfg.noise_multiplier:g}); not certified for unlearning"}
    config = {"kind": "dpsgd_softmax", "name": p.name, "feature_dim": int(ds.X.shape[1]), "num_classes": c,
              "dpsgd": cfg.to_dict(), "accountant_epsilon": eps, "epsilon": eps, "delta": p.delta,
              "dataset_artifact_id": p.dataset_artifact_id, "excluded_record_ids": dropped, "guarantee": guarantee,
              "certificate": None}
    info = ctx.register_model(p.name, tensors, kind="dpsgd_softmax", config=config, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id)
    costs = {"steps": cfg.steps, "mean_batch": float(sum(res.batch_sizes) / len(res.batch_sizes)),
             "wall_s": time.perf_counter() - t0}
    report = {"job": "train", "kind": "dpsgd_softmax", "model_version_id": info.model_version_id,
              "guarantee": guarantee, "dpsgd": cfg.to_dict(), "metrics": metrics, "costs": costs, "n": len(ds)}
    rid = _report(ctx, "training_report.json", report)
    ctx.progress(1.0, "trained", accountant_epsilon=eps, **metrics)
    return {"model_version_id": info.model_version_id, "report_artifact_id": rid, "guarantee": guarantee,
            "accountant_epsilon": eps, "costs": costs, "metrics": metrics, "certificate": None}


class CanaryAuditSteps:
    """The hidden-state canary audit as Steps: step i is pair i of seeded runs (dpsgd.canary_run); the scores so
    far are the checkpointed state; result() is the verdict and the report."""

    def __init__(self, p: AuditParams, cfg: dpsgd.DpSgdConfig, num_classes: int, X: torch.Tensor, y: torch.Tensor):
        self.p, self.cfg, self.num_classes, self.X, self.y = p, cfg, num_classes, X, y
        self.total = p.runs

    def setup(self, ctx: JobContext) -> None:
        dpsgd.check_canary_audit(self.cfg, self.p.runs, self.p.canary_every, self.p.alpha)
        self.coordinate = dpsgd.least_updated_coordinate(self.X, self.y, self.num_classes, self.cfg)
        self.scores: dict[str, list] = {"with": [], "without": [], "insertions": []}

    def step(self, i: int) -> None:
        run = dpsgd.canary_run(self.X, self.y, self.num_classes, self.cfg, canary_every=self.p.canary_every,
                               seed=self.p.seed, noise_scale=1.0, coordinate=self.coordinate, i=i)
        for k, v in zip(("with", "without", "insertions"), run, strict=True):
            self.scores[k].append(v)

    def state(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.scores.items()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.scores = {k: list(state[k]) for k in ("with", "without", "insertions")}

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p, cfg = self.p, self.cfg
        out = dpsgd.canary_audit_result(cfg, self.scores, runs=p.runs, canary_every=p.canary_every, alpha=p.alpha,
                                        coordinate=self.coordinate)
        result = {"job": "audit", "method": "hidden_state_canary", "model_version_id": p.model_version_id,
                  "canary_every": p.canary_every, "runs": p.runs, "accountant": cfg.accountant,
                  "accountant_epsilon": out.accountant_epsilon, "eps_lower": out.eps_lower, "ratio": out.ratio,
                  "epsilon_audit": out.epsilon_audit, "coordinate": out.coordinate, "dpsgd": cfg.to_dict(),
                  "mean_insertions": out.mean_insertions,
                  "table": {"mechanism": "dpsgd", "k": p.canary_every, "runs": p.runs, "eps_lower": out.eps_lower,
                            "eps_upper": out.accountant_epsilon}}
        result["report_artifact_id"] = _report(ctx, "audit_report.json", result)
        ctx.progress(1.0, "audited", eps_lower=out.eps_lower, accountant_epsilon=out.accountant_epsilon)
        return result


def run_canary_audit(ctx: JobContext, p: AuditParams) -> dict[str, Any]:

    tensors, config = ctx.load_model(p.model_version_id)
    if config.get("kind") != "dpsgd_softmax" or not config.get("dpsgd"):
        raise FailedPrecondition(f"model version {p.model_version_id} was not trained with DP-SGD (kind "
                                 f"{config.get('kind')!r}): the hidden-state canary audit replays a DP-SGD "
                                 "training configuration", reason="NOT_DPSGD")
    cfg = dpsgd.DpSgdConfig(**config["dpsgd"])
    ds_id = p.dataset_artifact_id or config.get("dataset_artifact_id")
    ds, _ = read_dataset(ctx, ds_id, "dataset_artifact_id")
    if p.canary_every > cfg.steps:
        raise InvalidArgument("canary_every", f"must be at most the {cfg.steps} training steps")
    job = CanaryAuditSteps(p, cfg, int(config["num_classes"]), ds.X, ds.y.to(torch.int64))
    return run_steps(ctx, job, checkpoint_every=max(1, min(p.checkpoint_every, p.runs // 10 or 1)),
                     message=lambda done, total: f"canary audit: run {done}/{total}", progress_span=(0.0, 0.95),
                     fingerprint=_params_key(ctx))
