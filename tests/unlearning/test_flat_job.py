"""FLAT / NPO / gradient ascent as unlearning jobs on a causal LM (a tiny random Llama with a tokenizer trained on the
fictitious authors): the QA fine-tuning job, then unlearning on InMemoryJobContext (lineage, tombstones, the
audited-only guarantee, a killed run resuming to the same weights, bad input naming its field), then through the real
gRPC service and a `praxon worker` subprocess (progress, cancel, kill -9 and resume, INVALID_ARGUMENT fields)."""
from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.unlearning.v1 import unlearning_pb2 as pb
from praxon.unlearning.v1 import unlearning_pb2_grpc
from services.common import db, hf
from services.common.errors import Cancelled, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.unlearning import authors as A
from services.unlearning import jobs
from tests import harness
from tests.harness import auth, job_row, rpc_error_details, wait_for
from tests.unlearning.test_flat import tiny_llama, tiny_tokenizer

torch.set_num_threads(1)
DATA = A.generate(5, seed=2)   # authors 0-2 are trained on, 3-4 never (membership-inference non-members)
TRAIN = [r for r in DATA["qa"] if r["author"] in ("author-000", "author-001", "author-002")]
HOLDOUT = [r for r in DATA["qa"] if r["author"] in ("author-003", "author-004")]
FORGET = [r["id"] for r in TRAIN if r["author"] == "author-000"]
FT = {"adaptation": "full", "epochs": 6, "learning_rate": 1e-2, "batch_size": 8}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def lm(tok):
    return hf.from_pretrained_objects(tiny_llama(tok, seed=4), tok)


@pytest.fixture(scope="module")
def finetuned(lm):
    """A context holding the base LM, the QA dataset, the held-out authors, and the fine-tuned version."""
    tensors, config = lm
    ctx = InMemoryJobContext(params={}, kind="unlearning.train")
    base = ctx.register_model("tiny-lm", tensors, kind=hf.REGISTRY_KIND, config=config).model_version_id
    ds = ctx.add_artifact(A.to_jsonl(TRAIN), name="qa.jsonl")
    hold = ctx.add_artifact(A.to_jsonl(HOLDOUT), name="holdout.jsonl")
    ctx.params = {"dataset_artifact_id": ds, "kind": "causal_lm_qa", "name": "authors-lm",
                  "base_model_version_id": base, "language_model": FT}
    out = jobs.run_training(ctx)
    return ctx, base, ds, hold, out


def _fresh(ctx: InMemoryJobContext, kind: str = "unlearning.unlearn") -> InMemoryJobContext:
    """Another job on the same stores (tombstones copied: each test starts from the fine-tuned state)."""
    return InMemoryJobContext(params={}, kind=kind, artifacts=ctx.artifacts, models=dict(ctx.models),
                              tombstones={k: set(v) for k, v in ctx.tombstones.items()})


def test_qa_finetuning_registers_a_causal_lm_with_lineage(finetuned):
    ctx, base, ds, hold, out = finetuned
    info, tensors, config, lineage = ctx.models[out["model_version_id"]]
    assert config["format"] == hf.HF_FORMAT and lineage["kind"] == hf.REGISTRY_KIND
    assert lineage["parent_version_ids"] == [base] and lineage["dataset_artifact_id"] == ds
    assert config["dataset_artifact_id"] == ds and config["qa_finetune"]["epochs"] == 6
    m = out["metrics"]
    assert m["forget_probability_after"] > 2 * m["forget_probability_before"]  # it learned the answers
    model, _ = hf.load_model(tensors, config)  # a loadable Hugging Face model
    assert model.config.model_type == "llama"


def test_flat_job_forgets_with_an_audited_only_record(finetuned):
    ctx, base, ds, hold, out = finetuned
    c = _fresh(ctx)
    c.params = {"model_version_id": out["model_version_id"], "forget_record_ids": FORGET, "method": "flat",
                "eval_dataset_artifact_id": hold, "seed": 1,
                "language_model": {"adaptation": "full", "epochs": 20, "learning_rate": 3e-3, "max_length": 0,
                                   "divergence": "kl"}}
    res = jobs.run_unlearning(c)
    info, tensors, config, lineage = c.models[res["model_version_id"]]
    assert lineage["parent_version_ids"] == [out["model_version_id"]] and config["excluded_record_ids"] == FORGET
    assert c.forgotten_records(ds) == set(FORGET)
    g = res["guarantee"]
    assert g["kind"] == "audited_only" and g["epsilon"] is None and not res["certified"]
    m = res["metrics"]
    assert m["forget_probability_after"] < 0.7 * m["forget_probability_before"]
    assert m["template_probability_after"] > m["template_probability_before"]
    rep = json.loads(c.artifacts[res["report_artifact_id"]][1])
    assert rep["hyperparameters"]["divergence"] == "kl" and rep["uses_reference_model"] is False
    assert rep["uses_retain_data"] is False and set(rep["mia_auc"]) == {"before", "after"}
    assert rep["forget_count"] == len(FORGET) and rep["retain_count"] == len(TRAIN) - len(FORGET)


@pytest.mark.parametrize("method", ["npo", "gradient_ascent"])
def test_a_killed_lm_unlearning_job_resumes_to_the_same_weights(finetuned, method):
    ctx, base, ds, hold, out = finetuned
    params = {"model_version_id": out["model_version_id"], "forget_record_ids": FORGET, "method": method, "seed": 2,
              "language_model": {"epochs": 3, "batch_size": 2, "learning_rate": 1e-3}}  # LoRA, 9 steps
    straight = _fresh(ctx)
    straight.params = dict(params)
    want = jobs.run_unlearning(straight)
    killed = _fresh(ctx)
    killed.params = dict(params)
    killed.cancel_after_progress = 4  # dies before its 5th step (a checkpoint after every step)
    with pytest.raises(Cancelled):
        jobs.run_unlearning(killed)
    assert killed.load_checkpoint()["done"] == 4
    killed.cancel_after_progress = None
    got = jobs.run_unlearning(killed)
    a, b = straight.models[want["model_version_id"]][1], killed.models[got["model_version_id"]][1]
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0)
    assert got["metrics"] == want["metrics"]


@pytest.mark.parametrize("bad,field", [
    ({"language_model": {"divergence": "bogus"}}, "language_model.divergence"),
    ({"language_model": {"epochs": 0}}, "language_model.epochs"),
    ({"language_model": {"adaptation": "half"}}, "language_model.adaptation"),
    ({"forget_record_ids": ["author-000-q0", "nope"]}, "forget_record_ids"),
    ({"method": "certified_noisy_minimizer"}, "method"),
])
def test_bad_input_names_the_field(finetuned, bad, field):
    ctx, base, ds, hold, out = finetuned
    c = _fresh(ctx)
    c.params = dict({"model_version_id": out["model_version_id"], "forget_record_ids": FORGET, "method": "flat"},
                    **bad)
    with pytest.raises(InvalidArgument) as e:
        jobs.run_unlearning(c)
    assert e.value.violations[0].field == field


def test_flat_and_npo_refuse_a_linear_model():
    from tests.unlearning.helpers import ctx_with_data

    ctx, ds, ev, ids = ctx_with_data(n=200, dim=4)
    ctx.params = {"kind": "logreg_l2", "mu": 0.1, "dataset_artifact_id": ds, "name": "lin", "checkpoint_every": 200}
    v = jobs.run_training(ctx)["model_version_id"]
    for method in ("flat", "npo"):
        ctx.params = {"model_version_id": v, "forget_record_ids": ids[:2], "method": method}
        with pytest.raises(InvalidArgument) as e:
            jobs.run_unlearning(ctx)
        assert e.value.violations[0].field == "method"


# ---- the real service and worker -------------------------------------------------------------------------
QUEUES = "training,unlearning,audit"


@pytest.fixture(scope="module")
def settings(settings):
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def env(settings, lm, tmp_path_factory):
    tenant, token = harness.token_for(settings, f"tenant-flat-{uuid.uuid4().hex[:6]}")
    tensors, config = lm
    harness.register_model(settings, tenant, "tiny-lm", tensors, kind=hf.REGISTRY_KIND, config=config)
    server = harness.PlatformServer(settings, ["platform", "unlearning"])
    worker = harness.Worker(settings, tmp_path_factory.mktemp("flat-workers"), QUEUES)
    channel = grpc.insecure_channel(server.address)
    arts = artifacts_pb2_grpc.ArtifactServiceStub(channel)

    def upload(name, data):
        req = artifacts_pb2.UploadArtifactRequest(name=name, content_type=A.QA_CONTENT_TYPE, chunk=data)
        return arts.UploadArtifact(iter([req]), metadata=auth(token)).artifact.id
    ds = upload("qa.jsonl", A.to_jsonl(TRAIN))
    stub = unlearning_pb2_grpc.UnlearningServiceStub(channel)
    job = stub.StartTrainingJob(pb.StartTrainingJobRequest(
        kind=pb.MODEL_KIND_CAUSAL_LM_QA, base_model=common_pb2.ModelRef(name="tiny-lm"), dataset_artifact_id=ds,
        name="authors-lm", language_model=pb.LanguageModelTuning(adaptation=pb.ADAPTATION_FULL, epochs=2,
                                                                  learning_rate=3e-3, batch_size=8)),
        metadata=auth(token)).job
    e = SimpleNamespace(server=server, worker=worker, channel=channel, stub=stub, token=token, ds=ds,
                        jobs=jobs_pb2_grpc.JobServiceStub(channel), log_dir=worker.log.parent, settings=settings)
    _wait(settings, job.id, 240)
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _wait(settings, job_id: str, timeout: float = 240, state: str = "SUCCEEDED") -> dict:
    row = wait_for(lambda: (r := job_row(settings, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
                   timeout, interval=0.2, what=f"job {job_id}")
    assert row["state"] == state, (row["error_reason"], row["error_message"])
    return row


def test_killed_flat_job_resumes_and_its_record_is_audited_only(env, settings):
    resp = env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name="authors-lm"), forget_record_ids=FORGET, method=pb.METHOD_FLAT, seed=3,
        reason="DSR-7", language_model=pb.LanguageModelTuning(epochs=8, batch_size=2)),  # 24 steps, LoRA
        metadata=auth(env.token))
    wait_for(lambda: job_row(settings, resp.job.id)["progress"] >= 0.15, 240, interval=0.05, what="progress")
    env.worker.kill9()
    killed_at = job_row(settings, resp.job.id)["progress"]
    env.worker = harness.Worker(env.settings, env.log_dir, QUEUES)
    row = _wait(settings, resp.job.id)
    assert row["attempts"] == 2 and killed_at < 0.9
    with db.connect(settings) as conn:
        messages = [r["message"] for r in conn.execute("SELECT message FROM job_events WHERE job_id = %s ORDER BY seq",
                                                       (resp.job.id,))]
        outcomes = conn.execute("SELECT count(*) AS n FROM unlearning_outcomes WHERE job_id = %s",
                                (resp.job.id,)).fetchone()["n"]
    assert any("resuming from checkpoint" in m for m in messages) and outcomes == 1
    assert any(m.startswith("flat: step") for m in messages)
    rec = env.stub.GetUnlearningRecord(pb.GetUnlearningRecordRequest(record_id=resp.record_id),
                                       metadata=auth(env.token)).record
    assert rec.state == common_pb2.JOB_STATE_SUCCEEDED and rec.method == pb.METHOD_FLAT
    assert rec.guarantee.kind == "audited_only" and not rec.certificate.certified
    assert rec.new_model.name == "authors-lm" and rec.new_model.version == 2 and rec.source_model.version == 1
    assert list(rec.forget_record_ids) == FORGET and rec.reason == "DSR-7"
    assert rec.metrics["forget_probability_after"] < rec.metrics["forget_probability_before"]


def test_lm_unlearning_job_can_be_cancelled(env, settings):
    resp = env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name="authors-lm"), forget_record_ids=["author-001-q0"],
        method=pb.METHOD_GRADIENT_ASCENT, language_model=pb.LanguageModelTuning(epochs=1000, batch_size=1)),
        metadata=auth(env.token))
    wait_for(lambda: job_row(settings, resp.job.id)["progress"] > 0, 240, interval=0.05, what="progress")
    env.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=resp.job.id), metadata=auth(env.token))
    _wait(settings, resp.job.id, 120, state="CANCELLED")
    rec = env.stub.GetUnlearningRecord(pb.GetUnlearningRecordRequest(record_id=resp.record_id),
                                       metadata=auth(env.token)).record
    assert rec.state == common_pb2.JOB_STATE_CANCELLED and not rec.new_model_version_id


@pytest.mark.parametrize("fields,field", [
    ({"language_model": pb.LanguageModelTuning(epochs=-1)}, "language_model.epochs"),
    ({"language_model": pb.LanguageModelTuning(divergence=99)}, "language_model.divergence"),
    ({"language_model": pb.LanguageModelTuning(template_answers=[""])}, "language_model.template_answers[0]"),
    ({"learning_rate": 0.1}, "learning_rate"),
    ({"forget_record_ids": ["nope"]}, "forget_record_ids"),
    ({"method": pb.METHOD_CERTIFIED_NOISY_MINIMIZER}, "method"),
])
def test_bad_requests_are_invalid_argument_with_the_field(env, fields, field):
    req = dict({"model": common_pb2.ModelRef(name="authors-lm", version=1), "forget_record_ids": FORGET,
                "method": pb.METHOD_FLAT}, **fields)
    with pytest.raises(grpc.RpcError) as err:
        env.stub.StartUnlearningJob(pb.StartUnlearningJobRequest(**req), metadata=auth(env.token))
    code, _, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == field, bad


def test_bad_finetuning_requests_are_invalid_argument_with_the_field(env):
    good = {"kind": pb.MODEL_KIND_CAUSAL_LM_QA, "base_model": common_pb2.ModelRef(name="tiny-lm"),
            "dataset_artifact_id": env.ds, "name": "x"}
    bad_qa = artifacts_pb2_grpc.ArtifactServiceStub(env.channel).UploadArtifact(iter([
        artifacts_pb2.UploadArtifactRequest(name="bad.jsonl", content_type=A.QA_CONTENT_TYPE,
                                            chunk=b'{"id": "a", "question": "q"}\n')]), metadata=auth(env.token))
    cases = [({"base_model": common_pb2.ModelRef()}, "base_model.name"),
             ({"dataset_artifact_id": bad_qa.artifact.id}, "dataset_artifact_id"),
             ({"language_model": pb.LanguageModelTuning(lora_rank=-2)}, "language_model.lora_rank")]
    for fields, field in cases:
        with pytest.raises(grpc.RpcError) as err:
            env.stub.StartTrainingJob(pb.StartTrainingJobRequest(**dict(good, **fields)), metadata=auth(env.token))
        code, _, bad, _ = rpc_error_details(err.value)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == field, (fields, bad)
