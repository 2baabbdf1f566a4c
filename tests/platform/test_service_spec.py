"""Adding a service is one folder plus one line: the throwaway service in tests/plugin_service (its folder only, no
other file of the project touched) has a contract, a table, a job kind with typed parameters and an on_finish hook,
and a CLI command. It is migrated, served, its job runs on a worker and its hook writes its table; bad parameters
are refused at submit naming the field; the chart deploys it once the generator has run (and says to run it)."""
import grpc
import pytest

from services import catalog
from services.common import db
from tests import harness
from tests.plugin_service import echo_pb2, echo_pb2_grpc

PLUGIN = "tests.plugin_service:SPEC"


@pytest.fixture
def with_plugin(settings, monkeypatch):
    # the plugin joins this test only: the catalog (where job kinds are found too) is restored afterwards
    monkeypatch.setattr(catalog, "SPECS", list(catalog.SPECS))
    with harness.private_platform(settings) as private:
        private.extra_services = [*private.extra_services, PLUGIN]
        catalog.load_extra(private)
        yield private


def test_a_spec_is_migrated_served_and_its_job_and_hook_run(with_plugin, workers):
    settings = with_plugin
    assert "echo" in catalog.names() and catalog.job_kind("echo.count") is not None
    assert db.migrate(settings) == ["9001_echo_counts.sql"]  # the plugin's table, found through its spec
    _, token = harness.token_for(settings, "plugin-tenant")
    _, other = harness.token_for(settings, "plugin-other")
    server = harness.PlatformServer(settings, ["platform", "echo"])
    try:
        workers(settings)
        with grpc.insecure_channel(server.address) as channel:
            stub = echo_pb2_grpc.EchoServiceStub(channel)
            reply = stub.StartEchoJob(echo_pb2.StartEchoJobRequest(n=4), metadata=harness.auth(token), timeout=30)
            harness.wait_for(lambda: harness.job_row(settings, reply.job_id)["state"] == "SUCCEEDED", 120,
                             what="the plugin's job")
            assert harness.job_row(settings, reply.job_id)["result"] == {"counted": 4}
            # the kind's on_finish hook wrote the plugin's table, for its tenant only
            counts = stub.ListCounts(echo_pb2.ListCountsRequest(), metadata=harness.auth(token), timeout=10).counts
            assert [(c.job_id, c.counted) for c in counts] == [(reply.job_id, 4)]
            assert not stub.ListCounts(echo_pb2.ListCountsRequest(), metadata=harness.auth(other), timeout=10).counts
            # a value the job would reject is refused at submit, naming the field
            with pytest.raises(grpc.RpcError) as err:
                stub.StartEchoJob(echo_pb2.StartEchoJobRequest(n=0), metadata=harness.auth(token), timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            from services.common.client import status_details

            assert [f for f, _ in status_details(err.value)["violations"]] == ["n"]
            # the platform's own reflection lists the new service beside the others
            from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

            refl = reflection_pb2_grpc.ServerReflectionStub(channel)
            resp = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                  timeout=10))
            assert "praxon.echo.v1.EchoService" in {s.name for s in resp.list_services_response.service}
    finally:
        server.stop()


def test_a_spec_brings_its_cli_command_and_the_chart_deploys_it_once_generated(with_plugin):
    from services.cli.main import build_parser
    from tests.deploy import checks
    from tests.deploy.chartlib import EXTERNAL, deep_merge, fullname, render, render_regenerated, values_yaml

    args = build_parser().parse_args(["echo", "5", "--token", "t"])
    assert args.n == 5 and args.command == "echo"
    # the committed chart does not know the plugin yet: the check says what to run
    problems = checks.check_coverage(deep_merge(values_yaml(), EXTERNAL), render(EXTERNAL))
    assert problems == ["service 'echo' is in services/catalog.py but not in helm/praxon/catalog.yaml: "
                        + checks.REGENERATE]
    # once generated, it is deployed like every service, with no chart line written for it
    docs = render_regenerated(EXTERNAL)
    assert checks.check_coverage(deep_merge(values_yaml(), EXTERNAL), docs) == problems  # (the same committed file)
    echo = [d for d in docs if d["metadata"]["name"] == f"{fullname()}-echo"]
    assert {"Deployment", "Service", "PodDisruptionBudget"} == {d["kind"] for d in echo}  # as serviceDefaults say
    assert checks.check_commands(docs) == []
