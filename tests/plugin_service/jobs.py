from services.common.jobcontext import JobContext


def run_count(ctx: JobContext) -> dict:
    n = int(ctx.params.get("n", 3))
    for i in range(n):
        ctx.check_cancelled()
        ctx.progress((i + 1) / n, f"step {i + 1}")
    return {"counted": n}
