"""The import and training jobs through InMemoryJobContext: progress, cancellation, checkpoints, deterministic
resume, registration, and the serving-side Recommender."""
import math

import pytest
import torch
from torch.testing import assert_close

from services.common.errors import Cancelled, FailedPrecondition, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.recommendation.data import Dataset, synthetic_interactions
from services.recommendation.jobs import run_import, run_training
from services.recommendation.recommender import load_recommender

SMALL = dict(n_users=150, n_items=40, n_clusters=4, min_len=5, max_len=9, synthetic_seed=1)
FAST = dict(dim=16, batch_size=64, lr=3e-3, timesteps=200, sample_steps=10)


@pytest.fixture(scope="module")
def dataset_blob():
    ctx = InMemoryJobContext(params={"builtin": "synthetic", "seed": 0, "synthetic": SMALL})
    out = run_import(ctx)
    return ctx.artifacts[out["dataset_artifact_id"]][1]


def ctx_with(blob, **params):
    ctx = InMemoryJobContext(params={})
    aid = ctx.add_artifact(blob, "ds")
    ctx.params = {"dataset_artifact_id": aid, **params}
    return ctx


def test_import_csv_upload_and_its_row_level_errors():
    ctx = InMemoryJobContext(params={})
    rows = "\n".join(f"u{i % 7},i{i % 5},{i}" for i in range(60))
    ctx.params = {"artifact_id": ctx.add_artifact(f"user,item,timestamp\n{rows}\n".encode()), "seed": 2}
    out = run_import(ctx)
    assert out["n_users"] == 7 and out["n_items"] == 5 and out["n_interactions"] == 60
    name, blob, ctype, meta = ctx.artifacts[out["dataset_artifact_id"]]
    assert "safetensors" in ctype and meta["n_interactions"] == 60
    ds = Dataset.from_bytes(blob)
    assert sorted(ds.record_id.tolist()) == list(range(60))
    assert ctx.events[-1][0] == 1.0

    bad = InMemoryJobContext(params={})
    bad.params = {"artifact_id": bad.add_artifact(b"user,item,timestamp\na,b,1\na,b,1\nc,d,??\n")}
    with pytest.raises(InvalidArgument) as e:
        run_import(bad)
    assert [v.field for v in e.value.violations] == ["rows[2].timestamp", "rows[1]"]
    with pytest.raises(InvalidArgument) as e:
        run_import(InMemoryJobContext(params={"builtin": "ml-1m"}))
    assert e.value.violations[0].field == "params.builtin"
    with pytest.raises(InvalidArgument):
        run_import(InMemoryJobContext(params={}))


def test_training_params_are_validated(dataset_blob):
    with pytest.raises(InvalidArgument) as e:
        run_training(ctx_with(dataset_blob, model_kind="bert4rec", lr=-1.0, epoch=3))
    got = {v.field for v in e.value.violations}
    assert got == {"params.model_kind", "params.lr", "params.epoch"}
    with pytest.raises(InvalidArgument) as e:
        run_training(InMemoryJobContext(params={"model_kind": "preferdiff"}))
    assert e.value.violations[0].field == "params.dataset_artifact_id"


def test_popularity_job_registers_counts_and_serves(dataset_blob):
    ctx = ctx_with(dataset_blob, model_kind="popularity", model_name="pop")
    out = run_training(ctx)
    info, tensors, config, lineage = ctx.models[out["model_version_id"]]
    assert info.name == "pop" and lineage["kind"] == "recommendation" and config["model_kind"] == "popularity"
    assert 0.0 <= out["metrics"]["test_ndcg_10"] <= 1.0 and set(tensors) == {"popularity"}
    rec = load_recommender(tensors, config)
    r = rec.recommend([["i3"], []], k=5, exclude_seen=False)
    assert r.ids[0] == r.ids[1]  # popularity ignores the history
    assert r.scores[0].tolist() == sorted(r.scores[0].tolist(), reverse=True)
    full = rec.recommend([["i3", "i5"]], k=rec.n_items, exclude_seen=True)  # only n - 2 items are left
    assert full.ids[0][-2:] == [None, None] and full.item_indices[0, -2:].tolist() == [-1, -1]
    assert torch.isinf(full.scores[0, -2:]).all() and None not in full.ids[0][:-2]
    assert not {"i3", "i5"} & set(full.ids[0])


def run_once(blob, kind, epochs, **extra):
    params = {"model_kind": kind, "epochs": epochs, "patience": 50, "seed": 3, **FAST, **extra}
    ctx = ctx_with(blob, **params)
    out = run_training(ctx)
    return ctx, out


class CrashAfter(InMemoryJobContext):
    """Simulates a worker killed right after the n-th epoch's checkpoint."""

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = n

    def progress(self, fraction, message="", **metrics):
        super().progress(fraction, message, **metrics)
        if len(epoch_events(self)) >= self.n:
            raise RuntimeError("worker killed")


def epoch_events(ctx):
    """The events of whole epochs (they carry the epoch's metrics), not those inside an epoch (batches, ETA)."""
    return [e for e in ctx.events if "epoch" in e[2]]


@pytest.mark.parametrize("kind", ["preferdiff", "sasrec_ce"])
def test_resume_after_kill_equals_an_uninterrupted_run(dataset_blob, kind):
    full_ctx, full = run_once(dataset_blob, kind, epochs=4)
    _, full_tensors, _, _ = full_ctx.models[full["model_version_id"]]

    crash = CrashAfter(2, params={})
    crash.params = {"dataset_artifact_id": crash.add_artifact(dataset_blob), "model_kind": kind, "epochs": 4,
                    "patience": 50, "seed": 3, **FAST}
    with pytest.raises(RuntimeError, match="worker killed"):
        run_training(crash)
    assert crash.checkpoints_saved == 2 and not crash.models

    resumed = InMemoryJobContext(params=dict(crash.params), checkpoint=crash.checkpoint)
    resumed.artifacts = dict(crash.artifacts)
    out = run_training(resumed)
    assert [e[2]["epoch"] for e in epoch_events(resumed)] == [3.0, 4.0]  # only the missing epochs ran
    timing = {"seconds_to_best"}
    assert {k: v for k, v in out["metrics"].items() if k not in timing} == \
        {k: v for k, v in full["metrics"].items() if k not in timing}
    assert "version" not in out  # assigned when the job succeeds, not known to the job
    _, tensors, _, _ = resumed.models[out["model_version_id"]]
    assert tensors.keys() == full_tensors.keys()
    for k in tensors:
        assert_close(tensors[k], full_tensors[k], rtol=0, atol=0)
    losses_full = [e[2]["loss"] for e in epoch_events(full_ctx)]
    losses_resumed = [e[2]["loss"] for e in epoch_events(crash)] + [e[2]["loss"] for e in epoch_events(resumed)]
    assert_close(torch.tensor(losses_resumed), torch.tensor(losses_full), rtol=0, atol=0)


def test_checkpoint_from_other_params_is_refused(dataset_blob):
    crash = CrashAfter(1, params={})
    crash.params = {"dataset_artifact_id": crash.add_artifact(dataset_blob), "model_kind": "dreamrec",
                    "epochs": 3, **FAST}
    with pytest.raises(RuntimeError):
        run_training(crash)
    other = InMemoryJobContext(params={**crash.params, "lr": 1e-2}, checkpoint=crash.checkpoint)
    other.artifacts = dict(crash.artifacts)
    with pytest.raises(FailedPrecondition):
        run_training(other)


def test_cancellation_between_epochs_keeps_the_checkpoint(dataset_blob):
    ctx = ctx_with(dataset_blob, model_kind="dreamrec", epochs=5, **FAST)
    ctx.cancel_after_progress = 1
    with pytest.raises(Cancelled):
        run_training(ctx)
    assert ctx.checkpoints_saved == 1 and len(ctx.events) == 1 and not ctx.models
    state = ctx.load_checkpoint()["state"]
    assert state["epoch"] == 1 and state["config"]["lam"] == 1.0  # dreamrec is lam = 1
    assert state["config"]["loss_type"] == "mse"  # with DreamRec's own error


def test_early_stopping_on_a_flat_validation_curve(dataset_blob):
    # lr so small that nothing changes: validation Recall@5 never improves after epoch 1
    ctx, out = run_once(dataset_blob, "preferdiff", epochs=10, **{"lr": 1e-12, "patience": 2})
    assert out["best_epoch"] == 1 and out["epochs_run"] == 3
    assert "early stop" in ctx.events[-2][1]
    for frac, _msg, metrics in ctx.events[:-1]:
        assert {"loss", "valid_recall_5"} <= metrics.keys() and 0 < frac <= 1


def test_registered_preferdiff_scores_new_histories(dataset_blob):
    ctx, out = run_once(dataset_blob, "preferdiff", epochs=2)
    tensors, config = ctx.load_model(out["model_version_id"])
    rec = load_recommender(tensors, config)
    ds = Dataset.from_bytes(dataset_blob)
    known = ds.item_ids[:3]
    r = rec.recommend([known, [], ["nope", "never"], known + ["nope"]], k=7, exclude_seen=True)
    assert r.scores.shape == (4, 7) and r.item_indices.shape == (4, 7)
    assert r.fallback[0] is None and r.fallback[3] is None
    assert "empty history" in r.fallback[1] and "no known items" in r.fallback[2]
    assert r.unknown_items == [[], [], ["nope", "never"], ["nope"]]
    assert not set(known) & set(r.ids[0])  # seen items excluded
    assert r.ids[0] == r.ids[3]  # unknown ids are ignored, not fatal
    assert r.ids[1] == r.ids[2]  # both popularity
    again = rec.recommend([known], k=7, exclude_seen=True)  # deterministic, independent of the batch
    assert again.ids[0] == r.ids[0]
    assert_close(again.scores[0], r.scores[0])
    with_seen = rec.recommend([known], k=rec.n_items, exclude_seen=False)
    assert sorted(with_seen.ids[0]) == sorted(ds.item_ids)
    for bad_k in (0, rec.n_items + 1, 2.5):
        with pytest.raises(InvalidArgument) as e:
            rec.recommend([known], k=bad_k)
        assert e.value.violations[0].field == "k"
    with pytest.raises(InvalidArgument):
        rec.recommend([[None]], k=3)
    with pytest.raises(InvalidArgument):
        load_recommender(tensors, {"format": "something else"})


def test_synthetic_builtin_knobs_are_checked():
    with pytest.raises(InvalidArgument) as e:
        run_import(InMemoryJobContext(params={"builtin": "synthetic", "synthetic": {"noise": 3}}))
    assert e.value.violations[0].field == "params.synthetic.noise"
    assert math.isfinite(len(synthetic_interactions(n_users=10, n_items=6, successors=3)))


def test_import_builtin_movielens():
    ctx = InMemoryJobContext(params={"builtin": "ml-100k", "seed": 0})
    out = run_import(ctx)
    assert (out["n_users"], out["n_items"], out["n_interactions"]) == (943, 1682, 100_000)
    ds = Dataset.from_bytes(ctx.artifacts[out["dataset_artifact_id"]][1])
    assert ds.source == "ml-100k" and len(ds.samples("test")) == out["n_test_users"]


def test_leave_one_out_import_of_movielens_reproduces_the_protocol():
    """RecBole's protocol: every user; per user (sorted by RecBole's time key, stable), the last item is the test target and the
    one before it the validation target; every earlier next item trains: 943 test users, 97,171 training samples."""
    import numpy as np

    from services.recommendation.data import load_movielens_100k, recbole_time_key

    ctx = InMemoryJobContext(params={"builtin": "ml-100k", "protocol": "leave_one_out"})
    out = run_import(ctx)
    assert out["protocol"] == "leave_one_out" and out["n_test_users"] == 943 and out["n_train_samples"] == 97_171
    ds = Dataset.from_bytes(ctx.artifacts[out["dataset_artifact_id"]][1])
    assert ds.protocol == "leave_one_out"
    train, valid, test = ds.samples("train"), ds.samples("valid", with_seen=True), ds.samples("test", with_seen=True)
    assert (len(train), len(valid), len(test)) == (97_171, 943, 943)
    df = load_movielens_100k()
    # stable sort by RecBole's time key (its float32 normalised timestamp: tests/recommendation/test_rec_data.py)
    order = np.lexsort((df["record_id"].to_numpy(), recbole_time_key(df["timestamp"].to_numpy())))
    by_user = df.iloc[order].groupby("user", sort=False)["item"].apply(list)
    for j in range(0, 943, 37):
        seq = by_user[ds.user_ids[int(test.user[j])]]
        assert ds.item_ids[int(test.target[j]) - 1] == seq[-1]
        assert ds.item_ids[int(valid.target[j]) - 1] == seq[-2]
        # the history is the last 10 items before the target; `seen` is every earlier item (masked evaluation)
        n = int(test.lengths[j])
        assert [ds.item_ids[int(x) - 1] for x in test.history[j, :n]] == seq[-1 - n:-1] and n == min(10, len(seq) - 1)
        assert sorted(ds.item_ids[int(x) - 1] for x in test.seen[j] if x > 0) == sorted(seq[:-1])
    # no training target is a user's validation or test position
    assert int(train.target_record_id.numel()) == len(set(train.target_record_id.tolist()))
    held_out = set(valid.target_record_id.tolist()) | set(test.target_record_id.tolist())
    assert not held_out & set(train.target_record_id.tolist())


def test_every_prefix_and_one_sample_per_user_training_samples(dataset_blob):
    ds = Dataset.from_bytes(dataset_blob)
    every, last = ds.samples("train", train_samples="every_prefix"), ds.samples("train", train_samples="last")
    assert len(last) == len(set(every.user.tolist())) and len(every) > 3 * len(last)
    # "last": each training user's last item given the items before it (the official PreferDiff trainer)
    for j in range(len(last)):
        u = int(last.user[j])
        assert int(last.target[j]) == int(ds.inter_item[ds.inter_user == u][-1])


def test_metrics_report_protocol_and_both_masked_and_unmasked(dataset_blob):
    ctx, out = run_once(dataset_blob, "sasrec_ce", epochs=2, dropout=0.1, batch_size=64, lr=3e-3)
    assert out["protocol"] == "user_split"
    m = out["metrics"]
    for k in ("recall_10", "ndcg_10"):
        assert 0.0 <= m[f"test_{k}"] <= 1.0 and f"test_masked_{k}" in m
    _, _, config, _ = ctx.models[out["model_version_id"]]
    assert config["protocol"] == "user_split" and config["train"]["early_stop_metric"] == "ndcg@10"


def test_sweep_job_runs_each_point_as_a_child_training_job(dataset_blob):
    """Each grid point is a child recommendation.train job (run inline by InMemoryJobContext) that registers its
    own model; a point whose child fails (device "cuda" on a worker without a GPU) is a row with the child's
    reason, not a failed sweep; the best point is chosen on validation among the points that trained; a re-run of
    the parent (as after each wait in the worker) starts no second child."""
    from services.recommendation.jobs import run_sweep
    from services.recommendation.params import TrainParams
    from services.recommendation.training import fit

    base = {"model_kind": "sasrec_ce", "epochs": 1, "patience": 5, "model_name": "swp", "dim": 16, "batch_size": 64,
            "lr": 3e-3}
    ctx = ctx_with(dataset_blob, base=base, grid={"dim": [8, 16], "device": ["cpu", "cuda"]}, metric="ndcg@10")
    out = run_sweep(ctx)
    points = [{"dim": d, "device": v} for d in (8, 16) for v in ("cpu", "cuda")]
    assert [r["point"] for r in out["rows"]] == points
    assert list(ctx.children) == [f"point-{i}" for i in range(4)]
    assert [r["job_id"] for r in out["rows"]] == [c["job_id"] for c in ctx.children.values()]
    assert {c["kind"] for c in ctx.children.values()} == {"recommendation.train"}
    gpu = torch.cuda.is_available()
    for i, r in enumerate(out["rows"]):
        if r["point"]["device"] == "cuda" and not gpu:
            assert r["state"] == "FAILED" and r["error"]["reason"] == "NO_GPU" and r["test"] is None, r
            assert r["model"] is None
        else:
            assert r["state"] == "SUCCEEDED" and r["model"]["name"] == f"swp-{i}", r
            assert ctx.models[r["model"]["model_version_id"]][0].name == f"swp-{i}"
            assert r["epochs_run"] == 1 and r["seconds"] > 0
    assert sorted(info.name for info, *_ in ctx.models.values()) == [
        f"swp-{i}" for i, pt in enumerate(points) if gpu or pt["device"] == "cpu"]
    trained = [r for r in out["rows"] if r["state"] == "SUCCEEDED"]
    best = max(trained, key=lambda r: r["valid"]["ndcg@10"])
    assert out["best_point"] == best["point"] and out["best_test"] == best["test"]["ndcg@10"]
    assert out["best_job_id"] == best["job_id"] and out["protocol"] == "user_split"
    # the child trained exactly base + point: the same metrics as that configuration trained directly
    direct = fit(TrainParams(**{**base, "dim": 8, "device": "cpu"}), Dataset.from_bytes(dataset_blob))
    assert out["rows"][0]["test"] == pytest.approx(direct.test_metrics)
    assert out["rows"][0]["valid"] == pytest.approx(direct.valid_metrics)
    again = run_sweep(ctx)  # the parent run again: the same children, no new training
    assert len(ctx.children) == 4 and again["rows"] == out["rows"]
    with pytest.raises(InvalidArgument) as e:
        run_sweep(InMemoryJobContext(params={"dataset_artifact_id": "x", "grid": {"dim": [15]},
                                             "base": {"heads": 2}}))
    assert e.value.violations[0].field == "params.base.dim"


def test_training_shows_its_eta_from_the_first_batches(dataset_blob):
    """Issue 39: the time left is known after the first batches, not after the first epoch (43 minutes for PreferDiff
    at its paper settings on two cores): an event after FIRST_REPORT_BATCHES batches of epoch 1 carries eta_s, so
    does every epoch's event (0 after the last); timing the validation probe leaves training unchanged."""
    from praxon.common.v1 import common_pb2
    from services.common.client import progress_line
    from services.recommendation.params import TrainParams
    from services.recommendation.training import TrainRun, fit

    params = dict(model_kind="preferdiff", epochs=2, seed=3, **{**FAST, "batch_size": 16})
    ctx = ctx_with(dataset_blob, **params)
    out = run_training(ctx)
    first_fraction, first_message, first_metrics = ctx.events[0]
    n_batches = int(first_message.rpartition("/")[2])
    assert first_message == f"epoch 1/2: batch {TrainRun.FIRST_REPORT_BATCHES}/{n_batches}" and n_batches > 3
    assert first_metrics["eta_s"] > 0 and 0 < first_fraction < 0.99 / 2
    epoch_events = [(m, x) for _, m, x in ctx.events if m.startswith("epoch") and ": batch" not in m]
    assert [m for m, _ in epoch_events] == ["epoch 1/2", "epoch 2/2"]
    assert epoch_events[0][1]["eta_s"] > 0 and epoch_events[1][1]["eta_s"] == 0
    # the CLI's progress bar shows it
    event = common_pb2.JobEvent(progress=first_fraction, message=first_message, state=common_pb2.JOB_STATE_RUNNING,
                                metrics={"eta_s": 3725.0, "loss": 1.5})
    assert "ETA 1h02m loss=1.5" in progress_line(event)
    # the same training as without a job (no events, no probe)
    ds = Dataset.from_bytes(dataset_blob)
    direct = fit(TrainParams(**params, dataset_artifact_id="x"), ds)
    assert out["metrics"]["test_ndcg_10"] == direct.test_metrics["ndcg@10"]
    assert out["metrics"]["valid_recall_5"] == direct.valid_metrics["recall@5"]
