"""CrystalService end to end: the real gRPC server and interceptors, `praxon worker` subprocesses, PostgreSQL and
S3. Import (built-in set; uploaded CIFs, with a malformed file named in the job's error), train, generate in the
space group asked for, read the crystal set and a CIF; bad requests are INVALID_ARGUMENT naming the field; a
generation job whose worker is killed mid-run resumes and writes each crystal once."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import grpc
import pytest

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.design.v1 import crystals_pb2 as pb
from praxon.design.v1 import crystals_pb2_grpc
from services.common import db
from tests import harness
from tests.harness import auth, job_row, rpc_error_details, wait_for

QUEUES = "default,training"
TRAIN = pb.CrystalTrainingParams(steps=40, batch_size=16, hidden=16, layers=1, timesteps=30, lr=2e-3,
                                 checkpoint_every=20)
NACL = (b"data_NaCl\n_symmetry_space_group_name_H-M 'P 1'\n_cell_length_a 5.64\n_cell_length_b 5.64\n"
        b"_cell_length_c 5.64\n_cell_angle_alpha 90\n_cell_angle_beta 90\n_cell_angle_gamma 90\n"
        b"_symmetry_Int_Tables_number 1\nloop_\n _symmetry_equiv_pos_as_xyz\n  'x, y, z'\nloop_\n"
        b" _atom_site_label\n _atom_site_type_symbol\n _atom_site_fract_x\n _atom_site_fract_y\n"
        b" _atom_site_fract_z\n _atom_site_occupancy\n"
        b"  Na1 Na 0 0 0 1\n  Na2 Na 0 0.5 0.5 1\n  Na3 Na 0.5 0 0.5 1\n  Na4 Na 0.5 0.5 0 1\n"
        b"  Cl1 Cl 0.5 0.5 0.5 1\n  Cl2 Cl 0.5 0 0 1\n  Cl3 Cl 0 0.5 0 1\n  Cl4 Cl 0 0 0.5 1\n")


def _wait(settings, job_id: str, timeout: float = 240, state: str = "SUCCEEDED") -> dict:
    row = wait_for(lambda: (r := job_row(settings, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
                   timeout, interval=0.2, what=f"job {job_id}")
    assert row["state"] == state, (row["error_reason"], row["error_message"])
    return row


def _upload(channel, token, name, data, content_type="chemical/x-cif") -> str:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    req = artifacts_pb2.UploadArtifactRequest(name=name, content_type=content_type, chunk=data)
    return stub.UploadArtifact(iter([req]), metadata=auth(token)).artifact.id


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
    worker = harness.Worker(settings, tmp_path_factory.mktemp("crystal-workers"), QUEUES)
    channel = grpc.insecure_channel(server.address)
    tenant, token = tenants["a"]
    stub = crystals_pb2_grpc.CrystalServiceStub(channel)
    imp = stub.StartImportCrystalsJob(pb.StartImportCrystalsJobRequest(builtin=True), metadata=auth(token)).job
    imported = _wait(settings, imp.id)["result"]
    ds = imported["dataset_artifact_id"]
    # the built-in set is real structures, with where each came from
    assert imported["n_real"] == imported["n_crystals"] >= 350 and imported["n_generated"] == 0
    assert imported["provenance"]["aflow"]["count"] >= 200
    name = f"symmcd-{uuid.uuid4().hex[:6]}"
    job = stub.StartCrystalTrainingJob(pb.StartCrystalTrainingJobRequest(dataset_artifact_id=ds, model_name=name,
                                                                          params=TRAIN), metadata=auth(token)).job
    row = _wait(settings, job.id)
    e = SimpleNamespace(server=server, worker=worker, channel=channel, stub=stub, tenant=tenant, token=token, ds=ds,
                        name=name, mv=row["result"]["model_version_id"], log_dir=worker.log.parent, settings=settings)
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _error(call, req, token):
    with pytest.raises(grpc.RpcError) as err:
        call(req, metadata=auth(token))
    code, info, bad, _ = rpc_error_details(err.value)
    return code, (bad.field_violations[0].field if bad and bad.field_violations else None), info


def test_generate_in_the_requested_group_and_read_the_set(env, settings):
    resp = env.stub.StartCrystalGenerationJob(pb.StartCrystalGenerationJobRequest(
        model=common_pb2.ModelRef(name=env.name), space_group=225, num_samples=4, batch_size=2,
        atom_count_range=pb.AtomCountRange(min=1, max=24), seed=1, sampling_steps=10, max_retries=2),
        metadata=auth(env.token))
    assert resp.job.kind == "design.crystals.generate"
    row = _wait(settings, resp.job.id)
    assert row["params"]["sampling_steps"] == 10 and row["params"]["max_retries"] == 2  # mapped to the job
    assert row["result"]["summary"]["sampling_steps"] == 10  # and used: 10 of the model's T=30 timesteps
    cs = env.stub.GetCrystalSet(pb.GetCrystalSetRequest(job_id=resp.job.id), metadata=auth(env.token)).crystal_set
    assert len(cs.rows) == 4 and cs.summary.n_requested == 4 and cs.summary.method == "symmcd"
    assert all(r.requested_space_group == 225 and r.invariant and 1 <= r.n_atoms <= 24 for r in cs.rows)
    assert all(1 <= r.draws <= 3 for r in cs.rows)  # the re-draw record reaches the API
    assert cs.summary.extra_draws == sum(r.draws - 1 for r in cs.rows)
    assert cs.summary.first_draw_space_group_match_rate == pytest.approx(
        sum(r.first_draw_space_group_match for r in cs.rows) / 4)
    # the CIFs are this job's artifacts, committed with it
    with db.connect(settings) as conn:
        arts = conn.execute("SELECT id, content_type FROM artifacts WHERE producing_job_id = %s",
                            (resp.job.id,)).fetchall()
    cif_ids = {str(a["id"]) for a in arts if a["content_type"] == "chemical/x-cif"}
    assert cif_ids == {r.cif_artifact_id for r in cs.rows}
    assert row["result"]["summary"]["n_generated"] == 4
    # another tenant sees neither the job nor its set
    with pytest.raises(grpc.RpcError) as err:
        env.stub.GetCrystalSet(pb.GetCrystalSetRequest(job_id=resp.job.id), metadata=auth(
            harness.token_for(settings, f"other-{uuid.uuid4().hex[:6]}")[1]))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_fixed_formula_and_the_group_answers_reach_the_api(env, settings):
    resp = env.stub.StartCrystalGenerationJob(pb.StartCrystalGenerationJobRequest(
        model=common_pb2.ModelRef(name=env.name), space_group_distribution=[
            pb.SpaceGroupWeight(space_group=225, weight=1), pb.SpaceGroupWeight(space_group=221, weight=1)],
        num_samples=4, batch_size=4, formula="NaCl", require_valid_composition=True, max_retries=1,
        atom_count_range=pb.AtomCountRange(min=1, max=16), seed=2), metadata=auth(env.token))
    row = _wait(settings, resp.job.id)
    assert row["params"]["formula"] == "NaCl" and row["params"]["require_valid_composition"] is True
    cs = env.stub.GetCrystalSet(pb.GetCrystalSetRequest(job_id=resp.job.id), metadata=auth(env.token)).crystal_set
    assert len(cs.rows) == 4 and all(r.formula == "NaCl" and not r.reason for r in cs.rows)
    assert {g.space_group for g in cs.summary.groups} <= {225, 221} and sum(g.requested for g in cs.summary.groups) == 4
    assert cs.summary.first_draw_compositional_validity == pytest.approx(
        sum(r.first_draw_compositionally_valid for r in cs.rows) / 4)


def test_uploaded_cifs_import_and_a_malformed_file_is_named(env, settings):
    good = _upload(env.channel, env.token, "nacl.cif", NACL)
    job = env.stub.StartImportCrystalsJob(pb.StartImportCrystalsJobRequest(artifact_ids=[good]),
                                          metadata=auth(env.token)).job
    res = _wait(settings, job.id)["result"]
    assert res["n_crystals"] == 1
    bad = _upload(env.channel, env.token, "broken.cif", b"data_broken\n_cell_length_a not-a-number\n")
    job = env.stub.StartImportCrystalsJob(pb.StartImportCrystalsJobRequest(artifact_ids=[good, bad]),
                                          metadata=auth(env.token)).job
    row = _wait(settings, job.id, state="FAILED")
    assert row["error_reason"] == "INVALID_CIF" and "artifact_ids[1]" in row["error_message"]
    assert "broken.cif" in row["error_message"] and "unparsable" in row["error_message"]
    with db.connect(settings) as conn:
        n = conn.execute("SELECT count(*) AS n FROM artifacts WHERE producing_job_id = %s", (job.id,)).fetchone()["n"]
    assert n == 0  # nothing half-stored


@pytest.mark.parametrize("fields,field", [
    ({"space_group": 231}, "space_group"),
    ({"space_group": 225, "atom_count_range": pb.AtomCountRange(min=1, max=3)}, "atom_count_range"),
    ({"space_group_distribution": [pb.SpaceGroupWeight(space_group=0, weight=1)]},
     "space_group_distribution[0].space_group"),
    ({"space_group_distribution": [pb.SpaceGroupWeight(space_group=14, weight=-1)]},
     "space_group_distribution[0].weight"),
    ({"composition_hints": ["Qq"]}, "composition_hints"),
    ({"num_samples": 0}, "num_samples"),
    ({"atom_count_range": pb.AtomCountRange(min=5, max=2)}, "atom_count_range.max"),
    ({"method": pb.CRYSTAL_GENERATION_METHOD_PYXTAL_RANDOM}, "reference_dataset_artifact_id"),
    ({"sampling_steps": 2001}, "sampling_steps"),
    ({"sampling_steps": -1}, "sampling_steps"),
    ({"sampling_steps": 31}, "sampling_steps"),  # more than the model's T = 30
    ({"max_retries": 11}, "max_retries"),
    ({"formula": "NaCl0.5"}, "formula"),
    ({"formula": "CaTiO3", "space_group": 225, "atom_count_range": pb.AtomCountRange(min=1, max=10)}, "formula"),
])
def test_bad_generation_requests_name_the_field(env, fields, field):
    req = dict({"model": common_pb2.ModelRef(name=env.name), "num_samples": 2}, **fields)
    code, got, _ = _error(env.stub.StartCrystalGenerationJob, pb.StartCrystalGenerationJobRequest(**req), env.token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and got == field


def test_bad_import_and_training_requests(env):
    code, got, _ = _error(env.stub.StartImportCrystalsJob, pb.StartImportCrystalsJobRequest(), env.token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and got == "artifact_ids"
    code, got, _ = _error(env.stub.StartImportCrystalsJob, pb.StartImportCrystalsJobRequest(artifact_ids=["x"]),
                          env.token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and got == "artifact_ids[0]"
    code, got, _ = _error(env.stub.StartCrystalTrainingJob, pb.StartCrystalTrainingJobRequest(
        dataset_artifact_id=env.ds, params=pb.CrystalTrainingParams(steps=0)), env.token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and got == "params.steps"
    code, got, _ = _error(env.stub.StartCrystalTrainingJob, pb.StartCrystalTrainingJobRequest(
        dataset_artifact_id=str(uuid.uuid4())), env.token)
    assert code == grpc.StatusCode.NOT_FOUND
    code, _, _ = _error(env.stub.StartCrystalGenerationJob, pb.StartCrystalGenerationJobRequest(
        model=common_pb2.ModelRef(name="no-such-model"), num_samples=1), env.token)
    assert code == grpc.StatusCode.NOT_FOUND


def test_killed_generation_job_resumes_and_writes_each_crystal_once(env, settings):
    resp = env.stub.StartCrystalGenerationJob(pb.StartCrystalGenerationJobRequest(
        model=common_pb2.ModelRef(name=env.name), num_samples=10, batch_size=1, seed=7,
        atom_count_range=pb.AtomCountRange(min=1, max=24), idempotency_key=f"kill-{uuid.uuid4().hex}"),
        metadata=auth(env.token))
    wait_for(lambda: job_row(settings, resp.job.id)["progress"] >= 0.2, 180, interval=0.05, what="generation progress")
    env.worker.kill9()
    killed_at = job_row(settings, resp.job.id)["progress"]
    env.worker = harness.Worker(env.settings, env.log_dir, QUEUES)
    row = _wait(settings, resp.job.id, 240)
    assert row["attempts"] == 2 and killed_at < 1.0
    with db.connect(settings) as conn:
        arts = conn.execute("SELECT content_type FROM artifacts WHERE producing_job_id = %s",
                            (resp.job.id,)).fetchall()
        messages = [r["message"] for r in conn.execute("SELECT message FROM job_events WHERE job_id = %s ORDER BY seq",
                                                       (resp.job.id,))]
    assert sum(a["content_type"] == "chemical/x-cif" for a in arts) == 10
    assert sum(a["content_type"] == "application/vnd.praxon.crystal-set+json" for a in arts) == 1
    assert any("resuming from checkpoint" in m for m in messages)
    assert len(row["result"]["rows"]) == 10


def test_cli_generate_prints_the_table_and_downloads_a_cif(env):
    import io

    from services.common.client import Target
    from services.design.crystals import cli

    target = Target(env.server.address, env.token)
    out = io.StringIO()
    cs = cli.generate(target, model=env.name, groups={62: 1.0}, n=2, atoms=(1, 24), seed=3, out=out)
    cli.print_set(cs, out)
    text = out.getvalue()
    assert "requested" in text and "space group match" in text and len(cs.rows) == 2
    single = cli.generate(target, model=env.name, groups={62: 1.0}, n=2, atoms=(1, 24), seed=3, max_retries=0,
                          sampling_steps=2, out=out)  # the paper's single draw, over 2 strided steps
    assert [r.draws for r in single.rows] == [1, 1] and single.summary.extra_draws == 0
    cif = cli.read_artifact(target, cs.rows[0].cif_artifact_id).decode()
    assert cif.startswith("# generated using pymatgen") and "_cell_length_a" in cif
    assert cli._groups("225:2,62") == {225: 2.0, 62: 1.0}
    target.close()
