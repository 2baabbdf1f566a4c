"""`praxon up` on embedded pieces: Ctrl-C stops everything cleanly; a killed launcher leaves nothing running."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from services.common.embedded import free_port
from tests import harness


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
