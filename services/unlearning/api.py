"""UnlearningService: proto <-> domain only. Validation, records and reports live in records.py; the jobs
in jobs.py (run by workers)."""
from __future__ import annotations

import math
from typing import Any

import grpc

from praxon.common.v1 import common_pb2
from praxon.unlearning.v1 import unlearning_pb2, unlearning_pb2_grpc
from services.common import convert
from services.common.errors import InvalidArgument
from services.common.jobs import page_size
from services.common.server import AppContext, current_request_id, current_tenant, current_token
from services.unlearning.records import AuditRequest, Requester, TrainRequest, UnlearningRecords, UnlearnRequest

pb = unlearning_pb2

METHODS = {pb.METHOD_CERTIFIED_NOISY_MINIMIZER: "certified_noisy_minimizer",
           pb.METHOD_ROBUST_CERTIFIED: "robust_certified", pb.METHOD_NOISY_FINETUNE: "noisy_finetune",
           pb.METHOD_RETRAIN: "retrain", pb.METHOD_FINETUNE: "finetune",
           pb.METHOD_GRADIENT_ASCENT: "gradient_ascent", pb.METHOD_FLAT: "flat", pb.METHOD_NPO: "npo"}
METHOD_ENUMS = {v: k for k, v in METHODS.items()}
KINDS = {pb.MODEL_KIND_LOGREG_L2: "logreg_l2", pb.MODEL_KIND_SOFTMAX_L2: "softmax_l2",
         pb.MODEL_KIND_RIDGE_L2: "ridge_l2", pb.MODEL_KIND_DPSGD_SOFTMAX: "dpsgd_softmax",
         pb.MODEL_KIND_CAUSAL_LM_QA: "causal_lm_qa"}
ADAPTATIONS = {pb.ADAPTATION_UNSPECIFIED: "lora", pb.ADAPTATION_LORA: "lora", pb.ADAPTATION_FULL: "full"}
DIVERGENCES = {pb.FLAT_DIVERGENCE_UNSPECIFIED: "total_variation",
               **{getattr(pb, "FLAT_DIVERGENCE_" + n.upper()): n for n in
                  ("total_variation", "kl", "reverse_kl", "jeffrey", "squared_hellinger", "pearson", "neyman",
                   "jensen_shannon")}}
AUDIT_METHODS = {pb.AUDIT_METHOD_UNSPECIFIED: "", pb.AUDIT_METHOD_OUTPUT_PERTURBATION: "output_perturbation",
                 pb.AUDIT_METHOD_HIDDEN_STATE_CANARY: "hidden_state_canary"}
AUDIT_METHOD_ENUMS = {v: k for k, v in AUDIT_METHODS.items() if v}


def _method(value: int) -> str:
    if value not in METHODS:
        raise InvalidArgument("method", "required: one of " + ", ".join(pb.Method.Name(k) for k in METHODS))
    return METHODS[value]


def _audit_method(value: int) -> str:
    if value not in AUDIT_METHODS:
        raise InvalidArgument("method", "one of " + ", ".join(pb.AuditMethod.Name(k) for k in AUDIT_METHODS))
    return AUDIT_METHODS[value]


def _opt(msg, name: str) -> float | None:
    return getattr(msg, name) if msg.HasField(name) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _scalars(d: dict | None) -> dict[str, float]:
    return {str(k): f for k, v in (d or {}).items() if (f := _num(v)) is not None}


def _certificate(c: dict | None) -> pb.Certificate | None:
    if not c:
        return None
    return pb.Certificate(certified=bool(c.get("certified")), epsilon=_num(c.get("epsilon")) or 0.0,
                          delta=_num(c.get("delta")) or 0.0, radius=_num(c.get("radius")) or 0.0,
                          sigma=_num(c.get("sigma")) or 0.0, steps=int(c.get("steps") or 0),
                          gradient_evaluations=int(c.get("grad_evals") or 0),
                          final_gradient_norm=_num(c.get("final_grad_norm")) or 0.0, mu=_num(c.get("mu")) or 0.0,
                          start=str(c.get("start") or ""), definition=str(c.get("definition") or ""))


def _error(reason: str | None, message: str | None) -> common_pb2.JobError | None:
    return common_pb2.JobError(reason=reason, message=message or "") if reason else None


def _dpsgd(msg) -> dict[str, Any] | None:
    if msg is None:
        return None
    names = {"noise_multiplier": "noise_multiplier", "max_grad_norm": "max_grad_norm", "steps": "steps",
             "sample_rate": "sample_rate", "learning_rate": "lr"}
    return {ours: getattr(msg, theirs) for theirs, ours in names.items() if msg.HasField(theirs)}


def _language_model(msg) -> dict[str, Any]:
    """LanguageModelTuning -> LanguageModelParams fields (0 / unset: the default; enums checked here)."""
    if msg.adaptation not in ADAPTATIONS:
        raise InvalidArgument("language_model.adaptation", "one of " + ", ".join(pb.Adaptation.Name(k)
                                                                              for k in ADAPTATIONS))
    if msg.divergence not in DIVERGENCES:
        raise InvalidArgument("language_model.divergence", "one of " + ", ".join(pb.FlatDivergence.Name(k)
                                                                              for k in DIVERGENCES))
    out: dict[str, Any] = {"adaptation": ADAPTATIONS[msg.adaptation], "divergence": DIVERGENCES[msg.divergence]}
    for name in ("lora_rank", "lora_alpha", "epochs", "learning_rate", "batch_size", "npo_beta", "grad_accum",
                 "checkpoint_every"):
        if getattr(msg, name):
            out[name] = getattr(msg, name)
    for name in ("npo_retain_weight", "max_length", "weight_decay", "lora_dropout"):
        if msg.HasField(name):
            out[name] = getattr(msg, name)
    if msg.template_answers:
        out["template_answers"] = list(msg.template_answers)
    return out


def _guarantee(g: dict | None) -> pb.Guarantee | None:
    if not g:
        return None
    return pb.Guarantee(kind=str(g.get("kind") or ""), epsilon=_num(g.get("epsilon")) or 0.0,
                        delta=_num(g.get("delta")) or 0.0, mechanism=str(g.get("mechanism") or ""),
                        statement=str(g.get("statement") or ""))


def _audit(a: dict) -> pb.Audit:
    res = a["result"] or {}
    ea = res.get("epsilon_audit") or {}
    return pb.Audit(job_id=str(a["job_id"]), state=convert.JOB_STATES[a["state"]],
                    method=AUDIT_METHOD_ENUMS.get(str(res.get("method") or "output_perturbation"),
                                                  pb.AUDIT_METHOD_UNSPECIFIED),
                    accountant_epsilon=_num(res.get("accountant_epsilon")) or 0.0,
                    canary_every=int(res.get("canary_every") or 0), runs=int(res.get("runs") or 0),
                    confidence=_num(ea.get("confidence")) or 0.0,
                    epsilon_lower_bound=_num(ea.get("eps_lower")) or 0.0,
                    claimed_epsilon=_num(ea.get("claimed_epsilon")) or 0.0, violated=bool(ea.get("violated")),
                    pre_noise_distance=_num(res.get("pre_noise_distance")) or 0.0,
                    sensitivity_bound=_num(res.get("sensitivity_bound")) or 0.0,
                    report_artifact_id=str(res.get("report_artifact_id") or ""),
                    error=_error(a["error_reason"], a["error_message"]), finish_time=convert.ts(a["finished_at"]))


def record_message(r: dict) -> pb.UnlearningRecord:
    res = r["result"] or {}
    regime = res.get("regime")
    msg = pb.UnlearningRecord(
        id=r["id"], job_id=str(r["job_id"]),
        requester=pb.Requester(tenant_id=str(r["tenant_id"]), token_id=str(r["token_id"] or ""),
                               token_name=r["token_name"], request_id=r["request_id"]),
        source_model=common_pb2.ModelRef(name=r["source_model_name"], version=r["source_model_version"]),
        source_model_version_id=r["source_model_version_id"], dataset_artifact_id=str(r["dataset_artifact_id"]),
        forget_record_ids=list(r["forget_record_ids"]),
        forget_set_artifact_id=str(r["forget_set_artifact_id"] or ""),
        method=METHOD_ENUMS.get(r["method"], pb.METHOD_UNSPECIFIED), epsilon=r["epsilon"] or 0.0,
        delta=r["delta"] or 0.0, reason=r["reason"], create_time=convert.ts(r["created_at"]),
        state=convert.JOB_STATES[r["state"]], certificate=_certificate(res.get("certificate")),
        new_model_version_id=r["new_model_version_id"], report_artifact_id=str(res.get("report_artifact_id") or ""),
        regime=str(regime.get("regime", "")) if isinstance(regime, dict) else "",
        costs=_scalars(res.get("costs")), metrics=_scalars(res.get("metrics")),
        error=_error(r["error_reason"], r["error_message"]), finish_time=convert.ts(r["finished_at"]),
        audits=[_audit(a) for a in r["audits"]], guarantee=_guarantee(res.get("guarantee")))
    if r["new_model_name"]:
        msg.new_model.CopyFrom(common_pb2.ModelRef(name=r["new_model_name"], version=r["new_model_version"] or 0))
    return msg


class UnlearningServicer(unlearning_pb2_grpc.UnlearningServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app
        self.records = UnlearningRecords(app.pool, app.registry, app.jobs)

    async def StartTrainingJob(self, request, context):
        if request.kind not in KINDS:
            raise InvalidArgument("kind", "required: one of " + ", ".join(pb.ModelKind.Name(k) for k in KINDS))
        req = TrainRequest(dataset_artifact_id=request.dataset_artifact_id, kind=KINDS[request.kind],
                           name=request.name, mu=request.mu, r=_opt(request, "r"), epsilon=_opt(request, "epsilon"),
                           delta=_opt(request, "delta"), seed=request.seed, num_classes=request.num_classes,
                           capacity=request.capacity, eval_dataset_artifact_id=request.eval_dataset_artifact_id,
                           idempotency_key=request.idempotency_key,
                           dpsgd=_dpsgd(request.dpsgd) if request.HasField("dpsgd") else None,
                           base_model_name=request.base_model.name, base_model_version=request.base_model.version,
                           base_model_alias=request.base_model.alias,
                           language_model=(_language_model(request.language_model)
                                           if request.HasField("language_model") else None))
        row = await self.app.db(self.records.start_training, current_tenant(), req)
        return pb.StartTrainingJobResponse(job=convert.job(row))

    async def StartUnlearningJob(self, request, context):
        token_id, token_name = current_token()
        who = Requester(current_tenant(), token_id, token_name, current_request_id())
        ref = request.model if request.HasField("model") else common_pb2.ModelRef()
        req = UnlearnRequest(model_version_id=request.model_version_id, model_name=ref.name,
                             model_version=ref.version, model_alias=ref.alias,
                             forget_record_ids=list(request.forget_record_ids),
                             forget_set_artifact_id=request.forget_set_artifact_id, method=_method(request.method),
                             epsilon=_opt(request, "epsilon"), delta=_opt(request, "delta"), seed=request.seed,
                             name=request.name, eval_dataset_artifact_id=request.eval_dataset_artifact_id,
                             reason=request.reason, steps=request.steps, learning_rate=request.learning_rate,
                             idempotency_key=request.idempotency_key,
                             language_model=(_language_model(request.language_model)
                                             if request.HasField("language_model") else None))
        row, record_id = await self.app.db(self.records.start_unlearning, who, req)
        return pb.StartUnlearningJobResponse(job=convert.job(row), record_id=record_id)

    async def StartAuditJob(self, request, context):
        ref = request.model if request.HasField("model") else common_pb2.ModelRef()
        req = AuditRequest(record_id=request.record_id, model_name=ref.name, model_version=ref.version,
                           model_alias=ref.alias, runs=request.runs, alpha=request.alpha, seed=request.seed,
                           idempotency_key=request.idempotency_key, canary_every=request.canary_every,
                           method=_audit_method(request.method))
        row = await self.app.db(self.records.start_audit, current_tenant(), req)
        return pb.StartAuditJobResponse(job=convert.job(row))

    async def GetUnlearningRecord(self, request, context):
        rec = await self.app.db(self.records.get, current_tenant(), request.record_id)
        return pb.GetUnlearningRecordResponse(record=record_message(rec))

    async def ListUnlearningRecords(self, request, context):
        size, tenant = page_size(request.page_size), current_tenant()
        rows, token = await self.app.db(lambda: self.records.list(tenant, size=size, token=request.page_token,
                                                                  model_name=request.model_name))
        return pb.ListUnlearningRecordsResponse(records=[record_message(r) for r in rows], next_page_token=token)

    async def GetUnlearningReport(self, request, context):
        text, digest, art = await self.app.db(self.records.report, current_tenant(), request.record_id)
        return pb.GetUnlearningReportResponse(report_json=text, sha256=digest,
                                              job_report=convert.artifact(art) if art else None)


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    unlearning_pb2_grpc.add_UnlearningServiceServicer_to_server(UnlearningServicer(app), server)
    return [pb.DESCRIPTOR.services_by_name["UnlearningService"].full_name]
