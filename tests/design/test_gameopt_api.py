"""DesignService's GameOpt campaigns end to end: the real gRPC server and interceptors, a `praxon worker`
subprocess, PostgreSQL and S3. Ask/tell (observe, suggest, observe again); idempotent Observe; a killed suggestion
job resumes and runs once; two tenants never see each other's campaigns; an oracle campaign runs unattended; the
report; bad input names its field."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from praxon.design.v1 import design_pb2 as pb
from praxon.design.v1 import design_pb2_grpc
from services import catalog
from services.common import db
from services.design.gameopt.space import SequenceSpace
from tests import harness
from tests.harness import auth, job_row, rpc_error_details, wait_for

QUEUES = "training"


def _wait(settings, job_id: str, timeout: float = 180) -> dict:
    row = wait_for(lambda: (r := job_row(settings, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
                   timeout, interval=0.2, what=f"job {job_id}")
    assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    return row


@pytest.fixture(scope="module")
def settings(settings):
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def tenants(settings):
    suffix = uuid.uuid4().hex[:6]
    return {"a": harness.token_for(settings, f"tenant-a-{suffix}"), "b": harness.token_for(settings, f"tenant-b-{suffix}")}


@pytest.fixture(scope="module")
def env(settings, tenants, tmp_path_factory):
    server = harness.PlatformServer(settings, ["platform", "design"])
    log_dir = tmp_path_factory.mktemp("design-workers")
    worker = harness.Worker(settings, log_dir, QUEUES)
    channel = grpc.insecure_channel(server.address)
    e = SimpleNamespace(server=server, worker=worker, channel=channel, settings=settings, log_dir=log_dir,
                        stub=design_pb2_grpc.DesignServiceStub(channel), tenants=tenants)
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _md(env, who="a"):
    return auth(env.tenants[who][1])


def _create(env, who="a", **kw) -> pb.Campaign:
    req = dict(name=f"camp-{uuid.uuid4().hex[:6]}", alphabet="ACDEFG", length=6, batch_size=4,
               direction=pb.DIRECTION_MAXIMIZE)
    req.update(kw)
    return env.stub.CreateCampaign(pb.CreateCampaignRequest(**req), metadata=_md(env, who)).campaign


def _score(seq: str) -> float:
    """A lab stand-in: an additive score with one pairwise term."""
    w = {c: i for i, c in enumerate("ACDEFG")}
    return float(sum(w[c] * (1 + (i % 2)) for i, c in enumerate(seq)) + 3.0 * (seq[0] == seq[-1]))


def _expect_invalid(call, field: str):
    with pytest.raises(grpc.RpcError) as err:
        call()
    code, _, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, err.value.details())
    assert bad.field_violations[0].field == field, (bad, field)


def test_ask_tell_round_trip_constraints_and_idempotent_observe(env):
    cons = pb.Constraints(parents=["ACDEFG"], max_edits=3, forbidden_motifs=["GG"],
                          allowed_letters=["", "", "CDE", "", "", ""])
    camp = _create(env, constraints=cons)
    space = SequenceSpace("ACDEFG", 6, tuple(cons.allowed_letters), ("ACDEFG",), 3, ("GG",))
    assert camp.constraints.max_edits == 3 and list(camp.constraints.forbidden_motifs) == ["GG"]
    assert camp.observation_count == 0 and camp.round_count == 0

    rng = np.random.default_rng(0)
    seqs = [space.decode(x) for x in space.sample_feasible(rng, 8)]
    obs = [pb.Observation(sequence=s, value=_score(s)) for s in seqs]
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=obs), metadata=_md(env))
    assert (r.inserted, r.duplicates, r.observation_count) == (8, 0, 8)
    # the same measurements again: a no-op, not a second copy
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=obs), metadata=_md(env))
    assert (r.inserted, r.duplicates, r.observation_count) == (0, 8, 8)
    # a different value for a recorded (sequence, replicate) is refused, naming the observation
    _expect_invalid(lambda: env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=seqs[0], value=-1.0)]), metadata=_md(env)), "observations[0].value")
    # a replicate is a new measurement
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=seqs[0], value=_score(seqs[0]) + 0.1, replicate=1)]), metadata=_md(env))
    assert r.inserted == 1 and r.observation_count == 9

    # ask: a suggestion job, watched to the end
    start = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
        campaign_id=camp.id, solver=pb.EQUILIBRIUM_SOLVER_HEDGE, rounds=30, games=3, seed=1), metadata=_md(env))
    assert start.round == 1 and start.job.kind == "design.gameopt.suggest"
    row = _wait(env.settings, start.job.id)
    got = env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id), metadata=_md(env))
    assert got.job.id == start.job.id and got.round == 1 and len(got.suggestions) == 4
    batch = [s.sequence for s in got.suggestions]
    assert len(set(batch)) == 4 and not set(batch) & set(seqs)
    for s in got.suggestions:
        assert not space.violations(s.sequence), s.sequence  # every constraint holds
        assert s.source == "hedge" and s.std > 0
    assert [s.ucb for s in got.suggestions] == sorted((s.ucb for s in got.suggestions), reverse=True)
    assert row["result"]["games"] == 3 and row["result"]["observations"] == 9

    # tell: the batch's measurements, linked to the job; then ask again with best response
    env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=s, value=_score(s), source_job_id=start.job.id) for s in batch]), metadata=_md(env))
    again = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
        campaign_id=camp.id, solver=pb.EQUILIBRIUM_SOLVER_BEST_RESPONSE, seed=2), metadata=_md(env))
    assert again.round == 2
    _wait(env.settings, again.job.id)
    second = env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id, job_id=again.job.id),
                                     metadata=_md(env))
    assert len(second.suggestions) == 4 and not {s.sequence for s in second.suggestions} & set(seqs + batch)
    assert all(not space.violations(s.sequence) for s in second.suggestions)
    # the first job's batch is still there, by id
    first = env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id, job_id=start.job.id),
                                    metadata=_md(env))
    assert [s.sequence for s in first.suggestions] == batch

    c = env.stub.GetCampaign(pb.GetCampaignRequest(campaign_id=camp.id), metadata=_md(env)).campaign
    assert c.observation_count == 13 and c.round_count == 2
    recorded = [_score(s) for s in seqs + batch] + [_score(seqs[0]) + 0.1]
    assert c.best.value == pytest.approx(max(recorded))

    # the report: best so far per round, and a PNG (also an artifact)
    rep = env.stub.GetCampaignReport(pb.GetCampaignReportRequest(campaign_id=camp.id), metadata=_md(env))
    assert [r.round for r in rep.rows] == [0, 1] and [r.cumulative for r in rep.rows] == [9, 13]
    assert rep.rows[1].best_so_far >= rep.rows[0].best_so_far
    assert rep.rows[1].best_in_round == pytest.approx(max(_score(s) for s in batch))
    assert rep.plot_png[:8] == b"\x89PNG\r\n\x1a\n" and rep.plot.content_type == "image/png"
    assert rep.plot.size_bytes == len(rep.plot_png) and "best so far" in rep.table

    # the same idempotency key returns the same job and round
    key = f"k-{uuid.uuid4().hex}"
    a = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(campaign_id=camp.id, solver=1, rounds=5, games=1,
                                                                 idempotency_key=key), metadata=_md(env))
    b = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(campaign_id=camp.id, solver=1, rounds=5, games=1,
                                                                 idempotency_key=key), metadata=_md(env))
    assert a.job.id == b.job.id and a.round == b.round == 3
    _wait(env.settings, a.job.id)


def test_trust_region_keeps_suggestions_near_the_best_observation(env):
    camp = _create(env)  # no parent constraint: without the trust region the whole space is open
    space = SequenceSpace("ACDEFG", 6, ("",) * 6, (), None, ())
    seqs = [space.decode(x) for x in space.sample_feasible(np.random.default_rng(3), 8)]
    env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=s, value=_score(s)) for s in seqs]), metadata=_md(env))
    best = max(seqs, key=_score)
    start = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
        campaign_id=camp.id, rounds=20, games=2, seed=0, trust_radius=1), metadata=_md(env))
    _wait(env.settings, start.job.id)
    got = env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id), metadata=_md(env))
    assert len(got.suggestions) == 4
    for s in got.suggestions:
        assert sum(a != b for a, b in zip(s.sequence, best, strict=True)) == 1, (s.sequence, best)


def test_oracle_campaign_runs_unattended_and_observations_are_written_once(env):
    camp = _create(env, alphabet="ACDEFGHI", length=8, batch_size=4,
                   oracle=pb.Oracle(kind=pb.ORACLE_KIND_EHRLICH, num_motifs=2, motif_length=2, seed=1))
    assert camp.oracle.kind == pb.ORACLE_KIND_EHRLICH and camp.oracle.quantization == 2
    for r in range(3):
        job = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
            campaign_id=camp.id, solver=pb.EQUILIBRIUM_SOLVER_BEST_RESPONSE, seed=r), metadata=_md(env)).job
        _wait(env.settings, job.id)
    c = env.stub.GetCampaign(pb.GetCampaignRequest(campaign_id=camp.id), metadata=_md(env)).campaign
    assert c.observation_count == 12 and c.round_count == 3 and 0 <= c.best.value <= 1
    # the oracle's scores are the recorded values (Observe with use_oracle agrees)
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=c.best.sequence, replicate=0)], use_oracle=True), metadata=_md(env))
    assert r.duplicates == 1 and r.values[0] == pytest.approx(c.best.value)
    rep = env.stub.GetCampaignReport(pb.GetCampaignReportRequest(campaign_id=camp.id), metadata=_md(env))
    assert [x.round for x in rep.rows] == [1, 2, 3] and [x.cumulative for x in rep.rows] == [4, 8, 12]
    best = [x.best_so_far for x in rep.rows if not np.isnan(x.best_so_far)]  # NaN: nothing measured yet
    assert all(a <= b for a, b in zip(best, best[1:], strict=False))


def test_failed_measurements_are_kept_as_such_and_learned_from(env):
    """A measurement that fails (an infeasible sequence) is stored with no value, never as 0: Observe takes it,
    the oracle reports it for its infeasible sequences, the best and the report skip it, and a suggestion job runs
    on a campaign that has some."""
    import psycopg

    from services.design.gameopt.oracles import make_oracle

    camp = _create(env)
    space = SequenceSpace("ACDEFG", 6, ("",) * 6, (), None, ())
    seqs = [space.decode(x) for x in space.sample_feasible(np.random.default_rng(5), 10)]
    obs = [pb.Observation(sequence=s, value=_score(s)) for s in seqs[:7]] + [
        pb.Observation(sequence=s, failed=True) for s in seqs[7:]]
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=obs), metadata=_md(env))
    assert r.inserted == 10 and list(r.failed) == [False] * 7 + [True] * 3 and np.isnan(r.values[7])
    with psycopg.connect(env.settings.database_url.get_secret_value()) as conn:
        stored = dict(conn.execute("SELECT sequence, value FROM design_observations WHERE campaign_id = %s",
                                   (camp.id,)).fetchall())
    assert [stored[s] for s in seqs[7:]] == [None] * 3 and stored[seqs[0]] == _score(seqs[0])
    c = env.stub.GetCampaign(pb.GetCampaignRequest(campaign_id=camp.id), metadata=_md(env)).campaign
    assert c.best.value == max(_score(s) for s in seqs[:7]) and not c.best.failed
    _expect_invalid(lambda: env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=seqs[0], value=1.0, replicate=5, failed=True)]), metadata=_md(env)),
        "observations[0].value")
    job = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(campaign_id=camp.id, rounds=20, games=2, seed=0),
                                      metadata=_md(env)).job
    assert _wait(env.settings, job.id)["result"]["observations"] == 10
    # an oracle campaign: the oracle's infeasible sequences are failed measurements, not zeros
    ocamp = _create(env, alphabet="ACDEFGHI", length=8, batch_size=4,
                    oracle=pb.Oracle(kind=pb.ORACLE_KIND_EHRLICH, num_motifs=2, motif_length=2, seed=1))
    oracle = make_oracle({"kind": "ehrlich", "num_states": 8, "length": 8, "num_motifs": 2, "motif_length": 2,
                          "quantization": 2, "seed": 1})
    X = np.random.default_rng(0).integers(0, 8, size=(200, 8))
    bad = next(x for x in X if not oracle.feasible(x[None])[0])
    good = oracle.initial_solution(1, np.random.default_rng(0))[0]
    letters = "ACDEFGHI"
    r = env.stub.Observe(pb.ObserveRequest(campaign_id=ocamp.id, use_oracle=True, observations=[
        pb.Observation(sequence="".join(letters[i] for i in x)) for x in (bad, good)]), metadata=_md(env))
    assert list(r.failed) == [True, False] and np.isnan(r.values[0]) and r.values[1] == pytest.approx(oracle(good[None])[0])


def test_killed_suggestion_job_resumes_and_runs_once(env):
    camp = _create(env, alphabet="ACDEFGHIKL", length=5, batch_size=3,
                   oracle=pb.Oracle(kind=pb.ORACLE_KIND_EXHAUSTIVE, seed=2))
    rng = np.random.default_rng(1)
    seqs = sorted({"".join(rng.choice(list("ACDEFGHIKL"), 5)) for _ in range(10)})
    env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[pb.Observation(sequence=s) for s in seqs],
                                       use_oracle=True), metadata=_md(env))
    # many checkpointed games, so the worker can be killed between two of them
    resp = env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
        campaign_id=camp.id, solver=pb.EQUILIBRIUM_SOLVER_HEDGE, rounds=60, games=12, seed=5,
        idempotency_key=f"kill-{uuid.uuid4().hex}"), metadata=_md(env))
    wait_for(lambda: job_row(env.settings, resp.job.id)["progress"] >= 0.2, 180, interval=0.05, what="games")
    env.worker.kill9()
    killed_at = job_row(env.settings, resp.job.id)["progress"]
    env.worker = harness.Worker(env.settings, env.log_dir, QUEUES)
    row = _wait(env.settings, resp.job.id, 240)
    assert row["attempts"] == 2 and killed_at < 1.0 and row["result"]["games"] == 12
    with db.connect(env.settings) as conn:
        messages = [r["message"] for r in conn.execute(
            "SELECT message FROM job_events WHERE job_id = %s ORDER BY seq", (resp.job.id,))]
        n_obs = conn.execute("SELECT count(*) AS n FROM design_observations WHERE source_job_id = %s",
                             (resp.job.id,)).fetchone()["n"]
    assert any("resuming from checkpoint" in m for m in messages)
    games = [m for m in messages if m.startswith("game ")]
    assert games[-1] == "game 12/12" and len(games) < 24  # the resumed attempt skipped the finished games
    assert n_obs == 3  # the oracle's scores of the batch were recorded once
    got = env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id, job_id=resp.job.id),
                                  metadata=_md(env))
    assert len(got.suggestions) == 3


def test_two_tenants_never_see_each_others_campaigns(env):
    mine = _create(env, "a")
    theirs = _create(env, "b", name=mine.name)  # names are per tenant
    assert theirs.id != mine.id
    for who, other in (("a", theirs), ("b", mine)):
        with pytest.raises(grpc.RpcError) as err:
            env.stub.GetCampaign(pb.GetCampaignRequest(campaign_id=other.id), metadata=_md(env, who))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as err:
            env.stub.Observe(pb.ObserveRequest(campaign_id=other.id, observations=[
                pb.Observation(sequence="AAAAAA", value=1.0)]), metadata=_md(env, who))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as err:
            env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(campaign_id=other.id), metadata=_md(env, who))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        listed = {c.id for c in env.stub.ListCampaigns(pb.ListCampaignsRequest(page_size=500),
                                                      metadata=_md(env, who)).campaigns}
        assert other.id not in listed
    with pytest.raises(grpc.RpcError) as err:
        _create(env, "a", name=mine.name)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    # paging
    seen, page = [], ""
    while True:
        r = env.stub.ListCampaigns(pb.ListCampaignsRequest(page_size=1, page_token=page), metadata=_md(env, "b"))
        seen += [c.id for c in r.campaigns]
        page = r.next_page_token
        if not page:
            break
    assert theirs.id in seen and len(seen) == len(set(seen))


def test_bad_input_names_the_field(env):
    create = lambda **kw: lambda: _create(env, **kw)  # noqa: E731
    _expect_invalid(create(length=0), "length")
    _expect_invalid(create(alphabet="AAB"), "alphabet")
    _expect_invalid(create(batch_size=0), "batch_size")
    _expect_invalid(create(name=""), "name")
    _expect_invalid(create(noise_std=-1.0), "noise_std")
    _expect_invalid(create(constraints=pb.Constraints(allowed_letters=["A"])), "constraints.allowed_letters")
    _expect_invalid(create(constraints=pb.Constraints(allowed_letters=["", "", "Z", "", "", ""])),
                    "constraints.allowed_letters[2]")
    _expect_invalid(create(constraints=pb.Constraints(parents=["ACD"])), "constraints.parents[0]")
    _expect_invalid(create(constraints=pb.Constraints(max_edits=2)), "constraints.max_edits")
    _expect_invalid(create(constraints=pb.Constraints(forbidden_motifs=["ACDEFGA"])),
                    "constraints.forbidden_motifs[0]")
    # constraints that exclude each other: the only allowed letter at site 0 is a forbidden motif
    _expect_invalid(create(constraints=pb.Constraints(allowed_letters=["A", "", "", "", "", ""],
                                                      forbidden_motifs=["A"])), "constraints")
    _expect_invalid(create(oracle=pb.Oracle(kind=pb.ORACLE_KIND_EHRLICH, num_motifs=4, motif_length=4)), "oracle")
    _expect_invalid(create(oracle=pb.Oracle(kind=99)), "oracle.kind")
    _expect_invalid(create(direction=7), "direction")

    camp = _create(env)
    observe = lambda *o, **kw: lambda: env.stub.Observe(pb.ObserveRequest(  # noqa: E731
        campaign_id=camp.id, observations=list(o), **kw), metadata=_md(env))
    _expect_invalid(observe(), "observations")
    _expect_invalid(observe(pb.Observation(sequence="ACD", value=1)), "observations[0].sequence")
    _expect_invalid(observe(pb.Observation(sequence="ACDEFG", value=1), pb.Observation(sequence="ACDEFZ", value=1)),
                    "observations[1].sequence")
    _expect_invalid(observe(pb.Observation(sequence="ACDEFG", value=float("nan"))), "observations[0].value")
    _expect_invalid(observe(pb.Observation(sequence="ACDEFG", value=1, replicate=-1)), "observations[0].replicate")
    _expect_invalid(observe(pb.Observation(sequence="ACDEFG", value=1, source_job_id="nope")),
                    "observations[0].source_job_id")
    _expect_invalid(observe(pb.Observation(sequence="ACDEFG"), use_oracle=True), "use_oracle")

    start = lambda **kw: lambda: env.stub.StartSuggestionJob(pb.StartSuggestionJobRequest(  # noqa: E731
        campaign_id=camp.id, **kw), metadata=_md(env))
    _expect_invalid(start(solver=9), "solver")
    _expect_invalid(start(kernel=9), "kernel")
    _expect_invalid(start(beta=-1.0), "beta")
    _expect_invalid(start(beta=float("inf")), "beta")
    _expect_invalid(start(eta=0.0), "eta")
    _expect_invalid(start(rounds=-3), "rounds")
    _expect_invalid(start(batch_size=5000), "batch_size")
    _expect_invalid(start(group_size=9), "group_size")
    _expect_invalid(start(trust_radius=-1), "trust_radius")
    _expect_invalid(lambda: env.stub.GetCampaign(pb.GetCampaignRequest(campaign_id="x"), metadata=_md(env)),
                    "campaign_id")
    _expect_invalid(lambda: env.stub.ListCampaigns(pb.ListCampaignsRequest(page_token="!!"), metadata=_md(env)),
                    "page_token")
    with pytest.raises(grpc.RpcError) as err:  # nothing suggested yet
        env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id), metadata=_md(env))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        env.stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=camp.id, job_id=str(uuid.uuid4())),
                                metadata=_md(env))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_cli_commands_and_demo_step(env, capsys, tmp_path):
    from services.cli.main import main
    from services.common.client import Target
    from services.design.gameopt.cli import demo

    token = env.tenants["a"][1]
    opts = ["--address", env.server.address, "--token", token]
    name = f"cli-{uuid.uuid4().hex[:6]}"
    main(["design", "gameopt", "campaign", "create", *opts, "--name", name, "--alphabet", "ACDEF", "--length", "5",
          "--batch-size", "3", "--parent", "ACDEF", "--max-edits", "2"])
    out = capsys.readouterr().out
    cid = out.split()[1]
    assert name in out and len(cid) == 36
    main(["design", "gameopt", "campaign", "observe", *opts, cid, "ACDEF=1.5", "ACDEA=0.5", "CCDEF=2.0"])
    assert "recorded 3 new" in capsys.readouterr().out
    main(["design", "gameopt", "campaign", "suggest", *opts, cid, "--solver", "best_response"])
    out = capsys.readouterr().out
    assert "3 suggestions" in out and "round 1" in out
    plot = tmp_path / "plot.png"
    main(["design", "gameopt", "campaign", "report", *opts, cid, "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "best so far" in out and plot.read_bytes()[:4] == b"\x89PNG"
    main(["design", "gameopt", "campaign", "list", *opts])
    assert cid in capsys.readouterr().out

    target = Target(env.server.address, token)
    try:
        demo(target, rounds=2)
    finally:
        target.close()
    out = capsys.readouterr().out
    assert "oracle campaign" in out and "after round 3" in out and "best so far" in out
    assert "random search with 12 evaluations on the same function" in out


def test_report_reuses_its_plot_artifact_until_the_campaign_changes(env):
    camp = _create(env)
    seqs = ["ACDEFG", "CCDEFG", "ACDEFA"]
    env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=s, value=_score(s)) for s in seqs[:2]]), metadata=_md(env))
    report = lambda: env.stub.GetCampaignReport(pb.GetCampaignReportRequest(campaign_id=camp.id),  # noqa: E731
                                                metadata=_md(env))
    first, second = report(), report()
    assert first.plot.id == second.plot.id and first.plot_png == second.plot_png  # a read writes nothing new
    assert first.plot.size_bytes == len(first.plot_png)
    env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
        pb.Observation(sequence=seqs[2], value=_score(seqs[2]))]), metadata=_md(env))
    third, fourth = report(), report()
    assert third.plot.id != first.plot.id and third.rows[-1].cumulative == 3  # a new observation: a new plot
    assert fourth.plot.id == third.plot.id and fourth.plot_png == third.plot_png
    with db.connect(env.settings) as conn:
        n = conn.execute("SELECT count(*) AS n FROM artifacts WHERE name = %s",
                         (f"campaign-{camp.id}-best-so-far.png",)).fetchone()["n"]
    assert n == 2


def _lock_waiters(settings) -> int:
    with db.connect(settings) as conn:
        return conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock'").fetchone()["n"]


@pytest.mark.parametrize("lab_value", [0.5, 0.7])
def test_observe_racing_the_oracle_hook_records_one_row(env, lab_value):
    """The oracle hook of a finishing suggestion job (its kind's on_finish) inserts (sequence, replicate 0) in the
    worker's finishing transaction while Observe records the same pair: Observe waits, then reports a duplicate
    (same value) or an OBSERVATION_CONFLICT naming the observation (another value), never an internal unique-key
    error; one row."""
    import threading

    from psycopg.types.json import Jsonb

    camp = _create(env)
    seq, other = "ACDEFG", "GFEDCA"
    with db.connect(env.settings) as conn:
        tenant = conn.execute("SELECT tenant_id FROM design_campaigns WHERE id = %s", (camp.id,)).fetchone()[
            "tenant_id"]
        # a suggestion job about to succeed, its result holding the oracle's score of `seq` (leased for an hour, so
        # the test's worker leaves it alone)
        job = conn.execute(
            "INSERT INTO jobs (tenant_id, kind, queue, state, result, lease_expires_at) VALUES "
            "(%s, 'design.gameopt.suggest', 'none', 'RUNNING', %s, now() + interval '1 hour') RETURNING id",
            (tenant, Jsonb({"oracle_observations": [{"sequence": seq, "value": 0.5}]}))).fetchone()["id"]
        conn.execute("INSERT INTO design_suggestion_jobs (job_id, campaign_id, round, observations) "
                     "VALUES (%s, %s, 1, 0)", (job, camp.id))
    waiting_before = _lock_waiters(env.settings)
    worker_tx = db.connect(env.settings)
    try:
        # the worker's finish: the terminal UPDATE, then the kind's on_finish hook in the same transaction (inserts)
        ended = worker_tx.execute("UPDATE jobs SET state = 'SUCCEEDED' WHERE id = %s RETURNING *", (job,)).fetchone()
        catalog.job_kind("design.gameopt.suggest").finish_hook()(worker_tx, ended)
        got: dict = {}

        def observe():
            try:
                got["r"] = env.stub.Observe(pb.ObserveRequest(campaign_id=camp.id, observations=[
                    pb.Observation(sequence=other, value=1.0), pb.Observation(sequence=seq, value=lab_value)]),
                    metadata=_md(env))
            except grpc.RpcError as exc:
                got["err"] = exc

        t = threading.Thread(target=observe)
        t.start()
        wait_for(lambda: _lock_waiters(env.settings) > waiting_before, 30, interval=0.05, what="Observe waiting")
        worker_tx.commit()
        t.join(30)
    finally:
        worker_tx.close()
    if lab_value == 0.5:
        assert "err" not in got, got.get("err")
        assert (got["r"].inserted, got["r"].duplicates, got["r"].observation_count) == (1, 1, 2)
    else:
        code, info, bad, _ = rpc_error_details(got["err"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "observations[1].value"
        assert info.reason == "OBSERVATION_CONFLICT"
    with db.connect(env.settings) as conn:
        rows = conn.execute("SELECT sequence, value, source_job_id FROM design_observations WHERE campaign_id = %s "
                            "ORDER BY sequence", (camp.id,)).fetchall()
    assert [(r["sequence"], r["value"]) for r in rows if r["sequence"] == seq] == [(seq, 0.5)]
    assert rows[[r["sequence"] for r in rows].index(seq)]["source_job_id"] == job
    assert len(rows) == (2 if lab_value == 0.5 else 1)
