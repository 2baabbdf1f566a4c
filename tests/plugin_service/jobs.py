"""echo.count: count to n with progress; when it succeeds, its hook records the count in the plugin's table."""
from psycopg import Connection

from services.common.jobcontext import JobContext


def run_count(ctx: JobContext) -> dict:
    n = ctx.params.n
    for i in range(n):
        ctx.check_cancelled()
        ctx.progress((i + 1) / n, f"step {i + 1}")
    return {"counted": n}


def count_finished(conn: Connection, job: dict) -> None:
    """on_finish: in the transaction of the job's terminal transition (exactly once: the key makes a replay a no-op)."""
    result = job["result"]
    if job["state"] == "SUCCEEDED" and isinstance(result, dict) and isinstance(result.get("counted"), int):
        conn.execute("INSERT INTO echo_counts (job_id, tenant_id, counted) VALUES (%s, %s, %s) "
                     "ON CONFLICT DO NOTHING", (job["id"], job["tenant_id"], result["counted"]))
