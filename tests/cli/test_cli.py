"""The `praxon` command's own behaviour: it starts without torch (or pandas, numpy, any servicer), every
service's commands are in its parser, and errors it cannot handle print one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import harness

HEAVY = ("torch", "pandas", "numpy", "transformers", "sklearn", "scipy")


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")}, "PYTHONPATH": str(harness.ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_the_cli_entry_and_its_parser_import_no_torch():
    out = run_python(f"""
import json, sys
from services.cli.main import build_parser
parser = build_parser()
sub = next(a for a in parser._actions if a.dest == "command")
print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules], "commands": sorted(sub.choices),
                  "servicers": sorted(m for m in sys.modules if m.startswith("services.") and m.endswith((".api", ".jobs", ".serving")))}}))
""")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["heavy"] == [] and got["servicers"] == [], got
    for command in ("up", "serve", "worker", "token", "jobs", "models", "selftest", "moderate", "recommend",
                    "unlearn"):
        assert command in got["commands"], got["commands"]


def test_running_a_service_command_imports_no_torch(tmp_path):
    """A recommendation and a moderation command up to their RPC (nothing listens: UNAVAILABLE, one line)."""
    from services.common.embedded import free_port

    port = free_port()
    out = run_python(f"""
import json, sys
from services.cli.main import main
codes = []
for argv in (["recommend", "query", "50", "172", "--model", "recommender:3"],
             ["moderate", "check", "hello", "--model", "guard@production"],
             ["models", "alias", "guard", "2", "production"]):
    try:
        main([*argv, "--address", "127.0.0.1:{port}", "--token", "t", "--data-dir", {str(tmp_path)!r}]
             if argv[0] != "models" else ["models", "--address", "127.0.0.1:{port}", "--token", "t", *argv[1:]])
    except SystemExit as exc:
        codes.append(str(exc.code))
print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules], "codes": codes}}))
""")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [], got
    assert len(got["codes"]) == 3 and all(c.startswith("error: UNAVAILABLE") and "\n" not in c for c in got["codes"])


def test_errors_are_one_line():
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT)}
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "recommend", "import", "--file",
                          "/nonexistent/ratings.csv", "--token", "t", "--address", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == "error: No such file or directory: /nonexistent/ratings.csv"
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "unlearn", "forget", "--model", "h:0",
                          "--ids", "a", "--token", "t", "--address", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    from services.cli.main import describe_error

    assert describe_error(ValueError("bad\nsecond line")) == "ValueError: bad"
