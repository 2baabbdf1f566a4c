"""The Celery application shared by job producers (services) and consumers (workers/)."""
from __future__ import annotations

from celery import Celery
from kombu import Queue

from services.common.settings import Settings

RUN_JOB_TASK = "praxon.run_job"


def make_celery(settings: Settings) -> Celery:
    from services import catalog  # the queues of the hosted services' job kinds (common imports no service)

    app = Celery("praxon", broker=settings.broker_url.get_secret_value())
    app.conf.update(
        task_acks_late=True,  # a message is acked only after its job ran; the job table guards against reruns
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=[Queue(q) for q in catalog.queues()],
        task_default_queue="default",
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        # Redis redelivers unacked messages after this; the lease, not the broker, decides who runs.
        broker_transport_options={"visibility_timeout": 3600},
    )
    return app
