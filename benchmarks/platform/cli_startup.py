"""CLI start-up, this tree against an earlier revision, same interpreter, same run (medians over --runs).

    .venv/bin/python benchmarks/platform/cli_startup.py --before 06ceb34

Rows: `praxon moderate check --help` and `praxon recommend query --help` (parsing only), and a real
`praxon moderate check --model guard:1 hi` against a closed port, timed until it exits with its one-line error (what
a command costs before its first call: the old CLI imported torch to parse the model reference; the current one
also spends its client's retry backoffs here). The earlier revision is checked out into a temporary git worktree
and run with this tree's .venv, so only the code differs."""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "moderate check --help": ["moderate", "check", "--help"],
    "recommend query --help": ["recommend", "query", "--help"],
    "moderate check (closed port)": ["moderate", "check", "--address", "127.0.0.1:9", "--token", "x",
                                     "--model", "guard:1", "hi"],
}


def timed(tree: Path, args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=tree, capture_output=True, timeout=300,
                   env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision to compare with")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), args.before], cwd=ROOT, check=True)
        try:
            times: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.runs):  # interleaved, so load changes hit both trees alike
                for label, tree in (("before", old), ("now", ROOT)):
                    for name, cmd in COMMANDS.items():
                        times.setdefault((label, name), []).append(timed(tree, cmd))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=True)
    print(f"{'command':32} {'before ' + args.before:>18} {'now':>8} {'ratio':>6}")
    for name in COMMANDS:
        b, n = statistics.median(times[("before", name)]), statistics.median(times[("now", name)])
        print(f"{name:32} {b:16.2f} s {n:6.2f} s {n / b:6.2f}")


if __name__ == "__main__":
    main()
