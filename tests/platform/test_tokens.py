"""Token lifecycle: expiry, revocation and rotation take effect within the auth cache's lifetime; last use is
recorded; `praxon token list|revoke|rotate` work and never print a secret."""
import json
import time

import grpc
import pytest

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common import db
from tests import harness

CACHE_S = 1.0


@pytest.fixture(scope="module")
def server(settings):
    quick = settings.model_copy(deep=True)
    quick.grpc.auth_cache_seconds = CACHE_S
    s = harness.PlatformServer(quick, ["platform"])
    yield s
    s.stop()


def _code(server, token):
    with grpc.insecure_channel(server.address) as channel:
        try:
            jobs_pb2_grpc.JobServiceStub(channel).ListJobs(jobs_pb2.ListJobsRequest(), metadata=harness.auth(token),
                                                           timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as err:
            return err.code()


def _rejected_within(server, token, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _code(server, token) == grpc.StatusCode.UNAUTHENTICATED:
            return True
        time.sleep(0.1)
    return False


def test_revocation_takes_effect_within_the_cache_lifetime(settings, server):
    with db.connect(settings) as conn:
        _, token = db.create_token(conn, "tok-revoke", "ci")
    assert _code(server, token) == grpc.StatusCode.OK
    with db.connect(settings) as conn:
        assert db.revoke_tokens(conn, "tok-revoke", token_name="ci") == 1
    assert _rejected_within(server, token, CACHE_S + 2.0)


def test_an_expired_token_is_refused_and_listed_as_expired(settings, server, monkeypatch, capsys):
    from services.cli.main import main

    with db.connect(settings) as conn:
        _, token = db.create_token(conn, "tok-expiry", "short", ttl_seconds=1.5)
    assert _code(server, token) == grpc.StatusCode.OK
    assert _rejected_within(server, token, 1.5 + CACHE_S + 2.0)
    monkeypatch.setenv("PRAXON_DATABASE_URL", settings.database_url.get_secret_value())
    main(["token", "list", "--tenant", "tok-expiry"])
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 1 and " expired " in listed[0]


def test_rotation_and_last_use_through_the_cli(settings, server, monkeypatch, capsys):
    from services.cli.main import main

    monkeypatch.setenv("PRAXON_DATABASE_URL", settings.database_url.get_secret_value())
    main(["token", "create", "--tenant", "tok-rotate", "--name", "deploy"])
    old = json.loads(capsys.readouterr().out)["token"]
    assert _code(server, old) == grpc.StatusCode.OK
    main(["token", "rotate", "--tenant", "tok-rotate", "--name", "deploy"])
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["revoked"] == 1 and _code(server, rotated["token"]) == grpc.StatusCode.OK
    assert _rejected_within(server, old, CACHE_S + 2.0)
    main(["token", "list", "--tenant", "tok-rotate"])
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and sum(" revoked " in line for line in listed) == 1
    assert all(old not in line and rotated["token"] not in line for line in listed)
    assert any("last_used=20" in line and " live " in line for line in listed)  # the new token was used
    with pytest.raises(SystemExit):
        main(["token", "revoke", "--tenant", "tok-rotate"])  # neither --id nor --name
