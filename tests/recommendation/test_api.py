"""RecommendationService through the real gRPC server and its interceptors, PostgreSQL, S3 and a real worker
(module fixture: a synthetic dataset imported through the API, "recommender" v1 = PreferDiff and v2 = SASRec-CE,
"rec-pop" = popularity), plus the kserve predictor served by `praxon predictor` (ModelServer) on loopback."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import socket
import sys
import threading
import urllib.request
import uuid

import grpc
import pytest
import torch

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from praxon.recommendation.v1 import recommendation_pb2 as pb
from praxon.recommendation.v1 import recommendation_pb2_grpc
from tests import harness
from tests.harness import call_retrying as call
from tests.harness import wait_job
from tests.harness import auth, rpc_error_details

SYNTH = dict(n_users=400, n_items=60, n_clusters=4, min_len=5, max_len=12, synthetic_seed=1)
TINY = dict(dim=16, batch_size=32, lr=3e-3, timesteps=200, sample_steps=10, patience=50, seed=3)


def rec_server(settings, services, config):
    """PlatformServer with the recommendation service's settings section replaced (as PRAXON_RECOMMENDATION__* would)."""
    return harness.PlatformServer(settings.model_copy(update={"recommendation": config}), services)


def start_worker(settings, log_dir):
    """One torch thread in the worker, as in this process (deterministic resume needs the same thread count)."""
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return harness.Worker(settings, log_dir, queues="default,training")
    finally:
        os.environ.pop("OMP_NUM_THREADS") if saved is None else os.environ.__setitem__("OMP_NUM_THREADS", saved)


@dataclasses.dataclass
class Env:
    server: harness.PlatformServer
    channel: grpc.Channel
    stub: recommendation_pb2_grpc.RecommendationServiceStub
    registry: models_pb2_grpc.ModelRegistryServiceStub
    jobs: jobs_pb2_grpc.JobServiceStub
    tenant_id: str
    token: str
    settings: object
    worker: harness.Worker
    log_dir: object
    dataset_id: str
    done: dict

    @property
    def md(self):
        return auth(self.token)

    @property
    def servicer(self):
        return self.server.app.extras["recommendation_servicer"]

    def local(self, name: str, version: int):
        """The registered version loaded in this process: the domain Recommender, and the dataset it was trained on."""
        from services.recommendation.recommender import load_recommender

        reg = self.server.app.registry
        row = reg.resolve(self.tenant_id, name, version)
        return load_recommender(*reg.load_weights(self.tenant_id, row))


@pytest.fixture(scope="module")
def settings(settings):
    """This module's own database and broker: its long-lived worker sees only this module's jobs."""
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory):
    from services.recommendation.serving import ServingConfig

    config = ServingConfig(alias_check_s=0.3, load_wait_s=20.0, retry_after_s=0.2, max_wait_ms=5.0)
    server = rec_server(settings, ["platform", "recommendation"], config)
    tenant_id, token = harness.token_for(settings, f"rec-{uuid.uuid4().hex[:6]}")
    log_dir = tmp_path_factory.mktemp("rec-worker")
    worker = start_worker(settings, log_dir)
    ch = grpc.insecure_channel(server.address)
    stub = recommendation_pb2_grpc.RecommendationServiceStub(ch)
    jobs = jobs_pb2_grpc.JobServiceStub(ch)
    e = None
    try:
        imp = stub.StartImportInteractionsJob(pb.StartImportInteractionsJobRequest(
            builtin=pb.BUILTIN_DATASET_SYNTHETIC, synthetic=pb.SyntheticOptions(**SYNTH), seed=0),
            metadata=auth(token)).job
        imp = wait_job(jobs, token, imp.id)
        assert imp.state == common_pb2.JOB_STATE_SUCCEEDED, (imp.error, worker.log.read_text()[-3000:])
        dataset_id = imp.result["dataset_artifact_id"]
        started = {"v1": stub.StartTrainingJob(pb.StartTrainingJobRequest(
            dataset_artifact_id=dataset_id, model_kind=pb.MODEL_KIND_PREFERDIFF, model_name="recommender",
            params=pb.TrainingParams(epochs=3, **TINY)), metadata=auth(token)).job}
        started["v1"] = wait_job(jobs, token, started["v1"].id)  # v1 before v2: version numbers follow commit order
        started["v2"] = stub.StartTrainingJob(pb.StartTrainingJobRequest(
            dataset_artifact_id=dataset_id, model_kind=pb.MODEL_KIND_SASREC_CE, model_name="recommender",
            params=pb.TrainingParams(epochs=2, dim=16, lr=3e-3, batch_size=64, seed=1)), metadata=auth(token)).job
        started["pop"] = stub.StartTrainingJob(pb.StartTrainingJobRequest(
            dataset_artifact_id=dataset_id, model_kind=pb.MODEL_KIND_POPULARITY, model_name="rec-pop"),
            metadata=auth(token)).job
        done = {"import": imp, "v1": started["v1"]}
        done.update({k: wait_job(jobs, token, j.id) for k, j in started.items() if k not in done})
        for k, j in done.items():
            assert j.state == common_pb2.JOB_STATE_SUCCEEDED, (k, j.error, worker.log.read_text()[-3000:])
        e = Env(server, ch, stub, models_pb2_grpc.ModelRegistryServiceStub(ch), jobs, tenant_id, token, settings,
                worker, log_dir, dataset_id, done)
        yield e
    finally:
        (e.worker if e else worker).stop()
        server.run(server.app.extras["recommendation_servicer"].close())
        server.stop()


def ref(version=0, name="recommender", alias=""):
    return common_pb2.ModelRef(name=name, version=version, alias=alias)


def recommend(env, history=(), k=5, exclude_seen=False, indices=None, model=None):
    h = pb.History(item_indices=indices) if indices is not None else pb.History(item_ids=list(history))
    return call(env.stub.Recommend, pb.RecommendRequest(model=model or ref(1), history=h, k=k,
                                                        exclude_seen=exclude_seen), env.md)


def expect_error(fn, code, field=None, reason=None):
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    got, info, bad, _ = rpc_error_details(ei.value)
    assert got == code, (got, ei.value.details())
    if field is not None:
        assert bad is not None and field in [v.field for v in bad.field_violations], (field, bad)
    if reason is not None:
        assert info is not None and info.reason == reason, (reason, info)
    return ei.value


def test_training_reports_epochs_and_stores_metrics(env):
    events = [e.event for e in env.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=env.done["v1"].id),
                                                    metadata=env.md)]
    epochs = [e for e in events if e.message.startswith("epoch ") and ": batch" not in e.message]  # (not ETAs)
    assert [e.message for e in epochs] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert all({"loss", "valid_recall_5", "epoch"} <= set(e.metrics) for e in epochs)
    assert [e.progress for e in epochs] == sorted(e.progress for e in epochs)
    for key, version, kind in (("v1", 1, "preferdiff"), ("v2", 2, "sasrec_ce")):
        job = env.done[key]
        assert [(m.name, m.version) for m in job.models] == [("recommender", version)]
        v = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=ref(version)),
                                         metadata=env.md).version
        assert v.kind == "recommendation" and v.config["model_kind"] == kind and v.dataset_artifact_id == env.dataset_id
        for m in ("recall", "ndcg"):
            for k in (5, 10, 20):
                assert 0.0 <= v.metrics[f"test_{m}_{k}"] <= 1.0
        assert v.metrics["epochs_run"] >= 1 and job.result["metrics"]["test_ndcg_10"] == v.metrics["test_ndcg_10"]
    stats = env.done["import"].result
    assert stats["n_users"] == SYNTH["n_users"] and stats["n_items"] <= SYNTH["n_items"]
    assert [a.content_type for a in env.done["import"].artifacts] == ["application/vnd.praxon.rec-dataset+safetensors"]


def _upload(env, data: bytes, name="interactions.csv") -> str:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(env.channel)
    return stub.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name=name, content_type="text/csv",
                                                                         chunk=data)]), metadata=env.md).artifact.id


def test_import_through_a_presigned_url_and_row_level_errors(env):
    rows = "\n".join(f"u{i % 9},i{i % 13},{1000 + i},{(i % 5) + 1}" for i in range(120))
    data = f"user,item,timestamp,rating\n{rows}\n".encode()
    arts = artifacts_pb2_grpc.ArtifactServiceStub(env.channel)
    up = arts.CreateUpload(artifacts_pb2.CreateUploadRequest(name="inter.csv", content_type="text/csv",
                                                             sha256=hashlib.sha256(data).hexdigest()), metadata=env.md)
    urllib.request.urlopen(urllib.request.Request(up.url, data=data, method="PUT"), timeout=30).read()
    art = arts.CompleteUpload(artifacts_pb2.CompleteUploadRequest(upload_id=up.upload_id), metadata=env.md).artifact
    job = env.stub.StartImportInteractionsJob(pb.StartImportInteractionsJobRequest(
        artifact_id=art.id, format=pb.DATA_FORMAT_CSV, name="shop-v1"), metadata=env.md).job
    job = wait_job(env.jobs, env.token, job.id)
    assert job.state == common_pb2.JOB_STATE_SUCCEEDED, job.error
    assert (job.result["n_users"], job.result["n_items"], job.result["n_interactions"]) == (9, 13, 120)
    assert [a.name for a in job.artifacts] == ["shop-v1"]

    bad = _upload(env, b"user,item,timestamp\na,b,1\na,b,1\nc,d,yesterday-ish\ne,,3\n")
    job = wait_job(env.jobs, env.token, env.stub.StartImportInteractionsJob(
        pb.StartImportInteractionsJobRequest(artifact_id=bad), metadata=env.md).job.id)
    assert job.state == common_pb2.JOB_STATE_FAILED and job.error.reason == "INVALID_INTERACTIONS"
    problems = job.error.message.split("; ")
    assert [p.split(":")[0] for p in problems] == ["rows[2].timestamp", "rows[3].item", "rows[1]"], problems
    assert "duplicate of rows[0]" in problems[2] and not job.artifacts
    missing = _upload(env, b"user,item\na,b\n")
    job = wait_job(env.jobs, env.token, env.stub.StartImportInteractionsJob(
        pb.StartImportInteractionsJobRequest(artifact_id=missing), metadata=env.md).job.id)
    assert job.state == common_pb2.JOB_STATE_FAILED and job.error.message.startswith("columns.timestamp:")


def test_job_request_validation(env):
    s, md = env.stub, env.md
    ia = grpc.StatusCode.INVALID_ARGUMENT
    imp = pb.StartImportInteractionsJobRequest
    expect_error(lambda: s.StartImportInteractionsJob(imp(), metadata=md), ia, "artifact_id")
    expect_error(lambda: s.StartImportInteractionsJob(imp(artifact_id="nope"), metadata=md), ia, "artifact_id")
    expect_error(lambda: s.StartImportInteractionsJob(imp(artifact_id=str(uuid.uuid4())), metadata=md),
                 grpc.StatusCode.NOT_FOUND)
    expect_error(lambda: s.StartImportInteractionsJob(imp(builtin=pb.BUILTIN_DATASET_SYNTHETIC,
                                                          synthetic=pb.SyntheticOptions(n_users=3)), metadata=md),
                 ia, "synthetic.n_users")
    expect_error(lambda: s.StartImportInteractionsJob(imp(builtin=pb.BUILTIN_DATASET_ML_100K, max_history=0),
                                                      metadata=md), ia, "max_history")
    tr = pb.StartTrainingJobRequest
    expect_error(lambda: s.StartTrainingJob(tr(), metadata=md), ia, "dataset_artifact_id")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id,
                                               params=pb.TrainingParams(lr=-1.0, dim=15, heads=2)), metadata=md),
                 ia, "params.lr")
    from google.protobuf import struct_pb2

    extra = struct_pb2.Struct()
    extra.update({"epoch": 3})
    err = expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id, extra_params=extra),
                                                  metadata=md), ia, "extra_params.epoch")
    assert "unknown parameter" in err.details()
    extra = struct_pb2.Struct()
    extra.update({"lr": 0.1})
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id, extra_params=extra),
                                            metadata=md), ia, "extra_params.lr")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id, model_name="bad name!"),
                                            metadata=md), ia, "model_name")
    csv = _upload(env, b"user,item,timestamp\na,b,1\n")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=csv), metadata=md), ia, "dataset_artifact_id")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=str(uuid.uuid4())), metadata=md),
                 grpc.StatusCode.NOT_FOUND)
    # extra params reach the job's parser and the job: a valid one is accepted
    extra = struct_pb2.Struct()
    extra.update({"max_grad_norm": 1.0, "eval_batch_size": 256})
    job = s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id, model_name="rec-never", extra_params=extra,
                                params=pb.TrainingParams(epochs=1, dim=8)), metadata=md).job
    assert job.params["max_grad_norm"] == 1.0 and job.params["eval_batch_size"] == 256
    assert job.kind == "recommendation.train" and job.params["lr"] == 1e-4  # the kind's defaults, filled in
    # cross-field rules of the job's model, named as sent
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id,
                                               params=pb.TrainingParams(loss_type="mse")), metadata=md),
                 ia, "params.loss_type")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id, model_kind=pb.MODEL_KIND_DREAMREC,
                                               params=pb.TrainingParams(lam=0.4)), metadata=md), ia, "params.lam")
    expect_error(lambda: s.StartTrainingJob(tr(dataset_artifact_id=env.dataset_id,
                                               params=pb.TrainingParams(early_stop_metric="auc")), metadata=md),
                 ia, "params.early_stop_metric")
    sw = pb.StartSweepJobRequest
    expect_error(lambda: s.StartSweepJob(sw(dataset_artifact_id=env.dataset_id), metadata=md), ia, "grid")
    expect_error(lambda: s.StartSweepJob(sw(dataset_artifact_id=env.dataset_id,
                                            grid=[pb.SweepAxis(name="depth", values=[1])]), metadata=md), ia, "grid")
    expect_error(lambda: s.StartSweepJob(sw(dataset_artifact_id=env.dataset_id, params=pb.TrainingParams(heads=2),
                                            grid=[pb.SweepAxis(name="dim", values=[16, 15])]), metadata=md),
                 ia, "grid")
    expect_error(lambda: s.StartSweepJob(sw(dataset_artifact_id=env.dataset_id, params=pb.TrainingParams(lr=2.0),
                                            grid=[pb.SweepAxis(name="dim", values=[16])]), metadata=md),
                 ia, "params.lr")
    # 65 points: more than a sweep runs (64) is refused, never cut short
    expect_error(lambda: s.StartSweepJob(sw(dataset_artifact_id=env.dataset_id, grid=[
        pb.SweepAxis(name="dim", values=[8 * (i + 1) for i in range(13)]),
        pb.SweepAxis(name="lam", values=[0.1, 0.2, 0.3, 0.4, 0.5])]), metadata=md), ia, "grid")
    env.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=md)
    wait_job(env.jobs, env.token, job.id)


# ---------------------------------------------------------------------------------------------- serving
def _histories(env, rec, n=12):
    """Held-out users' histories (raw ids), plus unknown and empty ones."""
    from services.recommendation.data import Dataset

    ds = Dataset.from_bytes(env.server.app.registry.read_artifact(env.tenant_id, env.dataset_id))
    s = ds.samples("test")
    out = [[ds.item_ids[j - 1] for j in row[:n_].tolist()] for row, n_ in zip(s.history[:n], s.lengths[:n], strict=True)]
    return out + [["i3", "no-such-item", "i7"], ["ghost"], []]


def _same(resp, want, b=0):
    items = resp.recommendations.items
    keep = [j for j in range(want.item_indices.shape[1]) if want.item_indices[b, j] > 0]
    assert [it.item_id for it in items] == [want.ids[b][j] for j in keep]
    assert [it.item_index for it in items] == [int(want.item_indices[b, j]) for j in keep]
    assert [it.score for it in items] == [float(want.scores[b, j]) for j in keep]


@pytest.mark.parametrize("version", [1, 2])
def test_recommend_equals_the_domain_recommender(env, version):
    rec = env.local("recommender", version)
    for exclude in (False, True):
        for h in _histories(env, rec):
            resp = recommend(env, h, k=10, exclude_seen=exclude, model=ref(version))
            _same(resp, rec.recommend([h], k=10, exclude_seen=exclude))
            assert resp.model.version == version and resp.model.catalogue_size == rec.n_items
    hs = _histories(env, rec)
    batch = call(env.stub.RecommendBatch, pb.RecommendBatchRequest(
        model=ref(version), histories=[pb.History(item_ids=h) for h in hs], k=7), env.md)
    want = rec.recommend(hs, k=7, exclude_seen=False)  # one call, one forward: the same batch as the service's
    for b in range(len(hs)):
        _same(pb.RecommendResponse(recommendations=batch.results[b]), want, b)
    # the same history by catalogue index
    idx = [rec.index_of[i] for i in hs[0]]
    _same(recommend(env, indices=idx, k=10, model=ref(version)), rec.recommend([hs[0]], k=10, exclude_seen=False))


def test_serving_reproduces_the_offline_evaluation(env):
    """SASRec-CE is deterministic: serving the test users' histories gives back the stored test Recall/NDCG@20."""
    from services.recommendation.data import Dataset
    from services.recommendation.metrics import ranking_metrics

    rec = env.local("recommender", 2)
    ds = Dataset.from_bytes(env.server.app.registry.read_artifact(env.tenant_id, env.dataset_id))
    s = ds.samples("test", rec.max_history)
    hs = [[ds.item_ids[j - 1] for j in row[:n].tolist()] for row, n in zip(s.history, s.lengths, strict=True)]
    resp = call(env.stub.RecommendBatch, pb.RecommendBatchRequest(
        model=ref(2), histories=[pb.History(item_ids=h) for h in hs], k=20), env.md)
    top = torch.tensor([[it.item_index for it in r.items] for r in resp.results])
    got = ranking_metrics(top, s.target, (5, 10, 20))
    stored = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=ref(2)), metadata=env.md).version
    for k in (5, 10, 20):
        assert got[f"recall@{k}"] == pytest.approx(stored.metrics[f"test_recall_{k}"], abs=1e-9)
        assert got[f"ndcg@{k}"] == pytest.approx(stored.metrics[f"test_ndcg_{k}"], abs=1e-6)


def test_exclude_seen_removes_exactly_the_seen_items(env):
    rec = env.local("recommender", 1)
    for h in _histories(env, rec):
        seen = set(h)
        k = 8
        ex = [it.item_id for it in recommend(env, h, k=k, exclude_seen=True).recommendations.items]
        full = [it.item_id for it in recommend(env, h, k=min(k + len(seen), rec.n_items)).recommendations.items]
        assert not seen & set(ex)
        assert ex == [i for i in full if i not in seen][:k]


def test_cold_unknown_and_empty_histories(env):
    rec = env.local("recommender", 1)
    empty = recommend(env, [], k=5).recommendations
    assert empty.scored_by == pb.SCORED_BY_POPULARITY_EMPTY_HISTORY and "empty history" in empty.fallback_reason
    pop_order = torch.argsort(-rec.popularity[1:], stable=True)[:5] + 1
    assert [it.item_index for it in empty.items] == pop_order.tolist()
    ghosts = recommend(env, ["ghost-1", "ghost-2", "ghost-1"], k=5).recommendations
    assert ghosts.scored_by == pb.SCORED_BY_POPULARITY_NO_KNOWN_ITEMS and ghosts.fallback_reason
    assert list(ghosts.unknown_item_ids) == ["ghost-1", "ghost-2", "ghost-1"]
    mixed = recommend(env, ["i3", "ghost", "i7"], k=5).recommendations
    assert mixed.scored_by == pb.SCORED_BY_MODEL and not mixed.fallback_reason
    assert list(mixed.unknown_item_ids) == ["ghost"] and mixed.history_items_used == 2
    pop = recommend(env, ["i3"], k=5, model=ref(name="rec-pop")).recommendations
    assert pop.scored_by == pb.SCORED_BY_POPULARITY_MODEL


def test_bad_requests_are_invalid_argument_with_the_field(env):
    rec = env.local("recommender", 1)
    n, md, ia = rec.n_items, env.md, grpc.StatusCode.INVALID_ARGUMENT
    r = env.stub.Recommend

    def req(**kw):
        kw.setdefault("model", ref(1))
        kw.setdefault("k", 5)
        return lambda: r(pb.RecommendRequest(**kw), metadata=md)
    expect_error(req(k=0), ia, "k")
    expect_error(req(k=-3), ia, "k")
    expect_error(req(k=n + 1), ia, "k")
    expect_error(req(k=10_000), ia, "k")
    expect_error(req(history=pb.History(item_indices=[1, 0])), ia, "history.item_indices[1]",
                 "ITEM_INDEX_OUT_OF_RANGE")
    expect_error(req(history=pb.History(item_indices=[n + 1])), ia, "history.item_indices[0]")
    expect_error(req(history=pb.History(item_ids=["i1"], item_indices=[1])), ia, "history.item_ids")
    expect_error(req(history=pb.History(item_ids=["i1"] * 1001)), ia, "history.item_ids", "HISTORY_TOO_LONG")
    expect_error(req(history=pb.History(item_indices=[1] * 1001)), ia, "history.item_indices", "HISTORY_TOO_LONG")
    expect_error(req(history=pb.History(item_ids=["i1", ""])), ia, "history.item_ids[1]")
    expect_error(req(model=ref(-1)), ia, "model.version")
    expect_error(req(model=ref(name="bad name!")), ia, "model.name")
    expect_error(req(model=ref(name="recommender", alias="Not An Alias")), ia, "model.alias")
    expect_error(req(model=ref(name="never-trained")), grpc.StatusCode.FAILED_PRECONDITION,
                 reason="MODEL_NOT_REGISTERED")
    b = env.stub.RecommendBatch
    expect_error(lambda: b(pb.RecommendBatchRequest(model=ref(1), k=5), metadata=md), ia, "histories")
    expect_error(lambda: b(pb.RecommendBatchRequest(model=ref(1), k=5, histories=[
        pb.History(item_ids=["i1"]), pb.History(item_indices=[n + 5])]), metadata=md), ia,
                 "histories[1].item_indices[0]")
    # a request with a bad field costs nothing else: the model still answers
    assert recommend(env, ["i1"]).recommendations.items


def test_concurrent_requests_are_batched_and_answer_like_sequential_ones(env):
    rec = env.local("recommender", 1)
    hs = (_histories(env, rec) * 2)[:24]
    sequential = [recommend(env, h, k=6) for h in hs]
    batcher = env.servicer.batcher
    before = (batcher.batches, batcher.histories)
    out: dict[int, pb.RecommendResponse] = {}
    barrier = threading.Barrier(12)

    def client(t):
        barrier.wait()
        for i in range(t, len(hs), 12):
            out[i] = recommend(env, hs[i], k=6)
    threads = [threading.Thread(target=client, args=(t,)) for t in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, seq in enumerate(sequential):
        got, want = out[i].recommendations.items, seq.recommendations.items
        assert [x.item_id for x in got] == [x.item_id for x in want]
        assert [x.score for x in got] == pytest.approx([x.score for x in want], rel=1e-5, abs=1e-6)
    batches, n = batcher.batches - before[0], batcher.histories - before[1]
    assert n == len(hs) and batches < n  # some requests shared a forward


def test_alias_move_hot_swaps_without_failed_requests(env):
    stub, md, reg = env.stub, env.md, env.registry
    reg.SetAlias(models_pb2.SetAliasRequest(name="recommender", alias="production", version=1), metadata=md)
    req = pb.RecommendRequest(history=pb.History(item_ids=["i3", "i7"]), k=5)  # default model: recommender@production
    harness.wait_for(lambda: call(stub.Recommend, req, md).model.version == 1, timeout=30, what="v1 served")
    errors, versions, stop = [], [], threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                versions.append(stub.Recommend(req, metadata=md, timeout=30).model.version)
            except grpc.RpcError as err:
                errors.append(err)
    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for target in (2, 1, 2):
            harness.wait_for(lambda: len(versions) > 10, timeout=30, what="requests flowing")
            reg.SetAlias(models_pb2.SetAliasRequest(name="recommender", alias="production", version=target),
                         metadata=md)
            harness.wait_for(lambda v=target: versions and versions[-1] == v, timeout=30, what=f"swap to v{target}")
            n = len(versions)
            harness.wait_for(lambda n=n: len(versions) > n + 10, timeout=30, what=f"requests on v{target}")
            assert versions[-8:] == [target] * 8
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, [e.details() for e in errors[:3]]
    assert versions[0] == 1 and set(versions) == {1, 2} and env.servicer.models.swaps >= 3


# ---------------------------------------------------------------------------------------------- resume after kill -9
def test_training_killed_mid_epoch_resumes_and_matches_an_uninterrupted_run(env):
    """kill -9 the worker during epoch 2; a new worker's reaper re-queues the job, which resumes from the epoch-1
    checkpoint; per-epoch losses and final metrics equal an uninterrupted in-process run of the same job."""
    from services.common.jobcontext import InMemoryJobContext
    from services.recommendation.jobs import run_training

    params = dict(epochs=4, dim=16, batch_size=8, lr=3e-3, timesteps=200, sample_steps=10, patience=50, seed=5)
    job = env.stub.StartTrainingJob(pb.StartTrainingJobRequest(
        dataset_artifact_id=env.dataset_id, model_name="rec-resume", model_kind=pb.MODEL_KIND_PREFERDIFF,
        params=pb.TrainingParams(**params)), metadata=env.md).job

    def first_epoch():
        row = harness.job_row(env.settings, job.id)
        return row["state"] == "RUNNING" and row["checkpoint_key"] is not None
    harness.wait_for(first_epoch, timeout=60, interval=0.05, what="the first epoch's checkpoint")
    env.worker.kill9()
    row = harness.job_row(env.settings, job.id)
    assert row["state"] == "RUNNING" and row["progress"] < 0.5, row  # killed inside epoch 2, not after the run
    env.worker = start_worker(env.settings, env.log_dir)
    final = wait_job(env.jobs, env.token, job.id, timeout=120)
    assert final.state == common_pb2.JOB_STATE_SUCCEEDED and final.attempts == 2, final.error
    events = [e.event for e in env.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job.id), metadata=env.md)]
    assert any("resuming from checkpoint" in e.message for e in events)
    epochs = {int(e.metrics["epoch"]): e.metrics["loss"] for e in events if "epoch" in e.metrics}

    blob = env.server.app.registry.read_artifact(env.tenant_id, env.dataset_id)
    ctx = InMemoryJobContext(params={})
    ctx.params = {"dataset_artifact_id": ctx.add_artifact(blob), "model_name": "rec-resume",
                  "model_kind": "preferdiff", **params}
    want = run_training(ctx)
    want_losses = {int(e[2]["epoch"]): e[2]["loss"] for e in ctx.events if "epoch" in e[2]}
    assert sorted(epochs) == [1, 2, 3, 4]
    assert [epochs[i] for i in range(1, 5)] == pytest.approx([want_losses[i] for i in range(1, 5)], rel=1e-4)
    got = dict(final.result["metrics"])
    for key, value in want["metrics"].items():
        if key == "seconds_to_best":  # wall time, not a result
            continue
        assert got[key] == pytest.approx(value, abs=0.02), key


# ---------------------------------------------------------------------------------------------- predictor
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_predictor_served_by_kserve_model_server_over_oip_v2_grpc(env, tmp_path):
    """`praxon predictor recommendation` (kserve's ModelServer) on loopback, called with kserve's
    InferenceGRPCClient: the same lists as the domain Recommender. Outside a cluster the predictor wants the
    tenant's API token (tests/platform/test_predictor_access.py): every client here sends it."""
    from kserve import InferenceGRPCClient
    from kserve.protocol.infer_type import InferInput, InferRequest

    http, grpc_port = _free_port(), _free_port()
    envv = {**os.environ, **harness.settings_env(env.settings), "PYTHONPATH": str(harness.ROOT),
            "OMP_NUM_THREADS": "1"}
    log = tmp_path / "predictor.log"
    from services.common.embedded import spawn

    proc = spawn([sys.executable, "-m", "services.cli.main", "predictor", "recommendation", "--tenant",
                  env.tenant_id, "--model", "recommender:2", "--http-port", str(http), "--grpc-port",
                  str(grpc_port)], log, env=envv)
    rec = env.local("recommender", 2)
    hs = _histories(env, rec, n=4)[:4] + [[]]
    width = max(len(h) for h in hs)
    rows = [[rec.index_of[i] for i in h] + [0] * (width - len(h)) for h in hs]
    req = InferRequest(model_name="recommendation", infer_inputs=[
        InferInput("history", [len(rows), width], "INT64", [x for r in rows for x in r]),
        InferInput("k", [1], "INT32", [6]), InferInput("exclude_seen", [1], "BOOL", [True])])

    async def infer():
        client = InferenceGRPCClient(f"127.0.0.1:{grpc_port}", timeout=30)
        try:
            return await client.infer(req, headers=auth(env.token))
        finally:
            await client.close()
    try:
        def listening():
            if proc.poll() is not None:
                raise AssertionError(log.read_text()[-3000:])
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", grpc_port)) == 0
        harness.wait_for(listening, timeout=90, interval=0.3, what="the kserve ModelServer")
        resp = asyncio.run(infer())
        triton = _tritonclient_answers(http, grpc_port, rows, env.token)
    finally:
        proc.terminate()
        proc.wait(20)
    out = {o.name: o.as_numpy() for o in resp.outputs}
    want = rec.recommend(hs, k=6, exclude_seen=True)
    assert out["item_index"].tolist() == want.item_indices.tolist()
    assert out["score"].tolist() == want.scores.tolist()
    assert out["fallback"].tolist() == [False] * 4 + [True]
    assert [[x.decode() for x in row] for row in out["item_id"].tolist()] == want.ids
    params = {k: getattr(v, "string_param", v) for k, v in resp.parameters.items()}
    assert params["registry_version"] == "2" and params["model_kind"] == "sasrec_ce"
    # clients written elsewhere read the same answers and the model's metadata, over gRPC and HTTP
    for proto, (got, meta) in triton.items():
        assert got["item_index"] == want.item_indices.tolist(), proto
        assert got["score"] == want.scores.tolist(), proto
        assert got["item_id"] == want.ids, proto
        assert got["fallback"] == [False] * 4 + [True], proto
        assert meta["inputs"] == ["history", "k", "exclude_seen"], proto
        assert meta["outputs"] == {"item_index": "INT64", "score": "FP32", "item_id": "BYTES", "fallback": "BOOL"}


def _tritonclient_answers(http_port: int, grpc_port: int, rows, token: str) -> dict:
    """tritonclient's gRPC and HTTP clients against the predictor: outputs and metadata. In a process of its own:
    tritonclient's and kserve's generated OIP messages cannot share one protobuf descriptor pool."""
    import json
    import subprocess

    script = TRITON_CLIENT_SCRIPT % {"grpc": f"127.0.0.1:{grpc_port}", "http": f"127.0.0.1:{http_port}",
                                     "rows": json.dumps(rows), "token": token}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return {proto: (res["outputs"], res["meta"]) for proto, res in json.loads(out.stdout).items()}


TRITON_CLIENT_SCRIPT = """
import json
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
rows = %(rows)s
headers = {"authorization": "Bearer %(token)s"}
out = {}
for proto, mod, url in (("grpc", tg, "%(grpc)s"), ("http", th, "%(http)s")):
    client = mod.InferenceServerClient(url)
    inputs = [mod.InferInput("history", [len(rows), len(rows[0])], "INT64"), mod.InferInput("k", [1], "INT32"),
              mod.InferInput("exclude_seen", [1], "BOOL")]
    inputs[0].set_data_from_numpy(np.array(rows, dtype=np.int64))
    inputs[1].set_data_from_numpy(np.array([6], dtype=np.int32))
    inputs[2].set_data_from_numpy(np.array([True]))
    result = client.infer("recommendation", inputs, headers=headers)
    outputs = {n: result.as_numpy(n).tolist() for n in ("item_index", "score", "fallback")}
    outputs["item_id"] = [[x.decode() for x in r] for r in result.as_numpy("item_id").tolist()]
    meta = client.get_model_metadata("recommendation", headers=headers)
    if proto == "grpc":
        meta = {"inputs": [i.name for i in meta.inputs], "outputs": {o.name: o.datatype for o in meta.outputs}}
    else:
        meta = {"inputs": [i["name"] for i in meta["inputs"]],
                "outputs": {o["name"]: o["datatype"] for o in meta["outputs"]}}
    client.close()
    out[proto] = {"outputs": outputs, "meta": meta}
print(json.dumps(out))
"""


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_query_and_evaluate(env, capsys, tmp_path):
    from services.cli.main import main

    opts = ["--address", env.server.address, "--token", env.token, "--data-dir", str(tmp_path)]
    main(["recommend", "query", "i3", "ghost", "i7", "--k", "3", "--model", "recommender:2", *opts])
    out = capsys.readouterr().out
    rec = env.local("recommender", 2)
    want = rec.recommend([["i3", "ghost", "i7"]], k=3, exclude_seen=False)
    assert "recommender v2 (sasrec_ce" in out and "unknown ids (ignored): ghost" in out
    assert [line.split()[2] for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")] == want.ids[0]
    main(["recommend", "query", "--model", "recommender:1", *opts])
    assert "fallback: empty history" in capsys.readouterr().out
    main(["recommend", "evaluate", "recommender", "rec-pop", *opts])
    table = capsys.readouterr().out.splitlines()
    assert "recall@10" in table[0] and "m.ndcg@10" in table[0] and [t.split()[0:3] for t in table[2:]] == [
        ["recommender", "v2", "sasrec_ce"], ["recommender", "v1", "preferdiff"], ["rec-pop", "v1", "popularity"]]
    assert all(t.split()[3] == "user_split" for t in table[2:])
    main(["recommend", "sweep", "--dataset", env.dataset_id, "--kind", "sasrec_ce", "--grid", "dim=8,16",
          "--param", "epochs=1", "--param", "batch_size=64", *opts])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if '{"dim"' in ln]
    assert len(lines) == 2 and sum(ln.startswith(" *") for ln in lines) == 1, lines
    with pytest.raises(SystemExit, match="INVALID_INTERACTIONS"):
        bad = tmp_path / "bad.csv"
        bad.write_text("user,item,timestamp\na,b,1\na,b,1\n")
        main(["recommend", "import", "--file", str(bad), *opts])


def test_builtin_imports_with_the_same_parameters_return_the_existing_dataset(env):
    """`recommend train --builtin ...` imports on every call (each with a fresh idempotency key): the same builtin
    with the same parameters answers with the existing import job and its dataset, also when the imports arrive
    at once; other parameters import anew."""
    from concurrent.futures import ThreadPoolExecutor

    from psycopg.types.json import Jsonb

    from services.common import db
    from services.recommendation.api import IMPORT_KIND

    def start(seed, key):
        return env.stub.StartImportInteractionsJob(pb.StartImportInteractionsJobRequest(
            builtin=pb.BUILTIN_DATASET_SYNTHETIC, synthetic=pb.SyntheticOptions(**SYNTH), seed=seed,
            idempotency_key=key), metadata=env.md).job

    first = env.done["import"]  # the fixture's import: the same request
    again = [start(0, uuid.uuid4().hex) for _ in range(2)]
    assert [j.id for j in again] == [first.id] * 2
    assert wait_job(env.jobs, env.token, again[0].id).result["dataset_artifact_id"] == env.dataset_id
    with ThreadPoolExecutor(6) as pool:  # identical imports at the same moment: still one job
        racing = list(pool.map(lambda i: start(5, f"race-{i}-{uuid.uuid4().hex}"), range(6)))
    assert len({j.id for j in racing}) == 1 and racing[0].id != first.id
    done = wait_job(env.jobs, env.token, racing[0].id)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error
    with db.connect(env.settings) as conn:
        rows = conn.execute(
            "SELECT (j.params->>'seed')::int AS seed, count(DISTINCT j.id) AS jobs, count(a.id) AS datasets "
            "FROM jobs j LEFT JOIN artifacts a ON a.producing_job_id = j.id WHERE j.tenant_id = %s AND j.kind = %s "
            "AND j.params->>'builtin' = 'synthetic' AND j.params->>'protocol' = 'user_split' "
            "AND j.params->'synthetic' @> %s GROUP BY 1 ORDER BY 1", (env.tenant_id, IMPORT_KIND, Jsonb(SYNTH))).fetchall()
    assert [(r["seed"], r["jobs"], r["datasets"]) for r in rows] == [(0, 1, 1), (5, 1, 1)]


def test_protocol_import_and_sweep_through_the_api(env):
    """A leave_one_out import records its protocol; a sweep job trains each grid point as a child training job
    (ListJobs/GetJob show them with their parent; each registered its own model) and reports the table. The module's
    one worker runs the children while the sweep waits: a wait is not an attempt."""
    s, md = env.stub, env.md
    imp = wait_job(env.jobs, env.token, s.StartImportInteractionsJob(pb.StartImportInteractionsJobRequest(
        builtin=pb.BUILTIN_DATASET_SYNTHETIC, synthetic=pb.SyntheticOptions(**SYNTH),
        protocol=pb.SPLIT_PROTOCOL_LEAVE_ONE_OUT), metadata=md).job.id)
    assert imp.state == common_pb2.JOB_STATE_SUCCEEDED, imp.error
    assert imp.result["protocol"] == "leave_one_out" and imp.result["n_test_users"] == SYNTH["n_users"]
    job = wait_job(env.jobs, env.token, s.StartSweepJob(pb.StartSweepJobRequest(
        dataset_artifact_id=imp.result["dataset_artifact_id"], model_kind=pb.MODEL_KIND_SASREC_CE,
        params=pb.TrainingParams(epochs=1, batch_size=64, patience=3), metric="ndcg@10",
        grid=[pb.SweepAxis(name="dim", values=[8, 16])]), metadata=md).job.id)
    assert job.state == common_pb2.JOB_STATE_SUCCEEDED, (job.error, env.worker.log.read_text()[-3000:])
    from services.common.convert import from_struct

    result = from_struct(job.result)
    assert [r["point"]["dim"] for r in result["rows"]] == [8, 16] and result["protocol"] == "leave_one_out"
    assert result["best_point"] in [r["point"] for r in result["rows"]]
    assert all(0.0 <= r["test"]["masked_ndcg@10"] <= 1.0 for r in result["rows"])
    children = env.jobs.ListJobs(jobs_pb2.ListJobsRequest(parent_job_id=job.id), metadata=md).jobs
    assert sorted(c.id for c in children) == sorted(r["job_id"] for r in result["rows"])
    assert all(c.kind == "recommendation.train" and c.parent_job_id == job.id and c.state == common_pb2.JOB_STATE_SUCCEEDED
               for c in children)
    for i, row in enumerate(result["rows"]):
        child = env.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=row["job_id"]), metadata=md).job
        name = f"rec-sweep-{job.id.replace('-', '')[:8]}-{i}"
        assert row["state"] == "SUCCEEDED" and row["model"]["name"] == name and row["model"]["version"] == 1
        assert child.parent_job_id == job.id and [(m.name, m.version) for m in child.models] == [(name, 1)]
        assert child.params["dim"] == row["point"]["dim"] and child.params["epochs"] == 1
    assert not job.parent_job_id and job.attempts == 1
    from services.common import db

    with db.connect(env.settings) as conn:
        messages = [r["message"] for r in conn.execute("SELECT message FROM job_events WHERE job_id = %s ORDER BY seq",
                                                       (job.id,))]
    assert any(m.startswith("waiting for") for m in messages), messages  # it did wait, and came back


def test_cancelling_a_sweep_cancels_its_children(env):
    """CancelJob on a sweep whose child trains: the sweep and both children end CANCELLED, no model registered."""
    md = env.md
    job = env.stub.StartSweepJob(pb.StartSweepJobRequest(
        dataset_artifact_id=env.dataset_id, model_kind=pb.MODEL_KIND_SASREC_CE,
        params=pb.TrainingParams(epochs=500, batch_size=8, patience=500), metric="ndcg@10",
        grid=[pb.SweepAxis(name="dim", values=[8, 16])]), metadata=md).job

    def running_child():
        kids = env.jobs.ListJobs(jobs_pb2.ListJobsRequest(parent_job_id=job.id), metadata=md).jobs
        return kids if any(k.state == common_pb2.JOB_STATE_RUNNING for k in kids) else None
    kids = harness.wait_for(running_child, 120, 0.3, what="a running child of the sweep")
    assert len(kids) == 2
    env.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=md)
    assert wait_job(env.jobs, env.token, job.id).state == common_pb2.JOB_STATE_CANCELLED
    for kid in kids:
        done = wait_job(env.jobs, env.token, kid.id)
        assert done.state == common_pb2.JOB_STATE_CANCELLED and not done.models, (done, env.worker.log.read_text()[-2000:])


def test_predictor_follows_alias_moves(env):
    """The kserve predictor built from the registry for name@alias answers with the new version once the alias
    moves (the servicer's ModelCache, in the predictor's process), without a restart."""
    from kserve.protocol.infer_type import InferInput, InferRequest

    from services.recommendation.predictor import build

    alias = f"pred-{uuid.uuid4().hex[:6]}"

    def point(version):
        env.registry.SetAlias(models_pb2.SetAliasRequest(name="recommender", alias=alias, version=version),
                              metadata=env.md)
    point(1)
    pred = build(env.settings, env.tenant_id, f"recommender@{alias}")
    req = InferRequest(model_name="recommendation", infer_inputs=[
        InferInput("history", [1, 2], "INT64", [1, 2]), InferInput("k", [1], "INT32", [3])])

    def version_of(resp):
        v = resp.parameters["registry_version"]
        return getattr(v, "string_param", v)

    async def run():
        assert version_of(await pred.predict(req)) == "1"
        point(2)
        for _ in range(300):
            if version_of(await pred.predict(req)) == "2":
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the predictor kept serving version 1 after the alias moved")
    try:
        asyncio.run(run())
    finally:
        pred.pool.close()
