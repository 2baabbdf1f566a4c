"""Two `praxon up` on one machine (issue 39): by default each picks free ports (gRPC, and SeaweedFS's block) and
says which; a port given that is taken stops `up` before it starts anything, naming the port; SeaweedFS refusing a
port it cannot allocate (while another server answers there) is said as such, not as S3 AccessDenied. Loopback
only."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from services.common.embedded import PortInUse, WeedS3
from tests import harness


@pytest.fixture
def tmp_dir():
    """In /tmp with 0755 (as tests/cli/test_up.py: the embedded PostgreSQL runs as its own user under root)."""
    path = Path(tempfile.mkdtemp(prefix="praxon-up-ports-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")}  # embedded defaults
    env["PYTHONPATH"] = str(harness.ROOT)
    return env


def _start(data_dir: Path, *args: str) -> subprocess.Popen:
    data_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(data_dir), *args],
                            env=_env(), stdout=open(data_dir.parent / f"{data_dir.name}.out", "wb"),
                            stderr=subprocess.STDOUT)


def _output(data_dir: Path) -> str:
    return (data_dir.parent / f"{data_dir.name}.out").read_text(errors="replace")


def _wait_up(proc: subprocess.Popen, data_dir: Path) -> dict:
    up_file = data_dir / "up.json"
    harness.wait_for(lambda: up_file.exists() or proc.poll() is not None, 240, interval=0.2, what="praxon up")
    assert proc.poll() is None, _output(data_dir)
    return json.loads(up_file.read_text())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_two_ups_pick_free_ports_and_a_taken_port_is_named(tmp_dir):
    a_dir, b_dir = tmp_dir / "a", tmp_dir / "b"
    a = _start(a_dir)
    try:
        a_info = _wait_up(a, a_dir)
        b = _start(b_dir)  # the same defaults, while the first runs
        try:
            b_info = _wait_up(b, b_dir)
            # each said where it listens, and the ports differ
            for info, d in ((a_info, a_dir), (b_info, b_dir)):
                said = re.search(r"praxon is up: address (\S+), S3 on (\S+) ", _output(d))
                assert said and said.groups() == (info["address"], info["s3_endpoint"]), _output(d)
                assert info["address"].startswith("127.0.0.1:") and info["s3_endpoint"].startswith("127.0.0.1:")
            assert a_info["address"] != b_info["address"] and a_info["s3_endpoint"] != b_info["s3_endpoint"]
            # both are whole platforms: a client in each data dir reaches its own (token, database, S3 bucket)
            for d in (a_dir, b_dir):
                out = subprocess.run([sys.executable, "-m", "services.cli.main", "selftest", "--data-dir", str(d),
                                      "--steps", "1", "--step-seconds", "0.01"], capture_output=True, text=True,
                                     timeout=240, env=_env())
                assert out.returncode == 0 and "SUCCEEDED" in out.stdout, out.stdout + out.stderr

            # a port given that another up holds: refused before anything starts, naming the port
            taken_grpc = _port(a_info["address"])
            c_dir = tmp_dir / "c"
            c = _start(c_dir, "--port", str(taken_grpc))
            assert c.wait(120) != 0
            assert f"cannot listen on 127.0.0.1:{taken_grpc} (gRPC, --port): the port is in use" in _output(c_dir)
            assert not (c_dir / "postgres").exists()  # nothing was started
            s3_base = _port(a_info["s3_endpoint"]) - 3
            d_dir = tmp_dir / "d"
            d = _start(d_dir, "--s3-port-base", str(s3_base))
            assert d.wait(120) != 0
            text = _output(d_dir)
            assert "SeaweedFS cannot listen on 127.0.0.1 port(s)" in text and f"{s3_base + 3} (S3)" in text, text
            assert "AccessDenied" not in text and "Traceback" not in text and not (d_dir / "postgres").exists()
        finally:
            _stop(b)
    finally:
        _stop(a)


def test_weed_that_cannot_allocate_its_port_is_said_as_such(tmp_dir):
    """The original failure: the port was free when looked at, then another server answered on it while this
    SeaweedFS gave up ("Port allocation failed"). A listening socket plays the other server; the check before start
    is skipped to open that window."""
    weed = WeedS3(tmp_dir / "s3", harness.free_port_base(), "praxon", "praxon-test-secret")
    with socket.socket() as other:
        other.bind(("127.0.0.1", weed.s3_port))
        other.listen()
        weed.check_ports = lambda: None  # as if the port was taken after the check
        with pytest.raises(PortInUse) as err:
            weed.start(timeout=60)
    assert f"port {weed.s3_port} for S3" in str(err.value) and "not available" in str(err.value), err.value
    assert weed.proc is not None and weed.proc.poll() is not None
