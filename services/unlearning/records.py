"""Unlearning requests and their immutable records (PostgreSQL), behind the gRPC API.

- Every StartUnlearningJob inserts one `unlearning_records` row in the same transaction as its job
  (JobStore.submit(in_transaction=...)): who asked (tenant, API token, request id), which model version, which
  dataset (from lineage) and records, the method and privacy parameters, the caller's reason.
- The outcome (job state, certificate, costs, the new model version) and each audit of the new version are
  inserted once, by the job kinds' on_finish hooks (hooks.py), in the job's finishing transaction.
- The three tables are insert-only: UPDATE/DELETE/TRUNCATE raise at the database.

Requests are validated here, before any job exists, with the same checks the job repeats
(jobs.check_forget_request): bad input is INVALID_ARGUMENT on the call, not a failed job.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from psycopg import Connection
from psycopg.types.json import Jsonb

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.jobs import (
    JobStore,
    decode_page_token,
    encode_page_token,
    parse_uuid,
)
from services.common.registry import Registry
from services.unlearning import guard_jobs
from services.unlearning.data import decode_dataset, decode_forget_set, parse_forget_ids
from services.unlearning.jobs import CERTIFIED_METHODS, METHODS, check_forget_request
from services.common.params import parse_params
from services.unlearning.linear import CONVEX_KINDS
from services.unlearning.params import FIELD_PATHS, AuditParams, TrainParams, UnlearnParams, require_mu

REPORT_SCHEMA = "praxon.unlearning.report/v1"
# Record ids are checked against the dataset at request time when the dataset artifact is at most this big;
# beyond it the job checks them (and fails with a structured INVALID_ARGUMENT error).
REQUEST_CHECK_MAX_BYTES = 64 * 1024 * 1024
MAX_FORGET_IDS = 100_000
MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class Requester:
    tenant_id: str
    token_id: str = ""
    token_name: str = ""
    request_id: str = ""


@dataclass
class TrainRequest:
    dataset_artifact_id: str
    kind: str
    name: str
    mu: float
    r: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    seed: int = 0
    num_classes: int = 0
    capacity: int = 0
    eval_dataset_artifact_id: str = ""
    idempotency_key: str = ""
    dpsgd: dict[str, Any] | None = None   # kind dpsgd_softmax: DpSgdParams fields
    base_model_name: str = ""             # kind causal_lm_qa: the causal LM to fine-tune
    base_model_version: int = 0
    base_model_alias: str = ""
    language_model: dict[str, Any] | None = None  # kind causal_lm_qa: LanguageModelParams fields


@dataclass
class UnlearnRequest:
    model_version_id: str = ""
    model_name: str = ""
    model_version: int = 0
    model_alias: str = ""
    forget_record_ids: list[str] = field(default_factory=list)
    forget_set_artifact_id: str = ""
    method: str = ""
    epsilon: float | None = None
    delta: float | None = None
    seed: int = 0
    name: str = ""
    eval_dataset_artifact_id: str = ""
    reason: str = ""
    steps: int = 0
    learning_rate: float = 0.0
    idempotency_key: str = ""
    language_model: dict[str, Any] | None = None  # causal LMs: LanguageModelParams fields


@dataclass
class AuditRequest:
    record_id: str = ""
    model_name: str = ""
    model_version: int = 0
    model_alias: str = ""
    runs: int = 0
    alpha: float = 0.0
    seed: int = 0
    idempotency_key: str = ""
    method: str = ""          # "" = output_perturbation
    canary_every: int = 0     # hidden_state_canary: k (0 means 1)


@dataclass
class UnlearningRecords:
    pool: Any  # psycopg_pool.ConnectionPool
    registry: Registry
    jobs: JobStore

    # ---- requests ---------------------------------------------------------------------------------------
    def start_training(self, tenant: str, req: TrainRequest) -> dict:
        raw: dict[str, Any] = {"dataset_artifact_id": req.dataset_artifact_id, "kind": req.kind, "name": req.name,
                               "seed": req.seed, "num_classes": req.num_classes, "capacity": req.capacity,
                               "eval_dataset_artifact_id": req.eval_dataset_artifact_id or None}
        if req.kind != "dpsgd_softmax" or req.mu:
            raw["mu"] = req.mu
        for k in ("r", "epsilon", "delta"):
            if getattr(req, k) is not None:
                raw[k] = getattr(req, k)
        if req.dpsgd is not None:
            raw["dpsgd"] = {k: v for k, v in req.dpsgd.items() if v is not None}
        if req.language_model is not None:
            raw["language_model"] = req.language_model
        if req.kind == "causal_lm_qa":
            raw.pop("mu", None)
        tp = parse_params(TrainParams, raw, field_paths={"dpsgd": "dpsgd"})
        if tp.kind == "causal_lm_qa":
            return self._start_qa_finetune(tenant, req, tp)
        if tp.kind in CONVEX_KINDS:
            require_mu(tp)
        self.registry.get_artifact(tenant, tp.dataset_artifact_id, "dataset_artifact_id")
        params = tp.model_dump(exclude_none=True)
        params["dataset_artifact_id"] = parse_uuid(tp.dataset_artifact_id, "dataset_artifact_id")
        if tp.eval_dataset_artifact_id:
            params["eval_dataset_artifact_id"] = str(self.registry.get_artifact(
                tenant, tp.eval_dataset_artifact_id, "eval_dataset_artifact_id")["id"])
        return self.jobs.submit(tenant, "unlearning.train", params, req.idempotency_key)

    def _start_qa_finetune(self, tenant: str, req: TrainRequest, tp: TrainParams) -> dict:
        """kind causal_lm_qa: the base model must be a causal LM, the dataset a QA JSONL (checked here when small)."""
        from services.unlearning.llm_jobs import is_lm_config, parse_qa

        if not req.base_model_name:
            raise InvalidArgument("base_model.name", "name the causal language model to fine-tune")
        base = self.registry.resolve(tenant, req.base_model_name, req.base_model_version, req.base_model_alias,
                                     "base_model")
        if not is_lm_config(dict(base["config"])):
            raise FailedPrecondition(f"model version {base['name']} v{base['version']} is not a causal language "
                                     "model (Hugging Face format)", reason="NOT_A_LANGUAGE_MODEL")
        row = self.registry.get_artifact(tenant, tp.dataset_artifact_id, "dataset_artifact_id")
        if row["size_bytes"] <= REQUEST_CHECK_MAX_BYTES:
            parse_qa(self.registry.store.get_bytes(row["object_key"], row["sha256"]))
        params = tp.model_dump(exclude_none=True)
        params["dataset_artifact_id"] = str(row["id"])
        params["base_model_version_id"] = str(base["id"])
        if tp.eval_dataset_artifact_id:
            ev = self.registry.get_artifact(tenant, tp.eval_dataset_artifact_id, "eval_dataset_artifact_id")
            params["eval_dataset_artifact_id"] = str(ev["id"])
            if ev["size_bytes"] <= REQUEST_CHECK_MAX_BYTES:
                parse_qa(self.registry.store.get_bytes(ev["object_key"], ev["sha256"]), "eval_dataset_artifact_id")
        params = parse_params(TrainParams, params).model_dump(exclude_none=True)
        return self.jobs.submit(tenant, "unlearning.train", params, req.idempotency_key)

    def _version(self, tenant: str, version_id: str, name: str, version: int, alias: str) -> dict:
        if version_id and name:
            raise InvalidArgument("model_version_id", "give model or model_version_id, not both")
        if version_id:
            return self.registry.version_by_id(tenant, version_id, "model_version_id")
        if not name:
            raise InvalidArgument("model.name", "name the model version (model or model_version_id)")
        return self.registry.resolve(tenant, name, version, alias, "model")

    def _dataset_ids(self, tenant: str, dataset_id: str, config: dict | None = None) -> set[str] | None:
        """The record ids the dataset artifact holds (tombstoned or not), when it is cheap to read here. For a
        moderation guard: the ids of the rows it was trained on (its JSONL split as the trainer split it)."""
        row = self.registry.get_artifact(tenant, dataset_id, "dataset_artifact_id")
        if row["size_bytes"] > REQUEST_CHECK_MAX_BYTES:
            return None
        blob = self.registry.store.get_bytes(row["object_key"], row["sha256"])
        from services.unlearning.llm_jobs import is_lm_config, parse_qa

        if config is not None and is_lm_config(config):
            return {r["id"] for r in parse_qa(blob)}
        adapter = guard_jobs.adapter_of(config) if config is not None else None
        if adapter is not None:
            return set(adapter.records(blob, config)[1])
        ds = decode_dataset(blob)
        return set(ds.record_ids)

    def _check_ids(self, tenant: str, ds_id: str, config: dict, method: str, ids: list[str]) -> None:
        """The forget ids against the dataset and its tombstones. In a frame of its own so that the id sets (about
        1 MB for 10k records) are freed on return: as locals of start_unlearning, the traceback of a refused submit
        (RESOURCE_EXHAUSTED over the job quota) kept them alive until a full cyclic GC, and under load dozens of
        such frames at a time grew the heap (issue 18)."""
        forgotten = self.registry.tombstones(tenant, ds_id)
        dataset_ids = self._dataset_ids(tenant, ds_id, config)
        check_forget_request(method, config, ids, forgotten, dataset_ids)
        if dataset_ids is not None and len(dataset_ids - forgotten - set(ids)) == 0:
            raise InvalidArgument("forget_record_ids", "nothing would be left to train on")

    def start_unlearning(self, requester: Requester, req: UnlearnRequest) -> tuple[dict, str]:
        """Validate, then insert the job and its record in one transaction. Returns (job row, record id)."""
        tenant = requester.tenant_id
        if req.idempotency_key:  # a retried request gets its job and record back, even once its ids are gone
            found = self._by_idempotency_key(tenant, req.idempotency_key)
            if found is not None:
                return found
        if req.method not in METHODS:
            raise InvalidArgument("method", f"one of {', '.join(METHODS)}")
        # the job's own parameter model, on what is known before the version is resolved
        typed = parse_params(UnlearnParams, {
            "model_version_id": req.model_version_id or "-", "method": req.method, "epsilon": req.epsilon,
            "delta": req.delta, "seed": req.seed, "name": req.name or None,
            **({"steps": req.steps} if req.steps else {}), **({"lr": req.learning_rate} if req.learning_rate else {}),
            **({"language_model": req.language_model} if req.language_model is not None else {})},
            field_paths=FIELD_PATHS)
        if req.forget_record_ids and req.forget_set_artifact_id:
            raise InvalidArgument("forget_record_ids", "give forget_record_ids or forget_set_artifact_id, not both")
        if not req.forget_record_ids and not req.forget_set_artifact_id:
            raise InvalidArgument("forget_record_ids", "name at least one record to forget "
                                                       "(or give forget_set_artifact_id)")
        if len(req.forget_record_ids) > MAX_FORGET_IDS:
            raise InvalidArgument("forget_record_ids", f"at most {MAX_FORGET_IDS} ids per request; upload a forget set")
        if len(req.reason) > MAX_REASON_CHARS:
            raise InvalidArgument("reason", f"at most {MAX_REASON_CHARS} characters")
        version = self._version(tenant, req.model_version_id, req.model_name, req.model_version, req.model_alias)
        config = dict(version["config"])
        from services.unlearning.llm_jobs import is_lm_config

        if is_lm_config(config):
            for name, given in (("steps", req.steps), ("learning_rate", req.learning_rate)):
                if given:
                    raise InvalidArgument(name, f"a causal language model takes language_model.epochs and "
                                                f"language_model.learning_rate, not {name}")
        elif req.language_model is not None:
            raise InvalidArgument("language_model", "applies to causal language models only")
        ds_id = str(version["dataset_artifact_id"] or config.get("dataset_artifact_id") or "")
        if not ds_id:
            raise FailedPrecondition(f"model version {version['id']} has no training dataset in its lineage: "
                                     "records cannot be named", reason="NO_DATASET_LINEAGE")
        forget_set_id = None
        if req.forget_set_artifact_id:
            fs = self.registry.get_artifact(tenant, req.forget_set_artifact_id, "forget_set_artifact_id")
            forget_set_id = str(fs["id"])
            ids = decode_forget_set(self.registry.store.get_bytes(fs["object_key"], fs["sha256"]))
            if len(ids) > MAX_FORGET_IDS:
                raise InvalidArgument("forget_set_artifact_id", f"at most {MAX_FORGET_IDS} ids per request")
        else:
            ids = parse_forget_ids(list(req.forget_record_ids))
        if req.eval_dataset_artifact_id:
            self.registry.get_artifact(tenant, req.eval_dataset_artifact_id, "eval_dataset_artifact_id")
        self._check_ids(tenant, ds_id, config, req.method, ids)

        record_id = str(uuid.uuid4())
        # the dataset comes from the version's lineage (a moderation guard's config does not name it)
        params: dict[str, Any] = {"model_version_id": str(version["id"]), "forget_record_ids": ids,
                                  "method": typed.method, "seed": typed.seed, "record_id": record_id,
                                  "dataset_artifact_id": ds_id}
        for k in ("epsilon", "delta"):
            if getattr(typed, k) is not None:
                params[k] = getattr(typed, k)
        params["name"] = typed.name or version["name"]  # the new version joins the source's model by default
        if req.eval_dataset_artifact_id:
            params["eval_dataset_artifact_id"] = parse_uuid(req.eval_dataset_artifact_id, "eval_dataset_artifact_id")
        if req.steps:
            params["steps"] = typed.steps
        if req.learning_rate:
            params["lr"] = typed.lr
        if typed.language_model is not None:
            params["language_model"] = typed.language_model.model_dump(exclude_none=True)
        params = parse_params(UnlearnParams, params, field_paths=FIELD_PATHS).model_dump(exclude_none=True)

        def insert_record(conn: Connection, job: dict) -> None:
            conn.execute(
                "INSERT INTO unlearning_records (id, tenant_id, job_id, token_id, token_name, request_id, "
                "source_model_version_id, source_model_name, source_model_version, dataset_artifact_id, "
                "forget_record_ids, forget_set_artifact_id, method, epsilon, delta, reason, params) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (record_id, tenant, job["id"], requester.token_id or None, requester.token_name,
                 requester.request_id, version["id"], version["name"], version["version"], ds_id, ids, forget_set_id,
                 req.method, req.epsilon, req.delta, req.reason, Jsonb(params)))

        job = self.jobs.submit(tenant, "unlearning.unlearn", params, req.idempotency_key, in_transaction=insert_record)
        if str(job["params"].get("record_id")) == record_id:
            return job, record_id
        found = self._by_idempotency_key(tenant, req.idempotency_key)  # lost a race on the same key
        if found is None:
            raise InvalidArgument("idempotency_key", "already used for another request")
        return found

    def _by_idempotency_key(self, tenant: str, key: str) -> tuple[dict, str] | None:
        with self.pool.connection() as conn:
            job = conn.execute("SELECT * FROM jobs WHERE tenant_id = %s AND idempotency_key = %s",
                               (tenant, key)).fetchone()
            if job is None:
                return None
            rec = conn.execute("SELECT id FROM unlearning_records WHERE job_id = %s", (job["id"],)).fetchone()
        if rec is None:
            raise InvalidArgument("idempotency_key", "already used for a job of another kind")
        return job, str(rec["id"])

    def start_audit(self, tenant: str, req: AuditRequest) -> dict:
        method = req.method or "output_perturbation"
        base: dict[str, Any] = {"model_version_id": "-", "method": method, "runs": req.runs or 1000,
                                "alpha": req.alpha or 0.05, "seed": req.seed,
                                "canary_every": req.canary_every or 1}
        parse_params(AuditParams, base)
        if req.record_id and req.model_name:
            raise InvalidArgument("record_id", "give record_id or model, not both")
        params: dict[str, Any] = {k: v for k, v in base.items() if k != "model_version_id"}
        if req.record_id:
            rec = self.get(tenant, req.record_id)
            if rec["state"] != "SUCCEEDED" or not rec["new_model_version_id"]:
                raise FailedPrecondition(f"unlearning record {rec['id']} has no new model version yet "
                                         f"(job {rec['state']})", reason="RECORD_NOT_SUCCEEDED")
            version = self.registry.version_by_id(tenant, rec["new_model_version_id"])
            params.update(record_id=rec["id"], original_model_version_id=rec["source_model_version_id"])
            if rec["params"].get("eval_dataset_artifact_id"):
                params["eval_dataset_artifact_id"] = rec["params"]["eval_dataset_artifact_id"]
        elif req.model_name:
            version = self.registry.resolve(tenant, req.model_name, req.model_version, req.model_alias, "model")
        else:
            raise InvalidArgument("record_id", "name the record (or the model) to audit")
        config = dict(version["config"])
        if method == "hidden_state_canary":
            if config.get("kind") != "dpsgd_softmax" or not config.get("dpsgd"):
                raise FailedPrecondition(
                    f"model version {version['name']} v{version['version']} was not trained with DP-SGD (kind "
                    f"{version['kind']!r}): the hidden-state canary audit replays a DP-SGD training configuration",
                    reason="NOT_DPSGD")
            params["model_version_id"] = str(version["id"])
            params.pop("original_model_version_id", None)
            params.pop("eval_dataset_artifact_id", None)
            return self.jobs.submit(tenant, "unlearning.audit", parse_params(AuditParams, params).model_dump(
                exclude_none=True), req.idempotency_key)
        if not config.get("certificate") or not config.get("state_artifact_id"):
            raise FailedPrecondition(
                f"model version {version['name']} v{version['version']} carries no certificate (kind "
                f"{version['kind']!r}): the epsilon audit applies to outputs of {', '.join(CERTIFIED_METHODS)}; "
                "membership inference is in the unlearning report", reason="NOT_CERTIFIED")
        params["model_version_id"] = str(version["id"])
        return self.jobs.submit(tenant, "unlearning.audit", parse_params(AuditParams, params).model_dump(
            exclude_none=True), req.idempotency_key)

    # ---- reading records --------------------------------------------------------------------------------
    _SELECT = (
        "SELECT r.*, j.state, o.result, o.new_model_version_id, o.error_reason, o.error_message, o.finished_at, "
        "o.state AS outcome_state, nm.name AS new_model_name, nv.version AS new_model_version "
        "FROM unlearning_records r JOIN jobs j ON j.id = r.job_id "
        "LEFT JOIN unlearning_outcomes o ON o.record_id = r.id "
        "LEFT JOIN model_versions nv ON nv.id = o.new_model_version_id "
        "LEFT JOIN models nm ON nm.id = nv.model_id ")

    def _with_audits(self, conn: Connection, rows: list[dict]) -> list[dict]:
        audits: dict[str, list[dict]] = {}
        if rows:
            for a in conn.execute("SELECT * FROM unlearning_audits WHERE record_id = ANY(%s) "
                                  "ORDER BY finished_at, job_id", ([r["id"] for r in rows],)):
                audits.setdefault(str(a["record_id"]), []).append(a)
        out = []
        for r in rows:
            r = dict(r)
            r["id"] = str(r["id"])
            r["state"] = r["outcome_state"] or r["state"]  # the outcome, once written, is authoritative
            r["new_model_version_id"] = str(r["new_model_version_id"] or "")
            r["source_model_version_id"] = str(r["source_model_version_id"])
            r["audits"] = audits.get(r["id"], [])
            out.append(r)
        return out

    def get(self, tenant: str, record_id: str) -> dict:
        record_id = parse_uuid(record_id, "record_id")
        with self.pool.connection() as conn:
            row = conn.execute(self._SELECT + "WHERE r.id = %s AND r.tenant_id = %s", (record_id, tenant)).fetchone()
            if row is None:
                raise NotFound(f"unlearning record {record_id} not found")
            return self._with_audits(conn, [row])[0]

    def list(self, tenant: str, *, size: int, token: str = "", model_name: str = "") -> tuple[list[dict], str]:
        where, args = ["r.tenant_id = %s"], [tenant]
        if model_name:
            where.append("r.source_model_name = %s")
            args.append(model_name)
        if token:
            created, last_id = decode_page_token(token)
            where.append("(r.created_at, r.id) < (%s, %s)")
            args += [created, last_id]
        with self.pool.connection() as conn:
            rows = conn.execute(self._SELECT + f"WHERE {' AND '.join(where)} ORDER BY r.created_at DESC, r.id DESC "
                                "LIMIT %s", (*args, size + 1)).fetchall()
            nxt = encode_page_token(rows[size - 1]["created_at"], rows[size - 1]["id"]) if len(rows) > size else ""
            return self._with_audits(conn, rows[:size]), nxt

    # ---- the auditors' report ---------------------------------------------------------------------------
    def report(self, tenant: str, record_id: str) -> tuple[str, str, dict | None]:
        """(report JSON, its sha256, the job's own report artifact row or None). Deterministic for a given
        state of the record, so an auditor can compare exports by digest."""
        rec = self.get(tenant, record_id)
        result = rec["result"] or {}
        job_report, job_report_row = None, None
        if result.get("report_artifact_id"):
            job_report_row = self.registry.get_artifact(tenant, result["report_artifact_id"])
            job_report = json.loads(self.registry.store.get_bytes(job_report_row["object_key"],
                                                                  job_report_row["sha256"]))
        new_parents = self.registry.parents(rec["new_model_version_id"]) if rec["new_model_version_id"] else []
        doc = {
            "schema": REPORT_SCHEMA,
            "record_id": rec["id"],
            "requested_at": rec["created_at"].isoformat(),
            "requester": {"tenant_id": str(rec["tenant_id"]), "token_id": str(rec["token_id"] or ""),
                          "token_name": rec["token_name"], "request_id": rec["request_id"]},
            "request": {"method": rec["method"], "epsilon": rec["epsilon"], "delta": rec["delta"],
                        "reason": rec["reason"], "forget_record_ids": list(rec["forget_record_ids"]),
                        "forget_count": len(rec["forget_record_ids"]),
                        "forget_set_artifact_id": str(rec["forget_set_artifact_id"] or ""),
                        "dataset_artifact_id": str(rec["dataset_artifact_id"])},
            "source_model": {"id": rec["source_model_version_id"], "name": rec["source_model_name"],
                             "version": rec["source_model_version"]},
            "job": {"id": str(rec["job_id"]), "state": rec["state"],
                    "finished_at": rec["finished_at"].isoformat() if rec["finished_at"] else None,
                    "error": ({"reason": rec["error_reason"], "message": rec["error_message"]}
                              if rec["error_reason"] else None)},
            "outcome": None,
            "audits": [{"job_id": str(a["job_id"]), "state": a["state"], "finished_at": a["finished_at"].isoformat(),
                        "result": a["result"],
                        "error": {"reason": a["error_reason"], "message": a["error_message"]}
                        if a["error_reason"] else None} for a in rec["audits"]],
        }
        if rec["state"] == "SUCCEEDED":
            doc["outcome"] = {
                "certified": bool(result.get("certified")), "certificate": result.get("certificate"),
                "regime": result.get("regime"), "costs": result.get("costs"), "metrics": result.get("metrics"),
                "new_model": {"id": rec["new_model_version_id"], "name": rec["new_model_name"],
                              "version": rec["new_model_version"], "parent_version_ids": new_parents},
                "tombstoned_in_dataset": str(rec["dataset_artifact_id"]),
                "job_report_artifact_id": str(job_report_row["id"]) if job_report_row else "",
                "job_report": job_report,
            }
        text = json.dumps(doc, indent=2, sort_keys=True, default=str)
        return text, hashlib.sha256(text.encode()).hexdigest(), job_report_row
