"""A job kind that does nothing, so the benchmark measures the job system itself."""
from services.common.spec import JobKind, ServiceSpec


def run_noop(ctx) -> dict:
    return {}


SPEC = ServiceSpec(name="bench", job_kinds={"bench.noop": JobKind("default", "benchmarks.platform.noop_kind:run_noop")})
