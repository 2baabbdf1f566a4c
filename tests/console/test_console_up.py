"""`praxon up` starts the web console beside the platform (on the machine's PostgreSQL, Redis and a test S3 server,
so nothing embedded has to start): its URL is in up.json, it signs in with the demo token, and Ctrl-C stops it
with everything else."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.parse

import psutil
import pytest

from tests import harness


@pytest.fixture
def private(settings):
    with harness.private_platform(settings) as private:
        yield private


def _request(url: str, method: str = "GET", body: str = "", cookie: str = "") -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    if cookie:
        headers["Cookie"] = cookie
    conn.request(method, parts.path or "/", body=body or None, headers=headers)
    response = conn.getresponse()
    response.text = response.read().decode()
    conn.close()
    return response


def test_up_serves_the_console_and_stops_it(private, tmp_path):
    env = {**os.environ, **harness.settings_env(private), "PYTHONPATH": str(harness.ROOT)}
    up = subprocess.Popen([sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(tmp_path / "up")],
                          env=env, stdout=open(tmp_path / "up.out", "wb"), stderr=subprocess.STDOUT)
    try:
        up_file = tmp_path / "up" / "up.json"
        harness.wait_for(lambda: up_file.exists() or up.poll() is not None, 180, interval=0.2, what="praxon up")
        assert up.poll() is None, (tmp_path / "up.out").read_text()
        info = json.loads(up_file.read_text())
        url = info["console_url"]
        assert url.startswith("http://127.0.0.1:") and url in (tmp_path / "up.out").read_text()

        def answers():
            try:
                return _request(url + "signin").status == 200
            except OSError:
                return False
        harness.wait_for(answers, 60, interval=0.2, what="the console")
        signed = _request(url + "signin", "POST", urllib.parse.urlencode({"token": info["token"]}))
        assert signed.status == 303 and signed.getheader("Location") == "/jobs"
        cookie = signed.getheader("Set-Cookie").split(";")[0]
        jobs = _request(url + "jobs", cookie=cookie)
        assert jobs.status == 200 and "<h1>Jobs</h1>" in jobs.text
        refused = _request(url + "signin", "POST", urllib.parse.urlencode({"token": "wrong"}))
        assert refused.status == 401

        children = psutil.Process(up.pid).children(recursive=True)
        assert any("console" in p.cmdline() for p in children)
        up.send_signal(signal.SIGINT)
        assert up.wait(90) == 0
        _, alive = psutil.wait_procs(children, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if up.poll() is None:
            up.kill()
