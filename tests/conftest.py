import os

# Triton kernels must see the interpreter flag before they are defined: without a GPU, run them interpreted.
if not os.environ.get("TRITON_INTERPRET"):
    import torch

    os.environ["TRITON_INTERPRET"] = "0" if torch.cuda.is_available() else "1"

import tempfile
import uuid

import pytest

# `praxon up` keeps a copy of its state in the user's PRAXON_HOME: tests (and the `praxon up` they start) use their
# own, never the account's ~/.praxon
os.environ["PRAXON_HOME"] = tempfile.mkdtemp(prefix="praxon-home-")

from tests import harness


@pytest.fixture(scope="session")
def database_url():
    from services.common import db
    from services.common.settings import Settings

    url = harness.create_database()
    db.migrate(Settings(database_url=url))
    yield url
    harness.drop_database(url)


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    with harness.weed_server(tmp_path_factory.mktemp("weed")) as weed:
        yield weed


@pytest.fixture(scope="session")
def redis_db():
    """A Redis database number of its own, so a test run shares no queue with anything else."""
    return harness.claim_redis_db()


@pytest.fixture(scope="session")
def settings(database_url, s3, redis_db):
    return harness.make_settings(database_url, s3.endpoint, f"{harness.REDIS_URL}/{redis_db}",
                                 bucket=f"praxon-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="session")
def platform(settings):
    server = harness.PlatformServer(settings, ["platform"])
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tenants(settings):
    """Two tenants with a token each: {'a': (tenant_id, token), 'b': (...)}."""
    suffix = uuid.uuid4().hex[:6]
    return {"a": harness.token_for(settings, f"tenant-a-{suffix}"), "b": harness.token_for(settings, f"tenant-b-{suffix}")}


@pytest.fixture
def workers(settings, tmp_path):
    """Start `praxon worker` processes: workers() or workers(other_settings); all stopped afterwards."""
    started = []

    def start(s=None, queues: str = "all"):
        w = harness.Worker(s or settings, tmp_path, queues)
        started.append(w)
        return w
    yield start
    for w in started:
        w.stop()
