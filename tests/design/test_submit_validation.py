"""The two findings of outside fuzzing (issue 38): values the job used to reject after the RPC said OK (the job then
FAILED with reason INTERNAL) are refused at submit, INVALID_ARGUMENT naming the field, and no job is created. Both
through the API (the request's field) and at the job store itself (the kind's params model, whoever submits)."""
from __future__ import annotations

import uuid

import grpc
import pytest

from praxon.design.v1 import crystals_pb2, crystals_pb2_grpc, design_pb2, design_pb2_grpc
from services.common import db
from services.common.errors import InvalidArgument
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness
from tests.harness import auth, rpc_error_details


@pytest.fixture(scope="module")
def server(settings):
    s = harness.PlatformServer(settings, ["platform", "design"])  # no worker: nothing may reach one
    yield s
    s.stop()


@pytest.fixture
def tenant(settings):
    return harness.token_for(settings, f"fuzz-{uuid.uuid4().hex[:6]}")


def _jobs_of(settings, tenant_id) -> int:
    with db.connect(settings) as conn:
        return conn.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s", (tenant_id,)).fetchone()["n"]


def _expect_invalid(call, field: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        call()
    code, _, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, err.value.details())
    assert [v.field for v in bad.field_violations] == [field], bad


def test_start_suggestion_job_with_a_negative_seed(server, settings, tenant):
    tenant_id, token = tenant
    with grpc.insecure_channel(server.address) as channel:
        stub = design_pb2_grpc.DesignServiceStub(channel)
        camp = stub.CreateCampaign(design_pb2.CreateCampaignRequest(
            name="fuzz", alphabet="ACDEFG", length=6, batch_size=4, direction=design_pb2.DIRECTION_MAXIMIZE),
            metadata=auth(token), timeout=30).campaign
        _expect_invalid(lambda: stub.StartSuggestionJob(design_pb2.StartSuggestionJobRequest(
            campaign_id=camp.id, seed=-1), metadata=auth(token), timeout=30), "seed")
        # the boundary: seed 0 is accepted (the job is queued; no worker runs it here)
        stub.StartSuggestionJob(design_pb2.StartSuggestionJobRequest(campaign_id=camp.id, seed=0),
                                metadata=auth(token), timeout=30)
    assert _jobs_of(settings, tenant_id) == 1


def test_start_crystal_training_job_with_a_huge_loss_weight(server, settings, tenant):
    tenant_id, token = tenant
    with grpc.insecure_channel(server.address) as channel:
        stub = crystals_pb2_grpc.CrystalServiceStub(channel)
        for weight in ("cost_symm", "cost_lattice", "cost_coord", "cost_type"):
            request = crystals_pb2.StartCrystalTrainingJobRequest(
                dataset_artifact_id=str(uuid.uuid4()), params=crystals_pb2.CrystalTrainingParams(**{weight: 1e308}))
            _expect_invalid(lambda r=request: stub.StartCrystalTrainingJob(r, metadata=auth(token), timeout=30),
                            f"params.{weight}")
    assert _jobs_of(settings, tenant_id) == 0


@pytest.mark.parametrize("kind, params, field", [
    ("design.gameopt.suggest", {"campaign_id": "c", "space": {"alphabet": "AC", "length": 2}, "batch_size": 1,
                                "seed": -1}, "seed"),
    ("design.crystals.train", {"dataset_artifact_id": str(uuid.uuid4()), "cost_symm": 1e308}, "cost_symm"),
])
def test_the_job_store_refuses_them_whoever_submits(settings, tenant, kind, params, field):
    pool = db.create_pool(settings, max_size=1)
    try:
        with pytest.raises(InvalidArgument) as err:
            JobStore(pool, make_celery(settings)).submit(tenant[0], kind, params)
    finally:
        pool.close()
    assert [v.field for v in err.value.violations] == [field]
    assert _jobs_of(settings, tenant[0]) == 0
