"""No secret in any log: a full `praxon up` run (the launcher, PostgreSQL, the broker, the S3 server, every service
and a worker), a job, token create/rotate and calls with good and bad tokens; then every byte the run wrote is
searched for each token and password it created."""
from __future__ import annotations

import json
import os
import signal

from tests import harness
from tests.cli.test_up import praxon, start_up, tmp_path  # noqa: F401 - the fixture, shared


def test_logs_hold_no_token_or_password(tmp_path):  # noqa: F811
    proc, info = start_up(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")}
    env["PYTHONPATH"] = str(harness.ROOT)
    data_dir = str(tmp_path / "up")
    secrets = {"demo token": info["token"]}
    try:
        out = praxon("token", "create", "--tenant", "logs-tenant", "--name", "ci", "--data-dir", data_dir, env=env)
        secrets["created token"] = json.loads(out.stdout)["token"]
        out = praxon("token", "rotate", "--tenant", "logs-tenant", "--name", "ci", "--data-dir", data_dir, env=env)
        secrets["rotated token"] = json.loads(out.stdout)["token"]
        out = praxon("selftest", "--data-dir", data_dir, "--token", secrets["rotated token"], "--steps", "2",
                     "--step-seconds", "0.05", env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        bad = praxon("jobs", "--data-dir", data_dir, "--token", secrets["created token"], "list", env=env)
        assert bad.returncode != 0 and "UNAUTHENTICATED" in bad.stderr  # the revoked one, in a failing call
        creds = json.loads((tmp_path / "up" / "s3-credentials.json").read_text())
        secrets["s3 secret key"] = creds["secret_key"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(90)
    searched = 0
    for path in tmp_path.rglob("*"):
        if not path.is_file() or path.name in ("up.json", "s3-credentials.json", "identities.json") \
                or "postgres" in path.parts and "log" not in path.name:
            continue  # the state files that hold the secrets on purpose (mode 0600), and the database's own files
        data = path.read_bytes()
        searched += 1
        for what, secret in secrets.items():
            assert secret.encode() not in data, f"{what} found in {path}"
    assert searched >= 3  # the launcher's output and the service and worker logs were really read
