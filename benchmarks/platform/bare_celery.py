"""The baseline: a bare Celery task with a Redis broker and result backend, nothing else."""
import os

from celery import Celery

app = Celery("bare", broker=os.environ["BENCH_BROKER"], backend=os.environ["BENCH_BROKER"])
app.conf.update(worker_prefetch_multiplier=1, task_acks_late=True, worker_hijack_root_logger=False)


@app.task(name="bench.bare_noop")
def bare_noop() -> int:
    return 1
