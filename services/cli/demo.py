"""`praxon demo`: start `praxon up` as a child, run the end-to-end demo through the public API, stop it."""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from services.common.client import UP_FILE, Target
from services.common.embedded import spawn, stop


def run_demo(data_dir: Path, *, port: int = 50051) -> None:
    data_dir = data_dir.resolve()
    (data_dir / UP_FILE).unlink(missing_ok=True)
    print(f"starting the platform on embedded defaults (logs: {data_dir}/up.log) ...", flush=True)
    up = spawn([sys.executable, "-m", "services.cli.main", "--log-level", "INFO", "up", "--data-dir", str(data_dir),
                "--port", str(port)], data_dir / "up.log", stop_signal="INT")
    try:
        deadline = time.monotonic() + 180
        while not (data_dir / UP_FILE).exists():
            if up.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the platform did not come up; see {data_dir / 'up.log'}")
            time.sleep(0.2)
        info = json.loads((data_dir / UP_FILE).read_text())
        target = Target(info["address"], info["token"])
        from services import catalog
        from services.common.spec import resolve

        for spec in catalog.SPECS:  # each service's own step, in the catalog's order
            if spec.demo:
                print(f"\n== {spec.demo.title}", flush=True)
                resolve(spec.demo.target)(target)
        print("\ndemo finished: every step went through the public gRPC API", flush=True)
    finally:
        stop(up, signal.SIGINT, timeout=60)
