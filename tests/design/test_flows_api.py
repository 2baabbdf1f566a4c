"""GuidedFlowService end to end: the real gRPC server and interceptors, a `praxon worker` subprocess, PostgreSQL
and S3. Register the analytic mixture flow, guide samples toward a mode (artifacts, per-iteration statistics,
progress), cancel a running job, kill -9 the worker of a training job and of a sampling job and resume each from its
checkpoint to the result of an uninterrupted run, and bad input answered INVALID_ARGUMENT with the field."""
from __future__ import annotations

import math
import os
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch
from safetensors.torch import load as st_load

from praxon.common.v1 import common_pb2
from praxon.design.v1 import flows_pb2 as pb
from praxon.design.v1 import flows_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common import db
from tests import harness
from tests.harness import auth, rpc_error_details, wait_job


def start_worker(settings, log_dir):
    """One torch thread in the worker, as in this process (deterministic resume needs the same thread count)."""
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return harness.Worker(settings, log_dir, queues="default,training")
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


@pytest.fixture(scope="module")
def settings(settings):
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory):
    tenant, token = harness.token_for(settings, f"flows-{uuid.uuid4().hex[:6]}")
    server = harness.PlatformServer(settings, ["platform", "design"])
    log_dir = tmp_path_factory.mktemp("flows-workers")
    channel = grpc.insecure_channel(server.address)
    e = SimpleNamespace(settings=settings, server=server, tenant=tenant, token=token, md=auth(token),
                        stub=flows_pb2_grpc.GuidedFlowServiceStub(channel),
                        jobs=jobs_pb2_grpc.JobServiceStub(channel), log_dir=log_dir,
                        worker=start_worker(settings, log_dir))
    job = e.stub.StartFlowTrainingJob(pb.StartFlowTrainingJobRequest(
        name="ring", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_ANALYTIC), metadata=e.md).job
    done = wait_job(e.jobs, token, job.id, timeout=180)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error
    e.flow = done.models[0]
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _distance(x, y):
    return pb.RewardTerm(kind=pb.REWARD_KIND_DISTANCE, target=[x, y])


def test_guided_sampling_through_the_api(env):
    assert env.flow.name == "ring" and env.flow.version == 1
    job = env.stub.StartGuidedFlowSamplingJob(pb.StartGuidedFlowSamplingJobRequest(
        flow=common_pb2.ModelRef(name="ring"), reward=[_distance(4.0, 0.0)], control_cost=0.05, steps=20,
        iterations=25, num_samples=96, learning_rate=0.1, method=pb.GUIDANCE_METHOD_OC_FLOW, seed=1),
        metadata=env.md).job
    assert job.kind == "design.flows.sample"
    done = wait_job(env.jobs, env.token, job.id, timeout=240)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error
    r = done.result
    assert r["reward_after"] > r["reward_before"] + 10 and r["on_support_after"] >= 0.95
    assert len(r["per_iteration"]["reward"]) == 26
    kinds = sorted(a.content_type for a in done.artifacts)
    assert kinds == ["application/vnd.safetensors", "image/png"]
    art = next(a for a in done.artifacts if a.content_type == "application/vnd.safetensors")
    samples = st_load(env.server.app.registry.read_artifact(env.tenant, art.id))
    assert samples["samples"].shape == (96, 2)
    with db.connect(env.settings) as conn:
        n = conn.execute("SELECT count(*) AS n FROM job_events WHERE job_id = %s AND message LIKE 'iteration %%'",
                         (job.id,)).fetchone()["n"]
    assert n == 25


def _violation(call, request, md) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as err:
        call(request, metadata=md)
    code, info, bad, _ = rpc_error_details(err.value)
    return code, (bad.field_violations[0].field if bad and bad.field_violations else ""), info.reason if info else ""


def test_bad_input_is_invalid_argument_with_the_field(env):
    ring = common_pb2.ModelRef(name="ring")
    base = dict(flow=ring, reward=[_distance(4.0, 0.0)])
    S = pb.StartGuidedFlowSamplingJobRequest
    cases = [
        (S(**base, control_cost=math.nan), "control_cost"),
        (S(**base, control_cost=math.inf), "control_cost"),
        (S(**base, steps=0), "steps"),
        (S(**base, steps=-3), "steps"),
        (S(flow=ring, reward=[pb.RewardTerm(kind=pb.REWARD_KIND_UNSPECIFIED)]), "reward[0].kind"),
        (S(flow=ring, reward=[pb.RewardTerm(kind=77)]), "reward[0].kind"),
        (S(flow=ring), "reward"),
        (S(flow=ring, reward=[_distance(1.0, 2.0), pb.RewardTerm(kind=pb.REWARD_KIND_DISTANCE, target=[1.0])]),
         "reward[1].target"),
        (S(flow=ring, reward=[pb.RewardTerm(kind=pb.REWARD_KIND_PREDICTOR)]), "reward[0].predictor"),
        (S(**base, method=99), "method"),
        (S(**base, learning_rate=0.5, control_cost=4.0), "control_cost"),
        (S(reward=[_distance(4.0, 0.0)]), "flow.name"),
    ]
    for req, field in cases:
        code, got, _ = _violation(env.stub.StartGuidedFlowSamplingJob, req, env.md)
        assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, field), (req, got)
    code, _, _ = _violation(env.stub.StartGuidedFlowSamplingJob,
                            S(flow=common_pb2.ModelRef(name="no-such-flow"), reward=[_distance(0, 0)]), env.md)
    assert code == grpc.StatusCode.NOT_FOUND
    code, _, reason = _violation(env.stub.StartGuidedFlowSamplingJob, S(flow=ring, reward=[pb.RewardTerm(
        kind=pb.REWARD_KIND_PREDICTOR, predictor=ring)]), env.md)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and reason == "WRONG_MODEL_KIND"
    T = pb.StartFlowTrainingJobRequest
    for req, field in [
        (T(name="x", builtin=pb.FLOW_DATASET_GMM_2D, options=pb.FlowTrainingOptions(steps=0)), "options.steps"),
        (T(name="x", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_EFM), "energy"),
        (T(name="x", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_EFM,
           energy=pb.QuadraticEnergy(center=[1.0], beta=1.0)), "energy.center"),
        (T(name="x", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_EFM,
           energy=pb.QuadraticEnergy(center=[1.0, 0.0], beta=math.nan)), "energy.beta"),
        (T(name="x"), "dataset_artifact_id"),
        (T(name="x", dataset_artifact_id="not-a-uuid"), "dataset_artifact_id"),
        (T(name="bad name!", builtin=pb.FLOW_DATASET_GMM_2D), "name"),
        (T(name="x", builtin=pb.FLOW_DATASET_SO3_MIXTURE, method=pb.FLOW_TRAINING_METHOD_ANALYTIC), "method"),
    ]:
        code, got, _ = _violation(env.stub.StartFlowTrainingJob, req, env.md)
        assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, field), (req, got)
    code, got, _ = _violation(env.stub.StartRewardPredictorTrainingJob, pb.StartRewardPredictorTrainingJobRequest(
        name="p", builtin=pb.FLOW_DATASET_GMM_2D, options=pb.FlowTrainingOptions(learning_rate=-1)), env.md)
    assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, "options.learning_rate")


def test_a_running_sampling_job_can_be_cancelled(env):
    job = env.stub.StartGuidedFlowSamplingJob(pb.StartGuidedFlowSamplingJobRequest(
        flow=common_pb2.ModelRef(name="ring"), reward=[_distance(4.0, 0.0)], control_cost=0.05, steps=20,
        iterations=1000, num_samples=64, learning_rate=0.1), metadata=env.md).job
    harness.wait_for(lambda: harness.job_row(env.settings, job.id)["progress"] > 0, timeout=120, interval=0.1,
                     what="the first iteration")
    env.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=env.md)
    done = wait_job(env.jobs, env.token, job.id, timeout=120)
    assert done.state == common_pb2.JOB_STATE_CANCELLED and done.progress < 0.5 and not done.artifacts, (
        done.error, done.message, done.progress)


def _kill_the_worker_mid_job_and_resume(env, job_id: str, min_progress: float, first_message: str):
    """kill -9 the worker once the job has a checkpoint and min_progress, start a new one, and check the job
    succeeds on its second attempt having resumed (its first step's event is there once, not twice)."""
    def checkpointed():
        row = harness.job_row(env.settings, job_id)
        return row["state"] == "RUNNING" and row["checkpoint_key"] is not None and row["progress"] >= min_progress
    harness.wait_for(checkpointed, timeout=120, interval=0.05, what="a checkpoint")
    env.worker.kill9()
    row = harness.job_row(env.settings, job_id)
    assert row["state"] == "RUNNING" and row["progress"] < 0.95, row
    env.worker = start_worker(env.settings, env.log_dir)
    done = wait_job(env.jobs, env.token, job_id, timeout=300)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED and done.attempts == 2, done.error
    with db.connect(env.settings) as conn:
        firsts = conn.execute("SELECT count(*) AS n FROM job_events WHERE job_id = %s AND message = %s",
                              (job_id, first_message)).fetchone()["n"]
    assert firsts == 1
    return done


def test_training_killed_mid_run_resumes_to_the_weights_of_an_uninterrupted_run(env):
    from services.common.jobcontext import InMemoryJobContext
    from services.design.flows.jobs import run_train_flow

    opts = dict(steps=1200, batch_size=128, hidden=48, layers=2, num_data=1024, seed=7)
    job = env.stub.StartFlowTrainingJob(pb.StartFlowTrainingJobRequest(
        name="ring-cfm", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_CFM,
        options=pb.FlowTrainingOptions(**opts)), metadata=env.md).job
    _kill_the_worker_mid_job_and_resume(env, job.id, 0.1, "step 1/1200")
    version = env.server.app.registry.resolve(env.tenant, "ring-cfm")
    got, config = env.server.app.registry.load_weights(env.tenant, version)
    assert config["arch"] == "mlp" and version["version"] == 1

    ctx = InMemoryJobContext(params={"name": "ring-cfm", "builtin": "gmm2d", "method": "cfm", **opts},
                             kind="design.flows.train")
    want = ctx.models[run_train_flow(ctx)["model_version_id"]][1]
    for k in want:
        torch.testing.assert_close(got[k], want[k])


def test_sampling_killed_mid_run_resumes_to_the_samples_of_an_uninterrupted_run(env):
    def request(key):
        return pb.StartGuidedFlowSamplingJobRequest(
            flow=common_pb2.ModelRef(name="ring"), reward=[_distance(4.0, 0.0)], control_cost=0.05, steps=30,
            iterations=60, num_samples=1024, learning_rate=0.1, method=pb.GUIDANCE_METHOD_OC_FLOW, seed=5,
            idempotency_key=key)

    job = env.stub.StartGuidedFlowSamplingJob(request("killed"), metadata=env.md).job
    done = _kill_the_worker_mid_job_and_resume(env, job.id, 0.05, "iteration 1/60")

    straight = wait_job(env.jobs, env.token, env.stub.StartGuidedFlowSamplingJob(
        request("uninterrupted"), metadata=env.md).job.id, timeout=300)
    assert straight.state == common_pb2.JOB_STATE_SUCCEEDED and straight.attempts == 1, straight.error
    assert done.result["per_iteration"] == straight.result["per_iteration"]

    def samples(j):
        art = next(a for a in j.artifacts if a.content_type == "application/vnd.safetensors")
        return st_load(env.server.app.registry.read_artifact(env.tenant, art.id))["samples"]
    assert torch.equal(samples(done), samples(straight))


def test_cli_commands_and_demo(env, capsys):
    from services.cli.main import main
    from services.common.client import Target
    from services.design.flows import cli

    term = cli.parse_reward("log_density:4,0,-4,0/0.5@2")
    assert term.kind == pb.REWARD_KIND_LOG_DENSITY and list(term.target) == [4, 0, -4, 0]
    assert term.scale == 0.5 and term.weight == 2
    assert cli.parse_reward("predictor=prop:3@0.5").predictor.version == 3
    with pytest.raises(SystemExit):
        cli.parse_reward("magic:1")
    flags = ["--address", env.server.address, "--token", env.token]
    main(["design", "flows", "sample", *flags, "--flow", "ring:1", "--reward", "distance:0,4", "--method",
          "flowgrad", "--steps", "10", "--iterations", "3", "--num-samples", "32", "--learning-rate", "0.1"])
    out = capsys.readouterr().out
    assert "flowgrad on euclidean: reward" in out and "iteration   3" in out
    main(["design", "flows", "predictor", *flags, "--name", "first-coord", "--builtin", "gmm2d", "--steps", "50"])
    assert "train_r2=" in capsys.readouterr().out
    cli.demo(Target(env.server.address, env.token))
    out = capsys.readouterr().out
    assert "registered demo-ring-flow v1" in out and "oc_flow on euclidean" in out
