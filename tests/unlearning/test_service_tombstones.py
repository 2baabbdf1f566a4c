"""Deleted data never comes back (domain level, InMemoryJobContext): every unlearning job reads data through
data.read_dataset, which drops the dataset's tombstones; request checks shared by the service and the job."""
import hashlib

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning import data, jobs

from .helpers import ctx_with_data

TRAIN = {"kind": "logreg_l2", "mu": 0.05, "r": 1e-3, "epsilon": 1.0, "delta": 1e-5, "seed": 0, "name": "head"}


@pytest.fixture
def forgotten():
    ctx, ds, ev, ids = ctx_with_data(n=300, dim=8)
    ctx.params = dict(TRAIN, dataset_artifact_id=ds)
    v1 = jobs.run_training(ctx)["model_version_id"]
    ctx.params = {"model_version_id": v1, "forget_record_ids": ids[:10], "method": "certified_noisy_minimizer"}
    v2 = jobs.run_unlearning(ctx)["model_version_id"]
    return ctx, ds, ev, ids, v1, v2


def test_unlearning_tombstones_and_every_later_reader_drops_them(forgotten):
    ctx, ds, ev, ids, v1, v2 = forgotten
    assert ctx.forgotten_records(ds) == set(ids[:10])
    read, dropped = data.read_dataset(ctx, ds)
    assert dropped == ids[:10] and read.record_ids == ids[10:] and len(read) == read.X.shape[0] == 290
    # retraining on the same dataset: the job's reader yields exactly the remaining records
    ctx.params = dict(TRAIN, dataset_artifact_id=ds, name="retrained")
    out = jobs.run_training(ctx)
    assert out["data"] == {"n": 290, "forgotten_dropped": 10,
                           "record_ids_sha256": hashlib.sha256("\n".join(ids[10:]).encode()).hexdigest()}
    assert ctx.models[out["model_version_id"]][2]["excluded_record_ids"] == ids[:10]
    # and the audit of the unlearned version retrains its reference without them too
    ctx.params = {"model_version_id": v2, "runs": 40, "seed": 0}
    a = jobs.run_audit(ctx)
    assert a["pre_noise_distance"] <= a["sensitivity_bound"]


def test_request_checks_already_forgotten_and_stale_versions(forgotten):
    ctx, ds, ev, ids, v1, v2 = forgotten
    ctx.params = {"model_version_id": v2, "forget_record_ids": ids[5:12], "method": "certified_noisy_minimizer"}
    with pytest.raises(InvalidArgument) as e:
        jobs.run_unlearning(ctx)
    assert e.value.reason == "ALREADY_FORGOTTEN" and e.value.violations[0].field == "forget_record_ids"
    # an uncertified method on a version that still holds forgotten records cannot remove them
    ctx.params = {"model_version_id": v1, "forget_record_ids": ids[20:25], "method": "finetune", "steps": 5}
    with pytest.raises(FailedPrecondition) as e:
        jobs.run_unlearning(ctx)
    assert e.value.reason == "STALE_VERSION" and e.value.metadata["suggested_method"] == "certified_noisy_minimizer"
    # a certified method from that version converges to the retain minimizer without them: allowed, and the
    # new version records every record it no longer holds
    ctx.params["method"] = "certified_noisy_minimizer"
    out = jobs.run_unlearning(ctx)
    assert ctx.models[out["model_version_id"]][2]["excluded_record_ids"] == ids[:10] + ids[20:25]
    # auditing a version older than later deletions would compare against the wrong reference
    ctx.params = {"model_version_id": v2, "runs": 40}
    with pytest.raises(FailedPrecondition, match="audit the newest version"):
        jobs.run_audit(ctx)
    with pytest.raises(InvalidArgument) as e:
        jobs.check_forget_request("certified_noisy_minimizer", {"kind": "logreg_l2"}, ["x"], set(), {"a", "b"})
    assert e.value.reason == "UNKNOWN_RECORD_IDS"
