"""`praxon up` on embedded pieces: Ctrl-C stops everything cleanly; a killed launcher leaves nothing running."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.client import Target
from services.common.embedded import free_port
from tests import harness


@pytest.fixture
def tmp_path():
    """A directory of its own in /tmp, not under pytest's basetemp: as root, the embedded PostgreSQL runs as its own
    user and needs every parent directory searchable, and each pytest session (others may run beside this one)
    resets /tmp/pytest-of-<user> to 0700."""
    path = Path(tempfile.mkdtemp(prefix="praxon-up-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_up(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT)}
    for key in [k for k in env if k.startswith("PRAXON_")]:
        del env[key]  # embedded defaults: no external services configured
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(tmp_path / "up"),
                             "--port", str(port), "--s3-port-base", str(harness.free_port_base())],
                            env=env, stdout=open(tmp_path / "up.out", "wb"), stderr=subprocess.STDOUT)
    up_file = tmp_path / "up" / "up.json"
    harness.wait_for(lambda: up_file.exists() or proc.poll() is not None, 180, interval=0.2, what="praxon up")
    assert proc.poll() is None, (tmp_path / "up.out").read_text()
    return proc, json.loads(up_file.read_text())


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def names(procs) -> str:
    return " ".join(sorted({p.name() for p in procs if p.is_running()}))


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_up_leaves_nothing_running(tmp_path, how):
    proc, info = start_up(tmp_path)
    try:
        children = descendants(proc.pid)
        cmdlines = " ".join(" ".join(p.cmdline()) for p in children)
        for piece in ("postgres", "redis-server", "weed", "worker"):
            assert piece in cmdlines, f"{piece} not started: {cmdlines}"
        # it is really up: a client gets through with the demo token
        out = subprocess.run([sys.executable, "-m", "services.cli.main", "selftest", "--address", info["address"],
                              "--token", info["token"], "--steps", "2", "--step-seconds", "0.05"],
                             capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(harness.ROOT)})
        assert out.returncode == 0 and "SUCCEEDED" in out.stdout, out.stdout + out.stderr
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)
            assert proc.wait(90) == 0
        else:
            proc.kill()
            proc.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=60)
        assert not alive, f"still running after {how}: {names(alive)}"
    finally:
        if proc.poll() is None:
            proc.kill()


def praxon(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_token_create_then_service_commands_against_what_up_started(tmp_path):
    """`praxon up`, then `praxon token create` (no PRAXON_DATABASE_URL: the embedded PostgreSQL that up recorded,
    not 127.0.0.1:5432), then recommendation commands and `praxon models alias` with the new tenant's token."""
    proc, info = start_up(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")}
    env["PYTHONPATH"] = str(harness.ROOT)
    data_dir = str(tmp_path / "up")
    try:
        assert info["database_url"] and "5432" not in info["database_url"]
        out = praxon("token", "create", "--tenant", "cli-tenant", "--data-dir", data_dir, env=env)
        assert out.returncode == 0, out.stderr
        token = json.loads(out.stdout)["token"]
        assert token != info["token"]
        client = ["--data-dir", data_dir, "--token", token]  # the address comes from up's state file

        out = praxon("recommend", "import", "--builtin", "synthetic", *client, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        dataset = re.search(r"^dataset (\S+):", out.stdout, re.M).group(1)
        out = praxon("recommend", "train", "--dataset", dataset, "--kind", "popularity", "--name", "cli-rec",
                     *client, env=env)
        assert out.returncode == 0 and "registered cli-rec v1" in out.stdout, out.stdout + out.stderr
        # each command sent its own idempotency key, so a Start call the channel replays returns the same job
        target = Target(info["address"], token)
        try:
            jobs = jobs_pb2_grpc.JobServiceStub(target.channel()).ListJobs(jobs_pb2.ListJobsRequest(page_size=10),
                                                                         metadata=target.metadata).jobs
        finally:
            target.close()
        keys = [j.idempotency_key for j in jobs]
        assert len(set(keys)) == len(keys) == 2 and all(re.fullmatch(r"[0-9a-f]{32}", k) for k in keys), keys

        out = praxon("models", "alias", "cli-rec", "1", "production", *client, env=env)
        assert out.returncode == 0 and "alias production -> cli-rec v1" in out.stdout, out.stdout + out.stderr
        out = praxon("recommend", "query", "--model", "cli-rec@production", "--k", "3", *client, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith("cli-rec v1 (popularity") and len(re.findall(r"^\s+\d+\. item", out.stdout,
                                                                                    re.M)) == 3, out.stdout

        # errors are one clear line, never a traceback
        out = praxon("models", "alias", "cli-rec", "7", "production", *client, env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1, out.stderr
        out = praxon("recommend", "query", "--model", "cli-rec:x", *client, env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr and "model reference" in out.stderr
        # the demo tenant does not see the new tenant's models
        out = praxon("models", "list", "--data-dir", data_dir, env=env)
        assert out.returncode == 0 and "cli-rec" not in out.stdout, out.stdout + out.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(90)
