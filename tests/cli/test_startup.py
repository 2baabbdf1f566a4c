"""`praxon --help` and every command's parsing import no grpc, no generated contracts, no pydantic and no torch: a
command pays for those only when it calls the platform (benchmarks/platform/cli_startup.py measures the time)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("grpc", "google.protobuf", "pydantic", "torch", "numpy", "services.common.client")


def test_parsing_every_command_imports_nothing_heavy():
    code = ("import json, sys\n"
            "from services.cli.main import build_parser\n"
            "build_parser()\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
