"""Where a command finds the platform: --address / --token, then PRAXON_ADDRESS / PRAXON_TOKEN, then a running
`praxon up`: the one in the data dir (./.praxon by default), else the user's latest, recorded in PRAXON_HOME, so
commands work from any directory. A platform that cannot be reached is named with where its address came from."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from services.common import client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PRAXON_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PRAXON_ADDRESS", raising=False)
    monkeypatch.delenv("PRAXON_TOKEN", raising=False)
    monkeypatch.setattr(client, "last_target", None)
    return tmp_path / "home"


def test_a_running_up_is_found_from_any_directory(home, tmp_path, monkeypatch):
    up_dir = tmp_path / "project" / ".praxon"
    up_dir.mkdir(parents=True)
    client.write_up_state(up_dir, address="127.0.0.1:7001", token="tok-up", pid=os.getpid(), database_url="pg://x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = client.resolve_target(None, None)          # the default data dir ./.praxon does not exist here
    assert (target.address, target.token) == ("127.0.0.1:7001", "tok-up")
    assert target.source == str(home / client.UP_FILE)
    assert client.resolve_database_url(".praxon") == "pg://x"
    assert json.loads((home / client.UP_FILE).read_text())["data_dir"] == str(up_dir.resolve())


def test_the_data_dir_wins_over_the_users_latest_and_flags_over_both(home, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    client.write_up_state(a, address="127.0.0.1:7001", token="tok-a", pid=os.getpid())
    client.write_up_state(b, address="127.0.0.1:7002", token="tok-b", pid=os.getpid())  # the user's latest
    assert client.resolve_target(None, None, a).address == "127.0.0.1:7001"
    assert client.resolve_target(None, None, tmp_path / "none").address == "127.0.0.1:7002"
    t = client.resolve_target("10.0.0.1:1", "tok", a)
    assert (t.address, t.token, t.source) == ("10.0.0.1:1", "tok", "--address")


def test_a_stopped_up_is_not_found_and_clearing_removes_only_ones_own(home, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    client.write_up_state(d, address="127.0.0.1:7003", token="t", pid=int(dead.stdout))
    assert client.find_up_state(d) == ({}, "")
    client.write_up_state(d, address="127.0.0.1:7003", token="t", pid=os.getpid() + 10**7)  # someone else's
    client.clear_up_state(d)
    assert not (d / client.UP_FILE).exists() and (home / client.UP_FILE).exists()
    client.write_up_state(d, address="127.0.0.1:7003", token="t", pid=os.getpid())
    client.clear_up_state(d)
    assert not (home / client.UP_FILE).exists()


def test_an_unreachable_platform_is_named_with_where_its_address_came_from(home, tmp_path):
    env = {**os.environ, "PRAXON_ADDRESS": "127.0.0.1:9", "PRAXON_TOKEN": "x", "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "jobs", "list"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert out.returncode != 0
    assert "UNAVAILABLE" in out.stderr and "tried 127.0.0.1:9, from PRAXON_ADDRESS" in out.stderr, out.stderr


@pytest.mark.parametrize("argv,address", [
    (["jobs", "list", "--address", "h:1", "--token", "t"], "h:1"),   # after the whole command, as everywhere
    (["jobs", "--address", "h:2", "list"], "h:2"),                    # and where it was accepted before
    (["moderate", "check", "--address", "h:3", "hi"], "h:3"),
    (["jobs", "list"], None)])
def test_client_options_go_after_the_whole_command_for_every_command(argv, address):
    from services.cli.main import build_parser

    args = build_parser().parse_args(argv)
    assert args.address == address and args.data_dir == ".praxon"
