"""UnlearningService end to end: the real gRPC server and interceptors, `praxon worker` subprocesses,
PostgreSQL and S3. Train -> forget -> certificate, record, lineage, audit, immutability; a retraining job never
reads forgotten records; bad input; a killed unlearning job resumes and its record is written once."""
from __future__ import annotations

import hashlib
import json
import uuid
from types import SimpleNamespace

import grpc
import psycopg
import pytest
from safetensors.torch import save as st_save

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.models.v1 import models_pb2, models_pb2_grpc
from praxon.unlearning.v1 import unlearning_pb2 as pb
from praxon.unlearning.v1 import unlearning_pb2_grpc
from services.common import db
from services.unlearning import approximate
from services.unlearning.data import DATASET_CONTENT_TYPE, encode_dataset
from services.unlearning.data import read_dataset
from services.unlearning.synthetic import blobs
from tests import harness
from tests.harness import auth, job_row, rpc_error_details, wait_for
from workers.runner import WorkerJobContext

N, DIM, CLASSES = 400, 10, 3
QUEUES = "training,unlearning,audit"


def _upload(channel, token, name, data, content_type=DATASET_CONTENT_TYPE) -> str:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    req = artifacts_pb2.UploadArtifactRequest(name=name, content_type=content_type, chunk=data)
    return stub.UploadArtifact(iter([req]), metadata=auth(token)).artifact.id


def _wait(settings, job_id: str, timeout: float = 120) -> dict:
    row = wait_for(lambda: (r := job_row(settings, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
                   timeout, interval=0.2, what=f"job {job_id}")
    assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    return row


@pytest.fixture(scope="module")
def settings(settings):
    """This module's own database and broker: its long-lived worker sees only this module's jobs."""
    with harness.private_platform(settings) as private:
        yield private

@pytest.fixture(scope="module")
def tenants(settings):
    """Two tenants with a token each, in this module's database."""
    suffix = uuid.uuid4().hex[:6]
    return {"a": harness.token_for(settings, f"tenant-a-{suffix}"), "b": harness.token_for(settings, f"tenant-b-{suffix}")}


@pytest.fixture(scope="module")
def env(settings, tenants, tmp_path_factory):
    server = harness.PlatformServer(settings, ["platform", "unlearning"])
    worker = harness.Worker(settings, tmp_path_factory.mktemp("ul-workers"), QUEUES)
    channel = grpc.insecure_channel(server.address)
    tenant, token = tenants["a"]
    X, y = blobs(N + 300, DIM, CLASSES, seed=3)
    ids = [f"rec-{i:04d}" for i in range(N)]
    ds = _upload(channel, token, "train.safetensors", encode_dataset(X[:N].float(), y[:N], ids))
    ev = _upload(channel, token, "eval.safetensors", encode_dataset(X[N:].float(), y[N:]))
    stub = unlearning_pb2_grpc.UnlearningServiceStub(channel)
    name = f"guard-head-{uuid.uuid4().hex[:6]}"
    job = stub.StartTrainingJob(pb.StartTrainingJobRequest(
        dataset_artifact_id=ds, kind=pb.MODEL_KIND_SOFTMAX_L2, name=name, mu=0.05, epsilon=1.0, delta=1e-5,
        eval_dataset_artifact_id=ev), metadata=auth(token)).job
    row = _wait(settings, job.id, 180)
    e = SimpleNamespace(server=server, worker=worker, channel=channel, stub=stub, tenant=tenant, token=token,
                        ds=ds, ev=ev, ids=ids, name=name, v1=row["result"]["model_version_id"],
                        registry=models_pb2_grpc.ModelRegistryServiceStub(channel), log_dir=worker.log.parent,
                        settings=settings)
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _record(env, record_id, token=None) -> pb.UnlearningRecord:
    return env.stub.GetUnlearningRecord(pb.GetUnlearningRecordRequest(record_id=record_id),
                                        metadata=auth(token or env.token)).record


def _count_records(settings) -> int:
    with db.connect(settings) as conn:
        return conn.execute("SELECT count(*) AS n FROM unlearning_records").fetchone()["n"]


def test_forget_certifies_records_lineage_audit_and_tombstones(env, settings):
    forget = env.ids[:8]
    resp = env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=env.name, version=1), forget_record_ids=forget,
        method=pb.METHOD_CERTIFIED_NOISY_MINIMIZER, epsilon=1.0, delta=1e-5, seed=3,
        eval_dataset_artifact_id=env.ev, reason="DSR-42"), metadata=auth(env.token))
    assert resp.record_id and resp.job.kind == "unlearning.unlearn"
    queued = _record(env, resp.record_id)  # the record exists from the request on, before any outcome
    assert queued.state in (common_pb2.JOB_STATE_QUEUED, common_pb2.JOB_STATE_RUNNING,
                            common_pb2.JOB_STATE_SUCCEEDED)
    _wait(settings, resp.job.id)

    rec = _record(env, resp.record_id)
    assert rec.state == common_pb2.JOB_STATE_SUCCEEDED and rec.job_id == resp.job.id
    assert list(rec.forget_record_ids) == forget and rec.dataset_artifact_id == env.ds
    assert rec.source_model_version_id == env.v1 and rec.source_model.version == 1
    assert rec.method == pb.METHOD_CERTIFIED_NOISY_MINIMIZER and rec.reason == "DSR-42"
    with db.connect(settings) as conn:
        token_row = conn.execute("SELECT id, name FROM api_tokens WHERE token_sha256 = %s",
                                 (db.hash_token(env.token),)).fetchone()
    assert rec.requester.tenant_id == env.tenant and rec.requester.token_id == str(token_row["id"])
    assert rec.requester.request_id
    c = rec.certificate
    assert c.certified and c.epsilon == 1.0 and c.delta == 1e-5
    assert c.radius > 0 and c.sigma > 0 and c.steps > 0 and c.gradient_evaluations > 0
    assert c.final_gradient_norm <= c.mu * c.radius  # the certified distance bound holds
    assert rec.regime == "in_distribution" and rec.costs["grad_evals"] > 0
    assert {"mia_auc_before", "mia_auc_after", "eval_accuracy"} <= set(rec.metrics)

    # the new version is in the registry, its lineage parent is the old one
    assert rec.new_model.name == env.name and rec.new_model.version == 2
    new = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=rec.new_model),
                                       metadata=auth(env.token)).version
    assert new.id == rec.new_model_version_id and list(new.parent_version_ids) == [env.v1]
    assert new.dataset_artifact_id == env.ds and list(new.config["excluded_record_ids"]) == forget

    # audit the new version against retraining; the audit is attached to the record
    audit = env.stub.StartAuditJob(pb.StartAuditJobRequest(record_id=rec.id, runs=100, seed=1),
                                   metadata=auth(env.token)).job
    _wait(settings, audit.id)
    rec = _record(env, rec.id)
    assert len(rec.audits) == 1
    a = rec.audits[0]
    assert a.job_id == audit.id and a.state == common_pb2.JOB_STATE_SUCCEEDED
    assert a.claimed_epsilon == 1.0 and not a.violated and a.epsilon_lower_bound <= a.claimed_epsilon
    assert 0 <= a.pre_noise_distance <= a.sensitivity_bound

    # immutable at the database: UPDATE and DELETE raise, whoever asks
    with db.connect(settings) as conn:
        for sql in ("UPDATE unlearning_records SET reason = 'rewritten' WHERE id = %s",
                    "DELETE FROM unlearning_records WHERE id = %s",
                    "UPDATE unlearning_outcomes SET state = 'FAILED' WHERE record_id = %s",
                    "DELETE FROM unlearning_audits WHERE record_id = %s"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="immutable"):
                with conn.transaction():
                    conn.execute(sql, (rec.id,))
    assert _record(env, rec.id).reason == "DSR-42"

    # the same records cannot be forgotten twice (checked at request time, no job, no record)
    before = _count_records(settings)
    with pytest.raises(grpc.RpcError) as err:
        env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
            model=rec.new_model, forget_record_ids=forget[:2], method=pb.METHOD_CERTIFIED_NOISY_MINIMIZER),
            metadata=auth(env.token))
    code, info, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "forget_record_ids"
    assert info.reason == "ALREADY_FORGOTTEN" and _count_records(settings) == before

    # deleted data never comes back: the jobs' dataset reader (over the worker's own context) drops it ...
    ctx = WorkerJobContext(SimpleNamespace(registry=env.server.app.registry, pool=env.server.app.pool,
                                           settings=settings),
                           {"id": str(uuid.uuid4()), "tenant_id": env.tenant, "kind": "unlearning.train",
                            "params": {}, "cancel_requested": False, "progress": 0.0}, owner="test")
    read, dropped = read_dataset(ctx, env.ds)
    assert sorted(dropped) == sorted(forget) and not set(forget) & set(read.record_ids)
    assert read.record_ids == env.ids[8:] and len(read) == N - 8
    # ... and a retraining job on the same dataset afterwards read exactly the remaining records
    retrain = env.stub.StartTrainingJob(pb.StartTrainingJobRequest(
        dataset_artifact_id=env.ds, kind=pb.MODEL_KIND_SOFTMAX_L2, name=env.name + "-retrained", mu=0.05),
        metadata=auth(env.token)).job
    res = _wait(settings, retrain.id)["result"]
    expected = hashlib.sha256("\n".join(env.ids[8:]).encode()).hexdigest()
    assert res["data"] == {"n": N - 8, "forgotten_dropped": 8, "record_ids_sha256": expected}
    retrained = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(
        model=common_pb2.ModelRef(name=env.name + "-retrained")), metadata=auth(env.token)).version
    assert sorted(retrained.config["excluded_record_ids"]) == sorted(forget)

    # the auditors' report: JSON with the record, certificate, audits and lineage
    report = env.stub.GetUnlearningReport(pb.GetUnlearningReportRequest(record_id=rec.id), metadata=auth(env.token))
    doc = json.loads(report.report_json)
    assert report.sha256 == hashlib.sha256(report.report_json.encode()).hexdigest()
    assert doc["schema"] == "praxon.unlearning.report/v1" and doc["request"]["forget_record_ids"] == forget
    assert doc["outcome"]["certificate"]["sigma"] == pytest.approx(c.sigma)
    assert doc["outcome"]["new_model"]["parent_version_ids"] == [env.v1]
    assert doc["outcome"]["job_report"]["forget_count"] == 8 and len(doc["audits"]) == 1
    assert report.job_report.content_type == "application/json"

    # listing pages through the tenant's records; another tenant sees none of them
    seen, page = [], ""
    while True:
        r = env.stub.ListUnlearningRecords(pb.ListUnlearningRecordsRequest(page_size=1, page_token=page,
                                                                           model_name=env.name),
                                           metadata=auth(env.token))
        seen += [x.id for x in r.records]
        page = r.next_page_token
        if not page:
            break
    assert rec.id in seen and len(seen) == len(set(seen))


def _error(env, token=None, **fields):
    base = {"model": common_pb2.ModelRef(name=env.name, version=1), "forget_record_ids": [env.ids[300]],
            "method": pb.METHOD_CERTIFIED_NOISY_MINIMIZER}
    base.update(fields)
    with pytest.raises(grpc.RpcError) as err:
        env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(**{k: v for k, v in base.items() if v is not None}),
                                    metadata=auth(token or env.token))
    return rpc_error_details(err.value)


def _mlp_version(env, settings) -> str:
    """A committed non-convex model version (an MLP over the same dataset), registered directly."""
    m = approximate.MLPClassifier(DIM, [4], CLASSES)
    weights = st_save({k: v.contiguous() for k, v in approximate.module_tensors(m).items()})
    reg, name = env.server.app.registry, f"mlp-{uuid.uuid4().hex[:6]}"
    with env.server.app.pool.connection() as conn:
        art = reg.put_artifact(conn, env.tenant, f"model/{name}/weights.safetensors", weights,
                               "application/vnd.safetensors")
        model = conn.execute("INSERT INTO models (tenant_id, name) VALUES (%s, %s) RETURNING id",
                             (env.tenant, name)).fetchone()
        conn.execute("INSERT INTO model_versions (model_id, tenant_id, version, kind, config, weights_artifact_id, "
                     "dataset_artifact_id) VALUES (%s, %s, 1, 'mlp_classifier', %s, %s, %s)",
                     (model["id"], env.tenant, psycopg.types.json.Jsonb(
                         {"kind": "mlp_classifier", "feature_dim": DIM, "num_classes": CLASSES, "hidden": [4],
                          "dataset_artifact_id": env.ds}), art["id"], env.ds))
    return name


def test_bad_requests_are_rejected_with_the_field_and_leave_no_record(env, settings, tenants):
    before = _count_records(settings)
    cases = [({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"delta": 1.0}, "delta"),
             ({"delta": 0.0}, "delta"), ({"forget_record_ids": ["no-such-record", env.ids[301]]}, "forget_record_ids"),
             ({"forget_record_ids": []}, "forget_record_ids"), ({"forget_record_ids": ["a", "a"]}, "forget_record_ids"),
             ({"method": pb.METHOD_UNSPECIFIED}, "method")]
    for fields, field in cases:
        code, info, bad, _ = _error(env, **fields)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, fields
        assert [v.field for v in bad.field_violations] == [field], fields
    code, info, bad, _ = _error(env, forget_record_ids=["no-such-record"])
    assert info.reason == "UNKNOWN_RECORD_IDS" and "no-such-record" in bad.field_violations[0].description

    # a model kind the method cannot certify: FAILED_PRECONDITION naming the method that can
    mlp = _mlp_version(env, settings)
    code, info, _, _ = _error(env, model=common_pb2.ModelRef(name=mlp))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info.reason == "NOT_CERTIFIABLE"
    assert info.metadata["suggested_method"] == "noisy_finetune"
    code, info, _, _ = _error(env, method=pb.METHOD_ROBUST_CERTIFIED)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info.reason == "NOT_ROBUST"
    assert info.metadata["suggested_method"] == "certified_noisy_minimizer"
    # auditing an uncertified version
    with pytest.raises(grpc.RpcError) as err:
        env.stub.StartAuditJob(pb.StartAuditJobRequest(model=common_pb2.ModelRef(name=mlp)), metadata=auth(env.token))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    # unknown model version, and another tenant's: NOT_FOUND, never which
    assert _error(env, model=common_pb2.ModelRef(name="no-such-model"))[0] == grpc.StatusCode.NOT_FOUND
    assert _error(env, model=None, model_version_id=str(uuid.uuid4()))[0] == grpc.StatusCode.NOT_FOUND
    other = tenants["b"][1]
    assert _error(env, token=other)[0] == grpc.StatusCode.NOT_FOUND
    assert _error(env, token=other, model=None, model_version_id=env.v1)[0] == grpc.StatusCode.NOT_FOUND
    assert _count_records(settings) == before

    listed = env.stub.ListUnlearningRecords(pb.ListUnlearningRecordsRequest(), metadata=auth(other))
    assert list(listed.records) == []
    with db.connect(settings) as conn:
        some = conn.execute("SELECT id FROM unlearning_records WHERE tenant_id = %s LIMIT 1", (env.tenant,)).fetchone()
    if some is not None:
        with pytest.raises(grpc.RpcError) as err:
            _record(env, str(some["id"]), token=other)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        _record(env, "not-a-uuid")
    code, _, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "record_id"


def test_killed_unlearning_job_resumes_and_its_record_is_written_once(env, settings):
    forget = env.ids[100:105]
    # a deliberately long uncertified run (many checkpointed steps) so the worker can be killed mid-way;
    # "latest" is the newest version of the lineage, so no earlier deletion makes it stale
    resp = env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=env.name), forget_record_ids=forget, method=pb.METHOD_FINETUNE,
        steps=3000, learning_rate=0.05, idempotency_key=f"kill-{uuid.uuid4().hex}"), metadata=auth(env.token))
    wait_for(lambda: job_row(settings, resp.job.id)["progress"] >= 0.1, 120, interval=0.05, what="unlearning progress")
    env.worker.kill9()
    killed_at = job_row(settings, resp.job.id)["progress"]
    env.worker = harness.Worker(env.settings, env.log_dir, QUEUES)
    row = _wait(settings, resp.job.id, 180)
    assert row["attempts"] == 2 and killed_at < 1.0
    with db.connect(settings) as conn:
        n = {t: conn.execute(f"SELECT count(*) AS n FROM {t} WHERE job_id = %s", (resp.job.id,)).fetchone()["n"]
             for t in ("unlearning_records", "unlearning_outcomes")}
        messages = [r["message"] for r in conn.execute("SELECT message FROM job_events WHERE job_id = %s ORDER BY seq",
                                                       (resp.job.id,))]
    assert n == {"unlearning_records": 1, "unlearning_outcomes": 1}
    assert any("resuming from checkpoint" in m for m in messages)
    rec = _record(env, resp.record_id)
    assert rec.state == common_pb2.JOB_STATE_SUCCEEDED and not rec.certificate.certified
    assert rec.guarantee.kind == "audited_only"  # fine-tuning proves nothing: the record says so
    assert rec.new_model_version_id and list(rec.forget_record_ids) == forget
    # the same idempotency key returns the same job and record
    again = env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=env.name), forget_record_ids=forget, method=pb.METHOD_FINETUNE,
        idempotency_key=row["idempotency_key"]), metadata=auth(env.token))
    assert again.job.id == resp.job.id and again.record_id == resp.record_id


def test_training_request_validation(env):
    bad = [({"mu": 0.0}, "mu"), ({"kind": pb.MODEL_KIND_UNSPECIFIED}, "kind"), ({"epsilon": 0.0}, "epsilon"),
           ({"name": "bad name!"}, "name"), ({"dataset_artifact_id": "nope"}, "dataset_artifact_id")]
    for fields, field in bad:
        req = dict({"dataset_artifact_id": env.ds, "kind": pb.MODEL_KIND_SOFTMAX_L2, "name": "x", "mu": 0.1}, **fields)
        with pytest.raises(grpc.RpcError) as err:
            env.stub.StartTrainingJob(pb.StartTrainingJobRequest(**req), metadata=auth(env.token))
        code, _, br, _ = rpc_error_details(err.value)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and br.field_violations[0].field == field, fields


def test_cli_demo_step_and_commands(env, capsys, tmp_path):
    import time

    from services.common.client import Target
    from services.cli.main import main
    from services.unlearning.cli import demo

    t0 = time.perf_counter()
    demo(Target(env.server.address, env.token))
    took = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "-certified: r=" in out and "audit " in out and "(ok)" in out and "parents=" in out, out
    with capsys.disabled():
        print(f"\nunlearning demo step: {took:.1f}s")  # the demo budget is "well under a minute"
    opts = ["--address", env.server.address, "--token", env.token, "--data-dir", str(tmp_path)]
    main(["unlearn", "records", *opts, "--model", "demo-guard-head", "--limit", "5"])
    listing = capsys.readouterr().out
    record_id = listing.split()[0]
    assert "certified_noisy_minimizer" in listing and "forgot 12" in listing
    main(["unlearn", "report", record_id, *opts, "--out", str(tmp_path / "report.json")])
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["record_id"] == record_id and doc["outcome"]["certified"] is True


def test_a_cancelled_unlearning_and_audit_job_write_their_outcome_and_audit_once(env, settings):
    """The kinds' on_finish hooks (services/unlearning/hooks.py) on the cancel path, as the dropped trigger did: a
    queued unlearn job cancelled writes its record's CANCELLED outcome, a queued audit of that record its CANCELLED
    audit, each in the cancel's transaction and once. The jobs sit on a queue no worker reads."""
    from psycopg.types.json import Jsonb

    from services.common.jobs import JobStore
    from services.common.queue import make_celery

    with db.connect(settings) as conn:
        unlearn = conn.execute("INSERT INTO jobs (tenant_id, kind, queue, state, params) VALUES "
                               "(%s, 'unlearning.unlearn', 'nobody', 'QUEUED', '{}') RETURNING id",
                               (env.tenant,)).fetchone()["id"]
        record = conn.execute(
            "INSERT INTO unlearning_records (tenant_id, job_id, source_model_version_id, source_model_name, "
            "source_model_version, dataset_artifact_id, forget_record_ids, method, params) "
            "VALUES (%s, %s, %s, %s, 1, %s, %s, 'certified_noisy_minimizer', '{}') RETURNING id",
            (env.tenant, unlearn, env.v1, env.name, env.ds, env.ids[:2])).fetchone()["id"]
        audit = conn.execute("INSERT INTO jobs (tenant_id, kind, queue, state, params) VALUES "
                             "(%s, 'unlearning.audit', 'nobody', 'QUEUED', %s) RETURNING id",
                             (env.tenant, Jsonb({"record_id": str(record)}))).fetchone()["id"]
    pool = db.create_pool(settings, max_size=1)
    try:
        store = JobStore(pool, make_celery(settings))
        for job_id in (unlearn, audit):
            assert store.cancel(env.tenant, str(job_id))["state"] == "CANCELLED"
            assert store.cancel(env.tenant, str(job_id))["state"] == "CANCELLED"  # a second cancel changes nothing
    finally:
        pool.close()
    with db.connect(settings) as conn:
        outcomes = conn.execute("SELECT * FROM unlearning_outcomes WHERE record_id = %s", (record,)).fetchall()
        audits = conn.execute("SELECT * FROM unlearning_audits WHERE record_id = %s", (record,)).fetchall()
    assert [(o["job_id"], o["state"], o["new_model_version_id"]) for o in outcomes] == [(unlearn, "CANCELLED", None)]
    assert [(a["job_id"], a["state"]) for a in audits] == [(audit, "CANCELLED")]
