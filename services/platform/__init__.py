"""The platform service: jobs (get, list, cancel, watch), the model registry and artifacts.

api.py (JobService, ModelRegistryService, ArtifactService), events.py (WatchJob over LISTEN/NOTIFY), jobs.py (the
self-test job), cli.py (`praxon jobs|models|selftest` and the demo's first step)."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="platform",
    servicers="services.platform.api:register",
    job_kinds={"platform.selftest": JobKind("default", "services.platform.jobs:run_selftest")},
    cli="services.platform.cli",
    demo=DemoStep("job system: a self-test job through the public API", "services.platform.cli:demo"),
)
