"""Adding a service is one folder plus one line: the throwaway service in tests/plugin_service (its SPEC only, no
other file of the project touched) is served, its job runs on a worker, its CLI command parses, and the chart
check reports exactly that it has no chart entry yet."""
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from services import catalog
from tests import harness

PLUGIN = "tests.plugin_service:SPEC"


@pytest.fixture
def with_plugin(settings, monkeypatch):
    # the plugin joins this test only: the catalog (where job kinds are found too) is restored afterwards
    monkeypatch.setattr(catalog, "SPECS", list(catalog.SPECS))
    with harness.private_platform(settings) as private:
        private.extra_services = [*private.extra_services, PLUGIN]
        catalog.load_extra(private)
        yield private


def test_a_spec_is_served_and_its_job_runs(with_plugin, workers):
    settings = with_plugin
    assert "echo" in catalog.names() and catalog.job_kind("echo.count") is not None
    _, token = harness.token_for(settings, "plugin-tenant")
    server = harness.PlatformServer(settings, ["platform", "echo"])
    try:
        workers(settings)
        with grpc.insecure_channel(server.address) as channel:
            start = channel.unary_unary("/praxon.echo.v1.EchoService/StartEchoJob",
                                        request_serializer=struct_pb2.Struct.SerializeToString,
                                        response_deserializer=struct_pb2.Struct.FromString)
            reply = start(json_format.ParseDict({"n": 4}, struct_pb2.Struct()), metadata=harness.auth(token),
                          timeout=30)
            job_id = reply["job_id"]
            harness.wait_for(lambda: harness.job_row(settings, job_id)["state"] == "SUCCEEDED", 120,
                             what="the plugin's job")
            assert harness.job_row(settings, job_id)["result"] == {"counted": 4}
            # the platform's own reflection lists the new service beside the others
            from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            resp = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                  timeout=10))
            assert "praxon.echo.v1.EchoService" in {s.name for s in resp.list_services_response.service}
    finally:
        server.stop()


def test_a_spec_brings_its_cli_command_and_the_chart_check_sees_it(with_plugin):
    from services.cli.main import build_parser
    from tests.deploy import checks
    from tests.deploy.chartlib import EXTERNAL, deep_merge, render, values_yaml

    args = build_parser().parse_args(["echo", "5", "--token", "t"])
    assert args.n == 5 and args.command == "echo"
    values = deep_merge(values_yaml(), EXTERNAL)
    problems = checks.check_coverage(values, render(EXTERNAL))
    assert problems == ["service 'echo' is in services/catalog.py but the chart has no entry: "
                        + checks.HOW_TO_ADD_SERVICE.format(name="echo")]
