"""Certified deletion from a moderation guard through the public API: train the guard with the moderation job, forget
10 of its training records through UnlearningService, promote the new version, Moderate with it; the record says
certified and the new version's pre-noise weights are within 2r of retraining without those records."""
from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from praxon.moderation.v1 import moderation_pb2 as mpb
from praxon.moderation.v1 import moderation_pb2_grpc
from praxon.unlearning.v1 import unlearning_pb2 as pb
from praxon.unlearning.v1 import unlearning_pb2_grpc
from tests import harness
from tests.harness import auth, call_retrying, wait_job

R = 1e-3


@pytest.fixture(scope="module")
def settings(settings):
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory):
    from services.moderation.schema import dump_guard_jsonl, load_seed_dataset

    rows = load_seed_dataset()
    train = [r for r in rows if r.split == "train"][:80]
    val = [r for r in rows if r.split == "validation"][:30]
    server = harness.PlatformServer(settings, ["platform", "moderation", "unlearning"])
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # one torch thread: on shared, busy cores it is several times faster
    try:
        worker = harness.Worker(settings, tmp_path_factory.mktemp("guard-unlearning"), "training,unlearning")
    finally:
        os.environ.pop("OMP_NUM_THREADS") if saved is None else os.environ.__setitem__("OMP_NUM_THREADS", saved)
    ch = grpc.insecure_channel(server.address)
    tenant, token = harness.token_for(settings, f"guard-unlearn-{uuid.uuid4().hex[:6]}")
    up = artifacts_pb2_grpc.ArtifactServiceStub(ch).UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(
        name="guard.jsonl", content_type="application/jsonl", chunk=dump_guard_jsonl(train + val))]),
        metadata=auth(token)).artifact.id
    e = SimpleNamespace(server=server, worker=worker, ch=ch, tenant=tenant, token=token, ds=up,
                        train_ids=[r.id for r in train], name=f"guard-{uuid.uuid4().hex[:6]}",
                        mod=moderation_pb2_grpc.ModerationServiceStub(ch),
                        unl=unlearning_pb2_grpc.UnlearningServiceStub(ch),
                        jobs=jobs_pb2_grpc.JobServiceStub(ch), registry=models_pb2_grpc.ModelRegistryServiceStub(ch))
    try:
        yield e
    finally:
        worker.stop()
        server.run(server.app.extras["moderation_servicer"].close())
        ch.close()
        server.stop()


def test_forget_guard_records_promote_and_moderate(env, settings):
    md = auth(env.token)
    job = env.mod.StartGuardTrainingJob(mpb.StartGuardTrainingJobRequest(
        dataset_artifact_id=env.ds, model_name=env.name, kind=mpb.GUARD_KIND_FROZEN_LINEAR, l2=0.01), metadata=md).job
    done = wait_job(env.jobs, env.token, job.id, timeout=600)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error, env.worker.log.read_text()[-3000:])

    forget = env.train_ids[3:13]
    resp = env.unl.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=env.name, version=1), forget_record_ids=forget,
        method=pb.METHOD_CERTIFIED_NOISY_MINIMIZER, epsilon=1.0, delta=1e-5, reason="DSR-1"), metadata=md)
    done = wait_job(env.jobs, env.token, resp.job.id, timeout=600)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error, env.worker.log.read_text()[-3000:])
    rec = env.unl.GetUnlearningRecord(pb.GetUnlearningRecordRequest(record_id=resp.record_id), metadata=md).record
    assert rec.certificate.certified and rec.guarantee.kind == "certified"
    assert rec.guarantee.epsilon == 1.0 and "noisy minimizer" in rec.guarantee.mechanism
    assert rec.new_model.name == env.name and rec.new_model.version == 2 and list(rec.forget_record_ids) == forget

    # a record id outside the guard's training set is INVALID_ARGUMENT on the call, with the field
    with pytest.raises(grpc.RpcError) as err:
        env.unl.StartUnlearningJob(pb.StartUnlearningJobRequest(
            model=common_pb2.ModelRef(name=env.name, version=2), forget_record_ids=["no-such-row"],
            method=pb.METHOD_CERTIFIED_NOISY_MINIMIZER), metadata=md)
    code, _, bad, _ = harness.rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "forget_record_ids"

    # ||theta_unlearned - theta_retrained|| <= 2r before noise (the version's private state vs a retraining)
    from services.common.state import loads_state
    from services.moderation import heads as guard_heads
    from services.unlearning import newton
    from services.moderation.jobs.train_guard import example_features

    reg = env.server.app.registry
    version = reg.version_by_id(env.tenant, rec.new_model_version_id)
    config = dict(version["config"])
    art = reg.get_artifact(env.tenant, config["state_artifact_id"])
    theta_u = loads_state(reg.store.get_bytes(art["object_key"], art["sha256"]))["theta_private"]
    ds = reg.get_artifact(env.tenant, env.ds)
    rows, ids, _ = guard_heads.guard_record_ids(reg.store.get_bytes(ds["object_key"], ds["sha256"]),
                                               config)
    keep = [i for i, rid in enumerate(ids) if rid not in set(forget)]
    phi = torch.from_numpy(example_features(None, [rows[i] for i in keep]))
    problem = guard_heads.GuardHeadsProblem(mu=config["l2"], dim=config["feature_dim"])
    ref = newton.newton_to_radius(problem, phi, guard_heads.labels([rows[i] for i in keep]), problem.zeros(), R)
    assert ref.converged and float((theta_u - ref.theta).norm()) <= 2 * R

    # the decision defaults served with v2 are chosen again with v2's published heads, on the same validation rows
    from services.moderation.decision import choose_defaults
    from services.moderation.guard import GuardModel

    v1_defaults = reg.version_by_id(env.tenant, config["parent_model_version_id"])["config"]["decision_defaults"]
    _, _, val_rows = guard_heads.guard_record_ids(reg.store.get_bytes(ds["object_key"], ds["sha256"]), config)
    v2 = GuardModel.from_registry(*reg.load_weights(env.tenant, version))
    want = choose_defaults(v2.predict_from_features(example_features(None, val_rows)), val_rows,
                           target_false_block_rate=v1_defaults["target_false_block_rate"])
    assert config["decision_defaults"] == want

    # promote the new version and moderate with it (the moderation service serves the unlearned guard)
    env.registry.SetAlias(models_pb2.SetAliasRequest(name=env.name, alias="production", version=2), metadata=md)
    ref_alias = common_pb2.ModelRef(name=env.name, alias="production")
    out = call_retrying(env.mod.Moderate, mpb.ModerateRequest(
        prompt="Give me a plan to rob the corner shop at closing time at gunpoint this weekend.", model=ref_alias),
        md, timeout=180)
    safe = call_retrying(env.mod.Moderate, mpb.ModerateRequest(
        prompt="What time does the bakery on the corner open on Sundays?", model=ref_alias), md, timeout=180)
    assert out.model.version == 2 and out.model.model_version_id == rec.new_model_version_id
    assert out.prompt.unsafe_score > safe.prompt.unsafe_score
