"""A job kind that does nothing, so the benchmark measures the job system itself."""
from services.common.jobkinds import register_kind


def run_noop(ctx) -> dict:  # noqa: ARG001
    return {}


register_kind("bench.noop", "default", "benchmarks.platform.noop_kind:run_noop")
