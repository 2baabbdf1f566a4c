"""A throwaway service, as a newcomer would add one: this folder and its SPEC, nothing else. One RPC
(/praxon.echo.v1.EchoService/StartEchoJob, Struct in, Struct out), one job kind, one CLI command. A process
hosts it when PRAXON_EXTRA_SERVICES names it (a real service adds one line to services/catalog.py instead)."""
from services.common.spec import JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="echo",
    servicers="tests.plugin_service.api:register",
    job_kinds={"echo.count": JobKind("default", "tests.plugin_service.jobs:run_count")},
    cli="tests.plugin_service.cli",
)
