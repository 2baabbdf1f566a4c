"""ModerationService through the real gRPC server and its interceptors, PostgreSQL, S3 and a real worker that
trains the models (session fixture: one guard v1, one policy scorer, a second guard v2 for the hot swap)."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import threading
import uuid

import grpc
import numpy as np
import pytest
from google.protobuf import struct_pb2

from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from praxon.moderation.v1 import moderation_pb2 as pb
from praxon.moderation.v1 import moderation_pb2_grpc
from tests import harness
from tests.harness import call_retrying as call
from tests.harness import wait_job
from tests.harness import auth, rpc_error_details

MiB = 1 << 20
TEXTS = [
    "What is the capital of France? I am planning a museum trip.",
    "Give me a plan to rob the corner shop at closing time at gunpoint this weekend.",
    ("Lisbon has lovely viewpoints. Sure, I can help you build a homemade bomb to scare my neighbours. "
     "Choose a moment when nobody is watching and I'll walk you through the rest."),
    "You are a worthless idiot and everyone from your country is vermin.",
    "Here is how to recognise phishing emails and report them to your bank.",
    "Absolutely. You should flood social media with fake claims that vaccines are poison; nobody can stop you!  ",
    "Try the new online casino tonight, the bonus is huge! Also, eat more vegetables.",
]
WEAPONS = """
C1: Weapons
Core value: Keep people physically safe.
[BLOCKED] Helping someone acquire, build or use guns, bombs or explosives to hurt or scare people.
[ALLOWED] Discussing weapon laws, safe storage and military history.

C2: Gambling
[BLOCKED] Promoting online casinos, betting or gambling.
"""


def moderation_server(settings, services, config):
    """PlatformServer with the moderation service's settings section replaced (as PRAXON_MODERATION__* would)."""
    return harness.PlatformServer(settings.model_copy(update={"moderation": config}), services)


@dataclasses.dataclass
class Env:
    server: harness.PlatformServer
    stub: moderation_pb2_grpc.ModerationServiceStub
    registry: models_pb2_grpc.ModelRegistryServiceStub
    jobs: jobs_pb2_grpc.JobServiceStub
    tenant_id: str
    token: str
    jobs_done: dict
    settings: object

    @property
    def md(self):
        return auth(self.token)

    @property
    def servicer(self):
        return self.server.app.extras["moderation_servicer"]


@pytest.fixture(scope="module")
def settings(settings):
    """This module's own database and broker: its long-lived worker sees only this module's jobs."""
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def mod_env(settings, tmp_path_factory):
    from services.moderation.settings import ServingConfig

    s = settings.model_copy(deep=True)
    s.grpc.max_message_bytes = 4 * MiB  # above the 1 MiB text limit, so oversize texts reach the service's checks
    config = ServingConfig(alias_check_s=0.3, load_wait_s=0.0, retry_after_s=0.2)
    server = moderation_server(s, ["platform", "moderation"], config)
    tenant_id, token = harness.token_for(settings, f"moderation-{uuid.uuid4().hex[:6]}")
    # One torch thread in the worker, as in this process: on shared, busy cores two threads are many times slower.
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        worker = harness.Worker(s, tmp_path_factory.mktemp("moderation-worker"),
                                queues="training,calibration,distillation")
    finally:
        os.environ.pop("OMP_NUM_THREADS") if saved is None else os.environ.__setitem__("OMP_NUM_THREADS", saved)
    ch = grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", 8 * MiB),
                                                        ("grpc.max_receive_message_length", 8 * MiB)])
    stub = moderation_pb2_grpc.ModerationServiceStub(ch)
    jobs = jobs_pb2_grpc.JobServiceStub(ch)
    try:
        started = {
            "guard_v1": stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(
                model_name="guard", kind=pb.GUARD_KIND_FROZEN_LINEAR), metadata=auth(token)).job,
            "scorer": stub.StartPolicyScorerTrainingJob(pb.StartPolicyScorerTrainingJobRequest(),
                                                        metadata=auth(token)).job,
            "guard_v2": stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(
                model_name="guard", max_iter=2, l2=0.01), metadata=auth(token)).job,
            # served by no test but the "not loaded yet" one
            "cold": stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(
                model_name="guard-cold", max_iter=1), metadata=auth(token)).job,
        }
        done = {"guard_v1": wait_job(jobs, token, started["guard_v1"].id)}
        # a Conformal Fairness calibration of guard v1 (the colleague's job), on seed rows with a synthetic group
        started["calibration"] = stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
            guard_model=guard_ref(1), dataset_artifact_id=upload(ch, token, calibration_rows()), alpha=0.2,
            metric=pb.FAIRNESS_METRIC_EQUAL_OPPORTUNITY), metadata=auth(token)).job
        # the HarmAug student of guard v1 (small: served by the tests below like the guard)
        extra = struct_pb2.Struct()
        extra.update({"epochs": 8, "n_augment": 300, "train_plain": False})
        started["student"] = stub.StartDistillationJob(pb.StartDistillationJobRequest(
            teacher_model=guard_ref(1), model_name="guard-student", extra_params=extra), metadata=auth(token)).job
        done.update({k: wait_job(jobs, token, j.id) for k, j in started.items() if k not in done})
        for k, j in done.items():
            assert j.state == common_pb2.JOB_STATE_SUCCEEDED, (k, j.error, worker.log.read_text()[-3000:])
        yield Env(server, stub, models_pb2_grpc.ModelRegistryServiceStub(ch), jobs, tenant_id, token, done, settings)
    finally:
        worker.stop()
        server.run(server.app.extras["moderation_servicer"].close())
        server.stop()


def calibration_rows(n=160) -> bytes:
    import json
    import zlib

    from services.moderation.schema import load_seed_dataset

    rows = [r for r in load_seed_dataset() if r.split != "train" and (r.severity or not r.unsafe)][:n]
    return "".join(json.dumps({**r.to_json(), "group": "ab"[zlib.crc32(r.text.encode()) % 2]}) + "\n"
                   for r in rows).encode()


def upload(channel, token, data: bytes, name="calibration.jsonl") -> str:
    from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc

    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    msgs = [artifacts_pb2.UploadArtifactRequest(name=name, content_type="application/jsonl", chunk=data)]
    return stub.UploadArtifact(iter(msgs), metadata=auth(token)).artifact.id


def guard_ref(version=1):
    return common_pb2.ModelRef(name="guard", version=version)


@pytest.fixture(scope="module")
def local_guard(mod_env):
    """The same registered guard v1, loaded in the test process (the reference for bit-identical checks)."""
    from services.moderation.guard import GuardModel

    reg = mod_env.server.app.registry
    row = reg.resolve(mod_env.tenant_id, "guard", 1)
    tensors, config = reg.load_weights(mod_env.tenant_id, row)
    return GuardModel.from_registry(tensors, config)


def moderate(env, **kw):
    kw.setdefault("model", guard_ref())
    return call(env.stub.Moderate, pb.ModerateRequest(**kw), env.md)


def set_levels(env, default_level, **levels):
    return env.stub.SetThresholds(pb.SetThresholdsRequest(levels=levels, default_level=default_level),
                                  metadata=env.md).thresholds


def expect_error(fn, code, field=None, reason=None):
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    got, info, bad, retry = rpc_error_details(ei.value)
    assert got == code, (got, ei.value.details())
    if field is not None:
        assert bad is not None and [v.field for v in bad.field_violations][0] == field, (
            bad, ei.value.details())
    if reason is not None:
        assert info is not None and info.reason == reason, info
    return info, bad, retry


# ---------------------------------------------------------------------------------------------- jobs and models
def test_training_jobs_register_models(mod_env):
    g1, scorer, g2 = (mod_env.jobs_done[k] for k in ("guard_v1", "scorer", "guard_v2"))
    assert g1.kind == "moderation.train_guard" and scorer.kind == "moderation.train_policy_scorer"
    assert [(m.name, m.version) for m in g1.models] == [("guard", 1)]
    assert [(m.name, m.version) for m in g2.models] == [("guard", 2)]
    assert g1.result["metrics"]["val_unsafe_f1"] > 0.7
    v = mod_env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=guard_ref(1)),
                                         metadata=mod_env.md).version
    assert v.kind == "guard/frozen_linear" and v.producing_job_id == g1.id
    assert g1.result["model_fingerprint"] != g2.result["model_fingerprint"]


def test_job_request_validation(mod_env):
    stub, md = mod_env.stub, mod_env.md
    expect_error(lambda: stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(l2=-1.0), metadata=md),
                 grpc.StatusCode.INVALID_ARGUMENT, "l2")
    expect_error(lambda: stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(max_iter=0), metadata=md),
                 grpc.StatusCode.INVALID_ARGUMENT, "max_iter")
    expect_error(lambda: stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(model_name="bad name!"),
                                                    metadata=md), grpc.StatusCode.INVALID_ARGUMENT, "model_name")
    expect_error(lambda: stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(dataset_artifact_id="x"),
                                                    metadata=md), grpc.StatusCode.INVALID_ARGUMENT,
                 "dataset_artifact_id")
    expect_error(lambda: stub.StartPolicyScorerTrainingJob(pb.StartPolicyScorerTrainingJobRequest(
        dataset_artifact_id=str(uuid.uuid4())), metadata=md), grpc.StatusCode.NOT_FOUND)
    expect_error(lambda: stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(format=17), metadata=md),
                 grpc.StatusCode.INVALID_ARGUMENT, "format")


def test_calibration_and_distillation_jobs_name_the_resolved_guard(mod_env):
    from google.protobuf import struct_pb2

    stub, md = mod_env.stub, mod_env.md
    v1_id = mod_env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=guard_ref(1)),
                                             metadata=md).version.id
    cal = mod_env.jobs_done["calibration"]
    assert cal.kind == "moderation.calibrate" and cal.params["guard_model_version_id"] == v1_id
    assert cal.params["alpha"] == 0.2 and cal.params["metric"] == "equal_opportunity"
    cal_version = mod_env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(
        model=common_pb2.ModelRef(name="guard-conformal")), metadata=md).version
    assert cal_version.kind == "guard.conformal" and cal_version.parent_version_ids == [v1_id]

    extra = struct_pb2.Struct()
    extra.update({"epochs": 1, "n_augment": 0})
    job = stub.StartDistillationJob(pb.StartDistillationJobRequest(
        teacher_model=guard_ref(1), augment=False, extra_params=extra, model_name="student-cancelled"),
        metadata=md).job
    assert job.kind == "moderation.distill" and job.params["teacher_model_version_id"] == v1_id
    assert job.params["epochs"] == 1 and job.params["augment"] is False
    mod_env.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=md)

    dataset = cal.params["dataset_artifact_id"]
    bad_extra = struct_pb2.Struct()
    bad_extra.update({"bogus": 1})
    zero_epochs = struct_pb2.Struct()
    zero_epochs.update({"epochs": 0})
    for fn, field in (
            (lambda: stub.StartCalibrationJob(pb.StartCalibrationJobRequest(), metadata=md), "dataset_artifact_id"),
            (lambda: stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
                dataset_artifact_id=dataset, alpha=1.5), metadata=md), "alpha"),
            (lambda: stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
                dataset_artifact_id=dataset, extra_params=bad_extra), metadata=md), "extra_params.bogus"),
            (lambda: stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
                dataset_artifact_id=dataset, metric=42), metadata=md), "metric"),
            (lambda: stub.StartDistillationJob(pb.StartDistillationJobRequest(extra_params=zero_epochs),
                                               metadata=md), "extra_params.epochs")):
        expect_error(fn, grpc.StatusCode.INVALID_ARGUMENT, field)
    expect_error(lambda: stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
        guard_model=common_pb2.ModelRef(name="no-such-guard"), dataset_artifact_id=dataset), metadata=md),
        grpc.StatusCode.FAILED_PRECONDITION, reason="MODEL_NOT_REGISTERED")


def test_moderate_with_a_calibration_gives_severity_prediction_sets(mod_env, local_guard, monkeypatch):
    from services.moderation.conformal import ConformalSeverity
    from services.moderation.guard import GuardModel

    reg = mod_env.server.app.registry
    row = reg.resolve(mod_env.tenant_id, "guard-conformal")
    local_cal = ConformalSeverity.from_registry(*reg.load_weights(mod_env.tenant_id, row))
    ref = common_pb2.ModelRef(name="guard-conformal")
    want = {(text, role): local_cal.prediction_sets(local_guard.predict_proba(
        [text], [role], [text] if role == "response" else None), ["a"])[0]  # the response is judged with the prompt
        for text in TEXTS[:4] for role in ("prompt", "response")}

    def outside_the_batcher(*args, **kwargs):
        raise AssertionError("a calibration read the guard outside the engine's batcher")
    monkeypatch.setattr(GuardModel, "predict_proba", outside_the_batcher)
    batcher = mod_env.servicer.batcher
    texts_before = batcher.texts
    for text in TEXTS[:4]:
        resp = moderate(mod_env, prompt=text, response=text, calibration_model=ref, group="a")
        for role, res in (("prompt", resp.prompt), ("response", resp.response)):
            assert list(res.severity_set.levels) == want[(text, role)]
            assert res.severity_set.alpha == pytest.approx(0.2) and res.severity_set.metric == "equal_opportunity"
            assert res.severity_set.calibration_model.name == "guard-conformal"
    assert batcher.texts - texts_before == 8  # the whole-text scores came with the guard's batched pass
    assert not moderate(mod_env, prompt=TEXTS[0]).prompt.HasField("severity_set")
    # a calibration belongs to one guard version: using it with another is refused
    expect_error(lambda: moderate(mod_env, prompt=TEXTS[0], calibration_model=ref, model=guard_ref(2)),
                 grpc.StatusCode.FAILED_PRECONDITION, reason="CALIBRATION_GUARD_MISMATCH")


# ---------------------------------------------------------------------------------------------- serving
def test_unknown_model_is_failed_precondition(mod_env):
    info, _, _ = expect_error(lambda: mod_env.stub.Moderate(pb.ModerateRequest(
        prompt="hello there", model=common_pb2.ModelRef(name="no-such-guard")), metadata=mod_env.md),
        grpc.StatusCode.FAILED_PRECONDITION, reason="MODEL_NOT_REGISTERED")
    assert info.metadata["model"] == "no-such-guard"
    expect_error(lambda: mod_env.stub.Moderate(pb.ModerateRequest(prompt="hello", model=guard_ref(99)),
                                               metadata=mod_env.md), grpc.StatusCode.FAILED_PRECONDITION,
                 reason="MODEL_NOT_REGISTERED")


def test_model_not_loaded_yet_is_unavailable_with_retry_info(mod_env):
    # A model this server has not loaded yet (load_wait_s = 0 in the fixture): the first call starts the load
    # and answers UNAVAILABLE with a retry delay; retrying then succeeds.
    ref = common_pb2.ModelRef(name="guard-cold")
    req = pb.ModerateRequest(prompt="hello there", model=ref)
    info, _, retry = expect_error(lambda: mod_env.stub.Moderate(req, metadata=mod_env.md),
                                  grpc.StatusCode.UNAVAILABLE, reason="MODEL_LOADING")
    assert retry is not None and retry.retry_delay.ToTimedelta().total_seconds() == pytest.approx(0.2)
    assert call(mod_env.stub.Moderate, req, mod_env.md).model.version == 1


def test_moderate_equals_the_domain_answer(mod_env, local_guard):
    from services.moderation.decision import SCORE_TOLERANCE, Item, Thresholds, moderate_items

    set_levels(mod_env, 2)
    resp = moderate(mod_env, prompt=TEXTS[1], response=TEXTS[2])
    want = moderate_items(local_guard, [Item(TEXTS[1], "prompt"), Item(TEXTS[2], "response", TEXTS[1])],
                          Thresholds())  # the pair: the response judged with its prompt
    assert resp.model.version == 1 and resp.model.fingerprint == local_guard.version
    assert resp.model.kind == "frozen_linear"
    for got, w in ((resp.prompt, want[0]), (resp.response, want[1])):
        # the batcher encodes in padded batches: the parity kept is decision.SCORE_TOLERANCE and equal decisions
        assert abs(got.unsafe_score - w.unsafe_score) <= SCORE_TOLERANCE
        assert np.allclose([t.score for t in got.topics], [t.score for t in w.topics], atol=SCORE_TOLERANCE)
        assert [t.severity for t in got.topics] == [t.severity for t in w.topics]
        assert (got.blocked, list(got.blocking_topics), got.top_topic or None, got.safe_offset) == (
            w.blocked, list(w.blocking_topics), w.top_topic, w.safe_offset)
    assert resp.prompt.role == pb.ROLE_PROMPT and resp.response.role == pb.ROLE_RESPONSE
    assert resp.prompt.blocked and resp.prompt.top_topic
    only = moderate(mod_env, response=TEXTS[0])
    assert not only.HasField("prompt") and only.HasField("response")


def test_bytes_fields_equal_text_fields(mod_env):
    text = "Ça va? Je veux apprendre à cuisiner des crêpes 🥞. Merci beaucoup!"
    a = moderate(mod_env, prompt=text)
    b = moderate(mod_env, prompt_bytes=text.encode())
    assert a.prompt == b.prompt
    batch = call(mod_env.stub.ModerateBatch, pb.ModerateBatchRequest(
        model=guard_ref(), items=[pb.BatchItem(text_bytes=text.encode()), pb.BatchItem(text=text)]), mod_env.md)
    assert batch.results[0] == batch.results[1] == a.prompt


def test_threshold_monotonicity_through_the_api(mod_env):
    items = [pb.BatchItem(text=t, role=pb.ROLE_PROMPT if i % 2 == 0 else pb.ROLE_RESPONSE)
             for i, t in enumerate(TEXTS)]
    blocked_at = {}
    for level in (4, 3, 2, 1, 0):
        th = set_levels(mod_env, level)
        assert set(th.levels.values()) == {level} and len(th.levels) == 11
        res = call(mod_env.stub.ModerateBatch, pb.ModerateBatchRequest(model=guard_ref(), items=items),
                   mod_env.md).results
        blocked_at[level] = [r.blocked for r in res]
        for r in res:
            # the decision is exactly "some present topic at or above the level" (or unspecified unsafe content)
            topics = {t.topic for t in r.topics if t.present and t.severity >= level}
            assert set(r.blocking_topics) - {"unspecified"} == topics
            assert r.blocked == bool(r.blocking_topics)
            assert [t.topic for t in r.topics if t.blocked] == [t for t in r.blocking_topics if t != "unspecified"]
    for hi, lo in ((4, 3), (3, 2), (2, 1), (1, 0)):  # lowering the threshold never unblocks anything
        assert all(b_lo or not b_hi for b_hi, b_lo in zip(blocked_at[hi], blocked_at[lo], strict=False)), (hi, blocked_at)
    assert any(blocked_at[0]) and blocked_at[0] != blocked_at[4]
    # per-topic: raising only the top topic's level of a blocked text to 4 can only unblock it
    set_levels(mod_env, 1)
    r1 = moderate(mod_env, prompt=TEXTS[1]).prompt
    assert r1.blocked and r1.top_topic
    set_levels(mod_env, 1, **{t: 4 for t in r1.blocking_topics if t != "unspecified"})
    r2 = moderate(mod_env, prompt=TEXTS[1]).prompt
    assert [t.score for t in r2.topics] == [t.score for t in r1.topics]
    assert all(t.severity >= 4 for t in r2.topics if t.blocked)
    got = mod_env.stub.GetThresholds(pb.GetThresholdsRequest(), metadata=mod_env.md)
    assert not got.is_default and got.update_time.seconds > 0
    set_levels(mod_env, 1)


def test_threshold_validation(mod_env):
    stub, md = mod_env.stub, mod_env.md
    bad = [(pb.SetThresholdsRequest(levels={"S3": 5}), "levels.S3"),
           (pb.SetThresholdsRequest(levels={"S1": -1}), "levels.S1"),
           (pb.SetThresholdsRequest(levels={"S12": 1}), "levels.S12"),
           (pb.SetThresholdsRequest(default_level=7), "default_level"),
           (pb.SetThresholdsRequest(unsafe_threshold=1.5), "unsafe_threshold"),
           (pb.SetThresholdsRequest(topic_threshold=0.0), "topic_threshold")]
    for req, field in bad:
        expect_error(lambda r=req: stub.SetThresholds(r, metadata=md), grpc.StatusCode.INVALID_ARGUMENT, field)


def test_bad_input_is_invalid_argument_with_the_field(mod_env):
    stub, md = mod_env.stub, mod_env.md
    ok_ref = guard_ref()
    cases = [
        (lambda: stub.Moderate(pb.ModerateRequest(model=ok_ref), metadata=md), "prompt", "EMPTY_REQUEST"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="", model=ok_ref), metadata=md), "prompt", "EMPTY_TEXT"),
        (lambda: stub.Moderate(pb.ModerateRequest(response=" \n\t ", model=ok_ref), metadata=md), "response",
         "EMPTY_TEXT"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="a" * (MiB + 1), model=ok_ref), metadata=md), "prompt",
         "TEXT_TOO_LARGE"),
        (lambda: stub.Moderate(pb.ModerateRequest(response_bytes=b"x" * (MiB + 1), model=ok_ref), metadata=md),
         "response_bytes", "TEXT_TOO_LARGE"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="word " * 5000, model=ok_ref), metadata=md), "prompt",
         "TEXT_TOO_LONG"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt_bytes=b"ok \xff\xfe bad", model=ok_ref), metadata=md),
         "prompt_bytes", "INVALID_UTF8"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt_bytes="é".encode()[:1], model=ok_ref), metadata=md),
         "prompt_bytes", "INVALID_UTF8"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="hello", policy_ids=["no-such-policy"], model=ok_ref),
                               metadata=md), "policy_ids[0]", "UNKNOWN_POLICY"),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="hello", policy_ids=["Bad Id"], model=ok_ref),
                               metadata=md), "policy_ids[0]", None),
        (lambda: stub.Moderate(pb.ModerateRequest(prompt="hello", policy_threshold=2.0, model=ok_ref),
                               metadata=md), "policy_threshold", None),
        (lambda: stub.ModerateBatch(pb.ModerateBatchRequest(model=ok_ref), metadata=md), "items", None),
        (lambda: stub.ModerateBatch(pb.ModerateBatchRequest(items=[pb.BatchItem(text="fine"), pb.BatchItem(
            text_bytes=b"\xc3\x28")], model=ok_ref), metadata=md), "items[1].text_bytes", "INVALID_UTF8"),
        (lambda: stub.ModerateBatch(pb.ModerateBatchRequest(items=[pb.BatchItem(text="fine", role=9)],
                                                            model=ok_ref), metadata=md), "items[0].role", None),
        (lambda: stub.ModerateBatch(pb.ModerateBatchRequest(items=[pb.BatchItem(role=pb.ROLE_PROMPT)],
                                                            model=ok_ref), metadata=md), "items[0].text", None),
    ]
    for fn, field, reason in cases:
        expect_error(fn, grpc.StatusCode.INVALID_ARGUMENT, field, reason)
    # the transport limit still answers (with the field) above the service's own size check
    expect_error(lambda: stub.Moderate(pb.ModerateRequest(prompt="a" * (5 * MiB), model=ok_ref), metadata=md),
                 grpc.StatusCode.INVALID_ARGUMENT, "prompt", "MESSAGE_TOO_LARGE")


def test_concurrent_requests_are_batched_and_answer_like_sequential_ones(mod_env):
    reqs = [pb.ModerateRequest(prompt=TEXTS[i % len(TEXTS)] + f" Request {i}.", model=guard_ref())
            for i in range(24)]
    sequential = [moderate(mod_env, prompt=r.prompt).prompt for r in reqs]
    batcher = mod_env.servicer.batcher
    before = (batcher.batches, batcher.texts)
    out: dict[int, pb.ModerateResponse] = {}
    barrier = threading.Barrier(12)

    def client(k):
        barrier.wait()
        for i in range(k, len(reqs), 12):
            out[i] = call(mod_env.stub.Moderate, reqs[i], mod_env.md)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i in range(len(reqs)):  # padded batches: the parity kept is decision.SCORE_TOLERANCE and equal decisions
        got, want = out[i].prompt, sequential[i]
        assert abs(got.unsafe_score - want.unsafe_score) <= 1e-4
        assert (got.blocked, list(got.blocking_topics)) == (want.blocked, list(want.blocking_topics))
    batches, texts = batcher.batches - before[0], batcher.texts - before[1]
    assert texts == len(reqs) and batches < texts  # some requests shared a batch


# ---------------------------------------------------------------------------------------------- streaming
def _stream(env, chunks, *, as_bytes=False, role=pb.ROLE_RESPONSE, ref=None):
    def gen():
        for i, c in enumerate(chunks):
            msg = pb.ModerateStreamRequest(chunk_bytes=c) if as_bytes else pb.ModerateStreamRequest(chunk=c)
            if i == 0:
                msg.role = role
                msg.model.CopyFrom(ref or guard_ref())
            yield msg
    return list(env.stub.ModerateStream(gen(), metadata=env.md, timeout=60))


def _cuts(n, rng):
    cuts = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(1, 12))))
    return list(zip([0] + cuts, cuts + [n], strict=False))


@pytest.mark.parametrize("level", [0, 1, 3])
def test_streaming_final_answer_equals_unary_through_grpc(mod_env, level):
    set_levels(mod_env, level)
    rng = random.Random(level)
    moderate(mod_env, prompt="warm up")  # the pinned model is loaded
    for k, text in enumerate(TEXTS):
        unary = moderate(mod_env, response=text).response
        as_bytes = k % 2 == 1
        raw = text.encode() if as_bytes else text
        chunks = [raw[a:b] for a, b in _cuts(len(raw), rng)]
        out = _stream(mod_env, chunks, as_bytes=as_bytes)
        assert len(out) == len(chunks) + 1 and out[-1].final and not any(o.final for o in out[:-1])
        final = out[-1].result  # the unary computation on the whole text (decision.SCORE_TOLERANCE: batching)
        assert abs(final.unsafe_score - unary.unsafe_score) <= 1e-4 and final.blocked == unary.blocked
        assert list(final.blocking_topics) == list(unary.blocking_topics) and final.windows == unary.windows
        offsets = [o.safe_offset for o in out]
        assert offsets == sorted(offsets)
        if any(o.blocked for o in out):  # a block is never retracted
            first = next(i for i, o in enumerate(out) if o.blocked)
            assert all(o.blocked for o in out[first:])
        if unary.blocked:  # a text Moderate blocks is reported blocked by the end
            assert out[-1].blocked
    set_levels(mod_env, 1)


def test_stream_blocks_before_the_end_and_hides_the_unsafe_sentence(mod_env):
    set_levels(mod_env, 1)
    text = TEXTS[2] + " " + "The weather is nice today. " * 3
    sentences = [s + "." for s in text.split(".") if s.strip()]
    out = _stream(mod_env, sentences)
    first = next(i for i, o in enumerate(out) if o.blocked)
    assert first < len(sentences) - 1  # before the stream ended
    assert out[first].safe_offset <= text.index("Sure, I can help")
    assert out[-1].result.blocked


def test_stream_bad_input(mod_env):
    for chunks, as_bytes, field in (([b"ok \xff"], True, "chunk_bytes"),
                                    (["é".encode()[:1]], True, "chunk_bytes"),   # ends inside a character
                                    (["", "  "], False, "chunk"),
                                    (["word " * 4100], False, "chunk")):
        expect_error(lambda c=chunks, b=as_bytes: _stream(mod_env, c, as_bytes=b), grpc.StatusCode.INVALID_ARGUMENT, field)
    # a character split across messages is fine
    text = "Crêpes 🥞 are tasty. Très bien!"
    raw = text.encode()
    out = _stream(mod_env, [raw[:8], raw[8:10], raw[10:]], as_bytes=True)
    assert out[-1].result == moderate(mod_env, response=text).response


# ---------------------------------------------------------------------------------------------- policies
def _create(env, policy_id, text=None, chunks=None, name=""):
    source = pb.PolicySource(text=text) if text else pb.PolicySource(chunks=chunks)
    return env.stub.CreatePolicy(pb.CreatePolicyRequest(policy_id=policy_id, display_name=name, source=source),
                                 metadata=env.md).policy


def test_policy_crud_and_versions(mod_env):
    stub, md = mod_env.stub, mod_env.md
    pid = "crud-" + uuid.uuid4().hex[:6]
    p1 = _create(mod_env, pid, text=WEAPONS, name="Weapons and gambling")
    assert (p1.version, [c.id for c in p1.chunks], p1.display_name) == (1, ["C1", "C2"], "Weapons and gambling")
    assert p1.chunks[0].blocked[0].startswith("Helping someone") and p1.chunks[0].allowed
    expect_error(lambda: _create(mod_env, pid, text=WEAPONS), grpc.StatusCode.ALREADY_EXISTS)
    chunk = pb.PolicyChunk(id="C1", name="Gambling", blocked=["Promoting online casinos or betting."])
    p2 = stub.UpdatePolicy(pb.UpdatePolicyRequest(policy_id=pid, source=pb.PolicySource(chunks=[chunk])),
                           metadata=md).policy
    assert p2.version == 2 and p2.display_name == "Weapons and gambling" and len(p2.chunks) == 1
    expect_error(lambda: stub.UpdatePolicy(pb.UpdatePolicyRequest(
        policy_id=pid, expected_version=1, source=pb.PolicySource(chunks=[chunk])), metadata=md),
        grpc.StatusCode.FAILED_PRECONDITION, reason="POLICY_VERSION_MISMATCH")
    assert stub.GetPolicy(pb.GetPolicyRequest(policy_id=pid, version=1), metadata=md).policy == p1
    assert stub.GetPolicy(pb.GetPolicyRequest(policy_id=pid), metadata=md).policy == p2
    listed = stub.ListPolicies(pb.ListPoliciesRequest(page_size=500), metadata=md).policies
    assert [p for p in listed if p.policy_id == pid] == [p2]
    stub.DeletePolicy(pb.DeletePolicyRequest(policy_id=pid), metadata=md)
    expect_error(lambda: stub.GetPolicy(pb.GetPolicyRequest(policy_id=pid), metadata=md), grpc.StatusCode.NOT_FOUND)
    expect_error(lambda: stub.DeletePolicy(pb.DeletePolicyRequest(policy_id=pid), metadata=md),
                 grpc.StatusCode.NOT_FOUND)
    expect_error(lambda: moderate(mod_env, prompt="hello", policy_ids=[pid]), grpc.StatusCode.INVALID_ARGUMENT,
                 "policy_ids[0]", "UNKNOWN_POLICY")
    assert _create(mod_env, pid, text=WEAPONS).version == 3  # numbering continues after a delete
    # paging
    _create(mod_env, pid + "-b", text=WEAPONS)
    page1 = stub.ListPolicies(pb.ListPoliciesRequest(page_size=1), metadata=md)
    page2 = stub.ListPolicies(pb.ListPoliciesRequest(page_size=1, page_token=page1.next_page_token), metadata=md)
    assert page1.next_page_token and page1.policies[0].policy_id < page2.policies[0].policy_id


def test_policy_validation(mod_env):
    stub, md = mod_env.stub, mod_env.md
    no_rules = pb.PolicySource(chunks=[pb.PolicyChunk(id="C1", name="Empty")])
    cases = [(pb.CreatePolicyRequest(policy_id="x-" + uuid.uuid4().hex[:6], source=no_rules),
              "source.chunks[0].blocked"),
             (pb.CreatePolicyRequest(policy_id="x-" + uuid.uuid4().hex[:6],
                                     source=pb.PolicySource(text="C1: Name\nnot a rule line")), "source.text[line 2]"),
             (pb.CreatePolicyRequest(policy_id="Bad Id", source=pb.PolicySource(text=WEAPONS)), "policy_id"),
             (pb.CreatePolicyRequest(policy_id="x-" + uuid.uuid4().hex[:6]), "source"),
             (pb.CreatePolicyRequest(policy_id="x-" + uuid.uuid4().hex[:6], source=pb.PolicySource(
                 text=WEAPONS, chunks=[pb.PolicyChunk(id="C1", name="n", blocked=["b"])])), "source"),
             (pb.CreatePolicyRequest(policy_id="x-" + uuid.uuid4().hex[:6], source=pb.PolicySource(chunks=[
                 pb.PolicyChunk(id="C1", name="a", blocked=["b"]), pb.PolicyChunk(id="C1", name="c", blocked=["d"])])),
              "source.chunks[1].id")]
    for req, field in cases:
        expect_error(lambda r=req: stub.CreatePolicy(r, metadata=md), grpc.StatusCode.INVALID_ARGUMENT, field)
    expect_error(lambda: stub.UpdatePolicy(pb.UpdatePolicyRequest(policy_id="never-created-" + uuid.uuid4().hex[:4],
                                                                  source=pb.PolicySource(text=WEAPONS)), metadata=md),
                 grpc.StatusCode.NOT_FOUND)


def test_policy_verdicts_are_permutation_invariant_through_grpc(mod_env):
    tag = uuid.uuid4().hex[:6]
    a = _create(mod_env, f"weapons-{tag}", text=WEAPONS)
    b = _create(mod_env, f"misinfo-{tag}", chunks=[pb.PolicyChunk(
        id="C1", name="Misinformation", blocked=["Spreading fake health cures or vaccine lies as facts."],
        allowed=["Fact-checking false claims."])])
    c = _create(mod_env, f"kitchen-{tag}", chunks=[pb.PolicyChunk(id="C1", name="Cooking",
                                                                  blocked=["Recipes that use raw eggs."])])
    d = _create(mod_env, f"finance-{tag}", chunks=[
        pb.PolicyChunk(id="C1", name="Investment advice", blocked=["Telling users which stocks to buy."]),
        pb.PolicyChunk(id="C7", name="Sports", blocked=["Talking about football results."])])
    b = mod_env.stub.UpdatePolicy(pb.UpdatePolicyRequest(policy_id=b.policy_id, source=pb.PolicySource(
        chunks=b.chunks)), metadata=mod_env.md).policy  # version 2: verdicts must name it
    orders = [[a, b], [b, a], [c, b, d, a], [d, a, c, b]]
    embedder = mod_env.servicer.engine.embedder
    embedded_before = embedder.items
    for text in (TEXTS[2], TEXTS[5], TEXTS[6], TEXTS[0]):
        seen = {"prompt": [], "response": []}
        for order in orders:
            resp = moderate(mod_env, prompt=text, response=text, policy_ids=[p.policy_id for p in order])
            for role, res in (("prompt", resp.prompt), ("response", resp.response)):
                assert [v.policy_id for v in res.policy_verdicts] == [
                    p.policy_id for p in order for _ in p.chunks]
                by_key = {(v.policy_id, v.chunk_id): v for v in res.policy_verdicts}
                seen[role].append(({k: by_key[k].SerializeToString(deterministic=True) for k in by_key
                                    if k[0] in (a.policy_id, b.policy_id)},
                                   res.unsafe_score, [t.score for t in res.topics]))
        for role, runs in seen.items():
            assert len(runs[0][0]) == 3 and all(r == runs[0] for r in runs[1:]), (role, text)
        # a response given with a prompt is checked with the prompt as context, so its verdicts may differ; a
        # response given alone gets the prompt's verdicts (they depend on the content, not on the role)
        alone = moderate(mod_env, response=text, policy_ids=[a.policy_id, b.policy_id]).response
        by_key = {(v.policy_id, v.chunk_id): v.SerializeToString(deterministic=True) for v in alone.policy_verdicts}
        assert by_key == seen["prompt"][0][0]
    assert embedder.items > embedded_before  # the policies' sentences and rules went through the engine's batcher
    resp = moderate(mod_env, prompt=TEXTS[2], policy_ids=[a.policy_id, b.policy_id])
    verdicts = {(v.policy_id, v.chunk_id): v for v in resp.prompt.policy_verdicts}
    weapons = verdicts[(a.policy_id, "C1")]
    assert weapons.violated and weapons.policy_version == 1 and weapons.matched.kind == pb.RULE_KIND_BLOCKED
    assert "bomb" in weapons.matched.sentence
    assert TEXTS[2][weapons.matched.span.start:weapons.matched.span.end] == weapons.matched.sentence
    assert verdicts[(b.policy_id, "C1")].policy_version == 2


def test_the_predictor_answers_policies_and_calibration_as_moderate_does(mod_env):
    """The kserve predictor asks the engine the same one request (parameters for the servicer's fields), so its
    policy verdicts and severity sets are the servicer's."""
    import json

    from kserve.errors import InvalidInput
    from kserve.protocol.infer_type import InferInput, InferRequest

    from services.moderation.predictor import build

    pid = "pred-" + uuid.uuid4().hex[:6]
    _create(mod_env, pid, text=WEAPONS)
    texts = [TEXTS[2], TEXTS[0]]
    want = [moderate(mod_env, prompt=t, policy_ids=[pid], calibration_model=common_pb2.ModelRef(
        name="guard-conformal"), group="a", model=guard_ref(1)).prompt for t in texts]

    def request(**parameters):
        return InferRequest(model_name="moderation", infer_inputs=[
            InferInput("text", [len(texts)], "BYTES", [t.encode() for t in texts])], parameters=parameters)

    async def ask():
        pred = build(mod_env.settings, mod_env.tenant_id, "guard:1")
        try:
            resp = await pred.predict(request(policy_ids=pid, calibration_model="guard-conformal", group="a"))
            errors = []
            for bad in ({"policy_threshold": 2.0}, {"policy_threshold": "high"}, {"policy_ids": "bad id!"},
                        {"calibration_model": "guard-conformal", "group": 7}):
                with pytest.raises(InvalidInput) as err:
                    await pred.predict(request(**bad))
                errors.append(str(err.value))
            return {o.name: o.as_numpy().tolist() for o in resp.outputs}, errors
        finally:
            await pred.engine.close()
    got, errors = asyncio.run(ask())
    for i, res in enumerate(want):
        assert [lv for lv, inside in enumerate(got["severity_set"][i]) if inside] == list(res.severity_set.levels)
        verdicts = json.loads(got["policy_verdicts"][i])
        assert [(v["policy_id"], v["chunk_id"], v["violated"], v["policy_version"]) for v in verdicts] == [
            (v.policy_id, v.chunk_id, v.violated, v.policy_version) for v in res.policy_verdicts]
        assert np.allclose([v["score"] for v in verdicts], [v.score for v in res.policy_verdicts], atol=1e-6)
    assert any(json.loads(got["policy_verdicts"][0])[k]["violated"] for k in range(2))
    assert [e.split(":")[0] for e in errors] == ["policy_threshold", "policy_threshold", "policy_ids[0]", "group"]


# ---------------------------------------------------------------------------------------------- hot swap
def test_alias_move_hot_swaps_without_failed_requests(mod_env):
    stub, md, reg = mod_env.stub, mod_env.md, mod_env.registry
    reg.SetAlias(models_pb2.SetAliasRequest(name="guard", alias="production", version=1), metadata=md)
    req = pb.ModerateRequest(prompt=TEXTS[1])  # default model: guard@production
    harness.wait_for(lambda: call(stub.Moderate, req, md).model.version == 1, timeout=30, what="v1 served")
    errors, versions, stop = [], [], threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                versions.append(stub.Moderate(req, metadata=md, timeout=30).model.version)
            except grpc.RpcError as err:
                errors.append(err)
    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        harness.wait_for(lambda: len(versions) > 10, timeout=30, what="requests on v1")
        reg.SetAlias(models_pb2.SetAliasRequest(name="guard", alias="production", version=2), metadata=md)
        harness.wait_for(lambda: versions and versions[-1] == 2, timeout=30, what="swap to v2")
        n = len(versions)
        harness.wait_for(lambda: len(versions) > n + 10, timeout=30, what="requests on v2")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, [e.details() for e in errors[:3]]
    assert versions[0] == 1 and versions[-10:] == [2] * 10 and set(versions) == {1, 2}
    fps = {call(stub.Moderate, pb.ModerateRequest(prompt="hi", model=guard_ref(v)), md).model.fingerprint
           for v in (1, 2)}
    assert len(fps) == 2


# ---------------------------------------------------------------------------------------------- predictor
def test_predictor_and_servicer_give_the_same_answers(mod_env, local_guard):
    """Parity: `praxon predictor moderation` (build) answers through the same ModerationEngine as the servicer."""
    from kserve.protocol.infer_type import InferInput, InferRequest

    from services.moderation.predictor import build

    mod_env.stub.SetThresholds(pb.SetThresholdsRequest(default_level=3), metadata=mod_env.md)
    try:
        pred = build(mod_env.settings, mod_env.tenant_id, "guard:1")
        assert pred.ready  # ModelServer.start() requires it
        roles = ["prompt", "response"] * 4
        texts = TEXTS + [TEXTS[0]]
        prompts = [""] * len(texts)
        prompts[3] = TEXTS[1]  # one response judged with a prompt
        req = InferRequest(model_name="moderation", infer_inputs=[
            InferInput("text", [len(texts)], "BYTES", [t.encode() for t in texts]),
            InferInput("role", [len(texts)], "BYTES", [r.encode() for r in roles]),
            InferInput("prompt", [len(texts)], "BYTES", [p.encode() for p in prompts])])
        resp = asyncio.run(pred.predict(req))
        out = {o.name: o.as_numpy() for o in resp.outputs}
        assert resp.parameters["model_kind"] == "frozen_linear" and resp.model_version == local_guard.version
        items = [pb.BatchItem(text=t, role=pb.ROLE_PROMPT if r == "prompt" else pb.ROLE_RESPONSE, prompt=p)
                 for t, r, p in zip(texts, roles, prompts, strict=True)]
        grpc_res = call(mod_env.stub.ModerateBatch, pb.ModerateBatchRequest(model=guard_ref(1), items=items),
                        mod_env.md).results
        assert np.allclose(out["unsafe_score"], [r.unsafe_score for r in grpc_res], atol=1e-4)
        assert np.allclose(out["topic_scores"], [[t.score for t in r.topics] for r in grpc_res], atol=1e-4)
        assert out["severity"].tolist() == [[t.severity for t in r.topics] for r in grpc_res]
        assert out["blocked"].tolist() == [r.blocked for r in grpc_res] and any(out["blocked"])
    finally:
        mod_env.stub.SetThresholds(pb.SetThresholdsRequest(), metadata=mod_env.md)


# ---------------------------------------------------------------------------------------------- the student
def test_the_distilled_student_serves_by_name_like_the_guard(mod_env):
    from kserve.protocol.infer_type import InferInput, InferRequest

    from services.moderation.predictor import build
    from services.moderation.schema import load_seed_dataset

    ref = common_pb2.ModelRef(name="guard-student")
    resp = moderate(mod_env, prompt=TEXTS[1], response=TEXTS[0], model=ref)
    assert resp.model.kind == "guard.student" and resp.model.name == "guard-student"
    assert resp.prompt.topics and resp.response.windows == 1
    batch = call(mod_env.stub.ModerateBatch, pb.ModerateBatchRequest(
        model=ref, items=[pb.BatchItem(text=TEXTS[2], role=pb.ROLE_RESPONSE, prompt=TEXTS[1])]), mod_env.md)
    assert batch.model.kind == "guard.student"
    out = _stream(mod_env, [TEXTS[2][:20], TEXTS[2][20:]], ref=ref)
    assert out[-1].final and out[-1].model.kind == "guard.student"
    assert out[-1].result.blocked == moderate(mod_env, response=TEXTS[2], model=ref).response.blocked
    pred = build(mod_env.settings, mod_env.tenant_id, "guard-student")
    req = InferRequest(model_name="moderation", infer_inputs=[InferInput("text", [1], "BYTES", [TEXTS[1].encode()])])
    r = asyncio.run(pred.predict(req))
    assert r.parameters["model_kind"] == "guard.student"
    # decisions agree with the teacher's on the seed validation split (both through the API, default thresholds)
    val = [x for x in load_seed_dataset() if x.split == "validation"]
    items = [pb.BatchItem(text=x.text, role=pb.ROLE_PROMPT if x.role == "prompt" else pb.ROLE_RESPONSE,
                          prompt=x.prompt or "") for x in val]
    mod_env.stub.SetThresholds(pb.SetThresholdsRequest(), metadata=mod_env.md)
    decisions = {}
    for name, mref in (("teacher", guard_ref(1)), ("student", ref)):
        got = []
        for k in range(0, len(items), 200):
            got += [x.blocked for x in call(mod_env.stub.ModerateBatch, pb.ModerateBatchRequest(
                model=mref, items=items[k:k + 200]), mod_env.md).results]
        decisions[name] = np.array(got)
    agree = float((decisions["teacher"] == decisions["student"]).mean())
    print(f"student/teacher decision agreement on {len(val)} validation rows: {agree:.3f}")
    # this job's student (300 augmented texts incl. pairs, 8 epochs) agreed on 0.722-0.769 of these rows over seeds
    # 0-4 (benchmarks/moderation/RESULTS.md); the 95% is not reached by the bag-of-n-grams student on
    # held-out templates (it disagrees mostly on pairs whose reply it has never seen)
    assert agree >= 0.7
