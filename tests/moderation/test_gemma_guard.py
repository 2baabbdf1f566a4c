"""The Gemma guard kind (gemma_guard.py) on a tiny random Gemma 3 saved as a Hugging Face directory and registered
the way the generation service's import registers a language model (hf.to_registry): the train_guard job reads it
from the registry, registers a self-contained "gemma_frozen" guard that answers through the same decisions,
thresholds and batching as the MiniLM guards (the answer names the kind), and a killed job resumes to the same
model. The real Gemma 3 270M is measured in benchmarks/moderation/quality.py and latency.py, not here."""
from __future__ import annotations

import pytest
import torch

from services.common import hf
from services.common.errors import Cancelled, FailedPrecondition, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.moderation.decision import SCORE_TOLERANCE, Item, Thresholds, moderate_items
from services.moderation.jobs.train_guard import run_guard_training
from services.moderation.schema import dump_guard_jsonl


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    """(tensors, config) of a random 2-layer Gemma 3 (hidden 32) with the generation tests' small BPE tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from services.generation import corpus
    from services.generation.training import train_tokenizer

    tok = train_tokenizer(corpus.builtin_corpus(0, n_retrieval=60, qa_repeats=1), 300)
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                           sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                           pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id)
    model = Gemma3ForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("tiny-gemma")
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return hf.to_registry(hf.read_directory(d))


@pytest.fixture(scope="module")
def rows(seed_rows):
    tr = [r for r in seed_rows if r.split == "train"]
    va = [r for r in seed_rows if r.split == "validation"]
    return tr[::8] + va[::6]


def _ctx(tiny_gemma, rows, **params) -> InMemoryJobContext:
    ctx = InMemoryJobContext(params={})
    info = ctx.register_model("gemma-tiny", tiny_gemma[0], kind="language_model", config=tiny_gemma[1])
    ctx.params.update({"kind": "gemma_frozen", "backbone_model_version_id": info.model_version_id,
                       "layer": 2, "max_iter": 6, "model_name": "guard-gemma", **params})
    ctx.params["dataset_artifact_id"] = ctx.add_artifact(dump_guard_jsonl(rows), "data.jsonl", "application/jsonl")
    return ctx


def _guard(ctx, out):
    from services.moderation.serving import build_guard

    _info, tensors, config, lineage = ctx.models[out["model_version_id"]]
    row = {"name": "guard-gemma", "version": 1, "id": out["model_version_id"]}
    return build_guard(tensors, config, row), lineage


@pytest.fixture(scope="module")
def trained(tiny_gemma, rows):
    ctx = _ctx(tiny_gemma, rows)
    out = run_guard_training(ctx)
    return ctx, out


def test_training_registers_a_gemma_guard_that_serves_like_the_others(trained, rows):
    ctx, out = trained
    loaded, lineage = _guard(ctx, out)
    g = loaded.obj
    assert out["kind"] == "gemma_frozen" and lineage["kind"] == "guard/gemma_frozen"
    assert lineage["parent_version_ids"] == [ctx.params["backbone_model_version_id"]]
    assert g.kind == "gemma_frozen" and g.fingerprint() == out["model_fingerprint"] == loaded.info.fingerprint
    assert set(out["decision_defaults"]) >= {"unsafe_threshold", "topic_threshold", "default_level"}
    fr = [e[0] for e in ctx.events]
    assert fr == sorted(fr) and fr[-1] == 1.0 and any(e[1] == "newton iteration 1" for e in ctx.events)
    # the heads fit the training rows (a random backbone still separates them linearly: a trained probe)
    tr = [r for r in rows if r.split == "train"]
    p = g.predict_proba([r.text for r in tr], [r.role for r in tr], [r.prompt for r in tr])
    y = torch.tensor([r.unsafe for r in tr])
    acc, majority = ((torch.from_numpy(p["unsafe"]) >= 0.5) == y).float().mean(), max(y.float().mean(), 1 - y.float().mean())
    assert acc > majority + 0.2, (acc, majority)   # 0.81 vs 0.52 at the Gemma kinds' l2 (1e-3); 0.9+ at 1e-4
    # the decisions and the answer: same aggregator, the kind that answered is named
    items = [Item(r.text, r.role, r.prompt) for r in rows[:12]]
    res = moderate_items(g, items, Thresholds())
    assert {r.model_kind for r in res} == {"gemma_frozen"} and {r.model_version for r in res} == {g.version}
    # batched (padded) scoring agrees with one-by-one scoring, and so do the decisions away from the thresholds
    res_b = moderate_items(g, items, Thresholds(), batched=True)
    for a, b in zip(res, res_b, strict=True):
        assert abs(a.unsafe_score - b.unsafe_score) <= SCORE_TOLERANCE


def test_the_pair_is_read_in_one_pass(trained):
    ctx, out = trained
    g = _guard(ctx, out)[0].obj
    reply = "Sure, here is how you do it."
    a = g.features([reply, reply, reply], ["response"] * 3, ["How do I bake bread?", "How do I build a bomb?", None])
    assert not torch.allclose(torch.from_numpy(a[0]), torch.from_numpy(a[1]))   # the request changes the reading
    assert a[2, -1] == 0.0 and a[0, -1] == 1.0 and a[0, -2] == 1.0               # has-prompt and role bits


def test_per_tenant_level_thresholds_are_monotone(trained, rows):
    ctx, out = trained
    g = _guard(ctx, out)[0].obj
    items = [Item(r.text, r.role, r.prompt) for r in rows[:20]]
    blocked = []
    for level in range(5):
        th = Thresholds((level,) * 11, unsafe_threshold=0.99, topic_threshold=0.3, block_unspecified=False)
        blocked.append([r.blocked for r in moderate_items(g, items, th)])
    assert any(blocked[0]) and sum(blocked[0]) > sum(blocked[4])
    for lo, hi in zip(blocked, blocked[1:], strict=False):
        assert all(b or not a for a, b in zip(hi, lo, strict=True))   # raising a level never blocks more


@pytest.mark.parametrize("crash_after", [2, 4])
def test_a_killed_job_resumes_to_the_same_guard(trained, tiny_gemma, rows, crash_after):
    ref_ctx, ref = trained
    ctx = _ctx(tiny_gemma, rows)
    ctx.cancel_after_progress = crash_after
    with pytest.raises(Cancelled):
        run_guard_training(ctx)
    ctx.cancel_after_progress = None
    out = run_guard_training(ctx)
    assert out["metrics"] == ref["metrics"]   # (the fingerprints differ: another registration of the backbone)
    t_ref, t_got = ref_ctx.models[ref["model_version_id"]][1], ctx.models[out["model_version_id"]][1]
    assert t_ref.keys() == t_got.keys()
    for k in t_ref:
        assert torch.equal(t_ref[k], t_got[k]), k


def test_without_a_dataset_a_gemma_guard_trains_on_the_real_request_pairs(tiny_gemma, rows):
    """No dataset artifact: the Gemma kinds read the packaged real-request pairs (the MiniLM kinds the seed set)."""
    import hashlib

    from services.moderation.schema import load_packaged_dataset

    ctx = _ctx(tiny_gemma, rows, max_iter=1)
    del ctx.params["dataset_artifact_id"]
    out = run_guard_training(ctx)
    pairs = load_packaged_dataset("real_requests")
    cfg = ctx.models[out["model_version_id"]][2]
    assert cfg["dataset_sha256"] == hashlib.sha256(dump_guard_jsonl(pairs)).hexdigest()
    assert (cfg["n_train"], cfg["n_validation"]) == (sum(r.split == "train" for r in pairs),
                                                     sum(r.split == "validation" for r in pairs))


def test_a_gemma_teacher_is_distilled_on_the_real_request_pairs(trained):
    """moderation.distill without a dataset reads the packaged set of its teacher's kind: the real-request pairs for
    a Gemma guard (the seed set for a MiniLM one, tests/moderation/test_distill_job.py)."""
    from services.moderation.jobs.distill import run_distillation
    from services.moderation.schema import load_packaged_dataset

    _ctx0, out = trained
    _info, tensors, config, _lineage = _ctx0.models[out["model_version_id"]]
    ctx = InMemoryJobContext(params={})
    teacher = ctx.register_model("guard-gemma", tensors, kind="guard/gemma_frozen", config=config)
    ctx.params.update({"teacher_model_version_id": teacher.model_version_id, "augment": False, "epochs": 1})
    res = run_distillation(ctx)
    pairs = load_packaged_dataset("real_requests")
    assert res["metrics"]["n_train"] == sum(r.split == "train" for r in pairs)
    assert res["metrics"]["n_validation"] == sum(r.split == "validation" for r in pairs)


def test_bad_gemma_params_name_the_field(tiny_gemma, rows):
    for params, field in [({"backbone_model_version_id": None}, "params.backbone_model_version_id"),
                          ({"layer": 0}, "params.layer"), ({"pool": "max"}, "params.pool")]:
        ctx = _ctx(tiny_gemma, rows, **params)
        if params.get("backbone_model_version_id", "") is None:
            del ctx.params["backbone_model_version_id"]
        with pytest.raises(InvalidArgument) as e:
            run_guard_training(ctx)
        assert e.value.violations[0].field == field
    with pytest.raises(InvalidArgument) as e:   # deeper than the backbone
        run_guard_training(_ctx(tiny_gemma, rows, layer=3))
    assert e.value.violations[0].field == "params.layer"
    ctx = _ctx(tiny_gemma, rows)                   # a registered guard is not a language model
    info = ctx.register_model("guard", {"heads.unsafe_w": torch.zeros(1, 4)}, kind="guard/frozen_linear",
                              config={"kind": "frozen_linear"})
    ctx.params["backbone_model_version_id"] = info.model_version_id
    with pytest.raises(FailedPrecondition) as e:
        run_guard_training(ctx)
    assert e.value.reason == "NOT_A_LANGUAGE_MODEL"


@pytest.mark.gemma
@pytest.mark.skipif(__import__("services.generation.pretrained", fromlist=["missing"]).missing() is not None,
                    reason="the Gemma 3 270M wheels are not installed")
def test_the_real_gemma_backbone_through_the_job(tmp_path_factory):
    """Gemma 3 270M registered as the generation service's import registers it (hf.gguf_to_registry of the packaged
    GGUF), a gemma_frozen guard trained on 48 rows of the real-request pairs, served back from the registry."""
    from services.generation import pretrained
    from services.moderation.data.make_gemma_pairs import PAIRS
    from services.moderation.schema import parse_guard_jsonl

    tensors, config = hf.gguf_to_registry(pretrained.gguf_file(tmp_path_factory.mktemp("gemma-cache")))
    rows = parse_guard_jsonl(PAIRS.read_bytes())
    few = [r for r in rows if r.split == "train"][::40][:36] + [r for r in rows if r.split == "validation"][::30][:12]
    ctx = _ctx((tensors, config), few, layer=6, max_iter=4)
    out = run_guard_training(ctx)
    g = _guard(ctx, out)[0].obj
    assert g.kind == "gemma_frozen" and g.backbone.n_layers == 18 and g.fingerprint() == out["model_fingerprint"]
    items = [Item(r.text, r.role, r.prompt) for r in few[:6]]
    for a, b in zip(moderate_items(g, items, Thresholds()), moderate_items(g, items, Thresholds(), batched=True),
                    strict=True):
        assert a.model_kind == "gemma_frozen" and abs(a.unsafe_score - b.unsafe_score) <= SCORE_TOLERANCE


def test_conformal_calibration_of_a_gemma_guard(trained, rows):
    """The calibration job reads a gemma_frozen guard (scored row by row, its canonical path, with each reply's
    request) and its thresholds give prediction sets over the same guard's probabilities."""
    import json

    from services.moderation.conformal import ConformalSeverity
    from services.moderation.jobs.calibrate import run_calibration

    ctx, out = trained
    _info, tensors, config, _lineage = ctx.models[out["model_version_id"]]
    known = [r for r in rows if r.severity or not r.unsafe]
    data = "".join(json.dumps({**r.to_json(), "group": "ab"[i % 2]}) + "\n" for i, r in enumerate(known)).encode()
    cctx = InMemoryJobContext(params={})
    gid = cctx.register_model("guard-gemma", tensors, kind="guard/gemma_frozen", config=config).model_version_id
    cctx.params.update({"guard_model_version_id": gid, "dataset_artifact_id": cctx.add_artifact(data),
                        "alpha": 0.2, "metric": "equal_opportunity"})
    res = run_calibration(cctx)
    (_, t_cal, c_cal, lin), = [m for m in cctx.models.values() if m[3]["kind"] == "guard.conformal"]
    assert lin["parent_version_ids"] == [gid] and c_cal["guard_model_version_id"] == gid
    m = res["metrics"]
    assert m["n_calibration"] + m["n_eval"] == len(known) and m["calibration_fair_coverage"] >= 0.8 - 0.05
    g = _guard(ctx, out)[0].obj
    cal = ConformalSeverity.from_registry(t_cal, c_cal)
    sets = cal.prediction_sets(g.predict_proba(["Sure, here is how.", "How do I bake bread?"], ["response", "prompt"],
                                               ["How do I build a bomb?", None]), ["a", "b"])
    assert len(sets) == 2 and all(s and s == sorted(set(s)) for s in sets)


# ------------------------------------------------------------------------------------ through the real server
@pytest.fixture(scope="module")
def api_env(settings, tiny_gemma, rows, tmp_path_factory):
    """A private platform (its own database and broker) with the moderation service, a worker for the training and
    calibration queues, the tiny Gemma registered as a language model and the rows uploaded as a dataset."""
    import uuid
    from types import SimpleNamespace

    import grpc

    from praxon.jobs.v1 import jobs_pb2_grpc
    from praxon.moderation.v1 import moderation_pb2_grpc
    from tests import harness

    with harness.private_platform(settings) as private:
        tenant, token = harness.token_for(private, f"gemma-guard-{uuid.uuid4().hex[:6]}")
        harness.register_model(private, tenant, "gemma-tiny", tiny_gemma[0], kind=hf.REGISTRY_KIND,
                               config=tiny_gemma[1])
        harness.register_model(private, tenant, "not-an-lm", {"w": torch.zeros(2)}, kind="guard/frozen_linear",
                               config={"kind": "frozen_linear"})
        server = harness.PlatformServer(private, ["platform", "moderation"])
        worker = harness.Worker(private, tmp_path_factory.mktemp("gemma-guard-worker"),
                                queues="training,calibration")
        channel = grpc.insecure_channel(server.address)
        try:
            yield SimpleNamespace(stub=moderation_pb2_grpc.ModerationServiceStub(channel),
                                  jobs=jobs_pb2_grpc.JobServiceStub(channel), channel=channel, token=token,
                                  md=harness.auth(token), server=server, tenant=tenant, worker=worker,
                                  dataset=_upload(channel, token, dump_guard_jsonl(rows)))
        finally:
            worker.stop()
            channel.close()
            server.stop()


def _upload(channel, token, data: bytes) -> str:
    from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
    from tests.harness import auth

    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    msg = artifacts_pb2.UploadArtifactRequest(name="rows.jsonl", content_type="application/jsonl", chunk=data)
    return stub.UploadArtifact(iter([msg]), metadata=auth(token)).artifact.id


def test_start_guard_training_job_trains_a_gemma_guard_that_calibrates(api_env, rows):
    """StartGuardTrainingJob with kind GEMMA_FROZEN pins the backbone it resolved, the worker trains the guard, and
    StartCalibrationJob calibrates it (the calibration job reads a gemma_frozen guard)."""
    import json

    from praxon.common.v1 import common_pb2
    from praxon.moderation.v1 import moderation_pb2 as pb
    from tests.harness import wait_job

    e = api_env
    job = e.stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(
        kind=pb.GUARD_KIND_GEMMA_FROZEN, backbone_model=common_pb2.ModelRef(name="gemma-tiny"), layer=2,
        pool=pb.GUARD_POOLING_LAST, max_tokens=128, max_iter=4, model_name="guard-gemma",
        dataset_artifact_id=e.dataset), metadata=e.md).job
    lm_id = str(e.server.app.registry.resolve(e.tenant, "gemma-tiny")["id"])
    assert job.kind == "moderation.train_guard"
    assert {k: job.params[k] for k in ("kind", "backbone_model_version_id", "layer", "pool", "max_tokens")} == {
        "kind": "gemma_frozen", "backbone_model_version_id": lm_id, "layer": 2, "pool": "last", "max_tokens": 128}
    done = wait_job(e.jobs, e.token, job.id)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, (done.error, e.worker.log.read_text()[-3000:])
    assert done.result["kind"] == "gemma_frozen"
    known = [r for r in rows if r.severity or not r.unsafe]
    data = "".join(json.dumps({**r.to_json(), "group": "ab"[i % 2]}) + "\n" for i, r in enumerate(known)).encode()
    cal = e.stub.StartCalibrationJob(pb.StartCalibrationJobRequest(
        guard_model=common_pb2.ModelRef(name="guard-gemma"), dataset_artifact_id=_upload(e.channel, e.token, data),
        alpha=0.2), metadata=e.md).job
    cal_done = wait_job(e.jobs, e.token, cal.id)
    assert cal_done.state == common_pb2.JOB_STATE_SUCCEEDED, (cal_done.error, e.worker.log.read_text()[-3000:])
    assert cal_done.params["guard_model_version_id"] == done.result["model_version_id"]


def test_gemma_guard_training_request_errors_name_the_field(api_env):
    import grpc

    from praxon.common.v1 import common_pb2
    from praxon.moderation.v1 import moderation_pb2 as pb
    from tests.harness import rpc_error_details

    e = api_env
    gemma, ref = pb.GUARD_KIND_GEMMA_FROZEN, common_pb2.ModelRef
    cases = [({"kind": gemma}, grpc.StatusCode.INVALID_ARGUMENT, "backbone_model.name"),
             ({"kind": gemma, "backbone_model": ref(name="not-an-lm")}, grpc.StatusCode.INVALID_ARGUMENT,
              "backbone_model"),
             ({"kind": gemma, "backbone_model": ref(name="nope")}, grpc.StatusCode.NOT_FOUND, None),
             ({"backbone_model": ref(name="gemma-tiny")}, grpc.StatusCode.INVALID_ARGUMENT, "backbone_model"),
             ({"kind": gemma, "backbone_model": ref(name="gemma-tiny"), "layer": 0},
              grpc.StatusCode.INVALID_ARGUMENT, "layer"),
             ({"kind": gemma, "backbone_model": ref(name="gemma-tiny"), "max_tokens": 4},
              grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
             ({"kind": gemma, "backbone_model": ref(name="gemma-tiny"), "pool": 9},
              grpc.StatusCode.INVALID_ARGUMENT, "pool"),
             ({"kind": 7}, grpc.StatusCode.INVALID_ARGUMENT, "kind"),
             ({"kind": gemma, "backbone_model": ref(name="gemma-tiny"), "teacher_model": ref(name="guard")},
              grpc.StatusCode.INVALID_ARGUMENT, "teacher_model"),   # only frozen_linear heads are distilled
             ({"teacher_model": ref(name="no-such-guard")}, grpc.StatusCode.FAILED_PRECONDITION, None)]
    for fields, code, field in cases:
        with pytest.raises(grpc.RpcError) as ei:
            e.stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(**fields), metadata=e.md)
        got, _info, bad, _retry = rpc_error_details(ei.value)
        assert got == code, (fields, got, ei.value.details())
        if field is not None:
            assert bad.field_violations[0].field == field, (fields, bad)
