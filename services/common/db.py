"""PostgreSQL access: a psycopg 3 connection pool and versioned SQL migrations applied on start."""
from __future__ import annotations

import hashlib
import logging
import secrets
import time
import weakref
from importlib import resources
from typing import Iterable

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from services.common.settings import Settings

log = logging.getLogger(__name__)

# Errors worth retrying: the server restarted, a connection dropped, a serialization conflict.
TRANSIENT_DB_ERRORS = (psycopg.OperationalError, psycopg.errors.SerializationFailure,
                       psycopg.errors.DeadlockDetected)

_MIGRATION_LOCK = 728_001  # advisory lock id: one migrator at a time


def database_url(settings: Settings) -> str:
    return settings.database_url.get_secret_value()


def connect(settings: Settings, **kwargs) -> psycopg.Connection:
    return psycopg.connect(database_url(settings), row_factory=dict_row, **kwargs)


class _IdleCheck:
    """The pool's check on checkout, only for a connection that sat idle in the pool for a while: checking every
    checkout costs a round trip per transaction (a tenth of a no-op job's time). A connection the server dropped
    while it was in use fails its next statement with OperationalError, which callers treat as transient (jobs
    retry, services answer UNAVAILABLE and clients retry); the pool then discards it."""

    def __init__(self, idle_seconds: float = 2.0):
        self.idle_seconds = idle_seconds
        self.returned: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()

    def check(self, conn: psycopg.Connection) -> None:
        if time.monotonic() - self.returned.get(conn, 0.0) > self.idle_seconds:
            ConnectionPool.check_connection(conn)

    def reset(self, conn: psycopg.Connection) -> None:  # called as the connection goes back into the pool
        self.returned[conn] = time.monotonic()


def create_pool(settings: Settings, *, min_size: int = 1, max_size: int | None = None) -> ConnectionPool:
    idle = _IdleCheck()
    pool = ConnectionPool(database_url(settings), min_size=min_size,
                          max_size=max_size or settings.database_pool_max,
                          kwargs={"row_factory": dict_row}, check=idle.check, reset=idle.reset,
                          open=False, name="praxon")
    pool.open(wait=True, timeout=30)
    return pool


def ensure_database(settings: Settings) -> None:
    """Create the configured database if the server lacks it (dev and test convenience)."""
    info = psycopg.conninfo.conninfo_to_dict(database_url(settings))
    name = info.get("dbname")
    if not name:
        return
    admin = psycopg.conninfo.make_conninfo(database_url(settings), dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
            log.info("created database %s", name)


def migrations(packages: Iterable[str] = ()) -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every migration in version order: common's own (the platform's tables: tenants,
    tokens, jobs, artifacts, models) and those of each package in `packages` (a service's migrations/ folder, named
    by its spec). Versions are unique across all of them: the number orders one shared history."""
    found: dict[int, tuple[str, str, str]] = {}
    for package in ("services.common", *packages):
        folder = resources.files(package).joinpath("migrations")
        for p in (folder.iterdir() if folder.is_dir() else ()):
            if not p.name.endswith(".sql"):
                continue
            version = int(p.name.split("_", 1)[0])
            if version in found:
                raise ValueError(f"migration version {version} is used twice: {found[version][0]}/"
                                 f"{found[version][1]} and {package}/{p.name}")
            found[version] = (package, p.name, p.read_text())
    return [(v, name, sql) for v, (_, name, sql) in sorted(found.items())]


def service_migration_packages(settings: Settings) -> list[str]:
    """The packages whose migrations the hosted services declare (services/catalog.py, plugins included)."""
    from services import catalog

    catalog.load_extra(settings)
    return [s.migrations for s in catalog.SPECS if s.migrations]


def migrate(settings: Settings) -> list[str]:
    """Apply pending migrations in order, each in its own transaction; returns the names applied."""
    applied: list[str] = []
    with connect(settings, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                         "version integer PRIMARY KEY, name text NOT NULL, "
                         "applied_at timestamptz NOT NULL DEFAULT now())")
            done = {r["version"] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in migrations(service_migration_packages(settings)):
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                applied.append(name)
                log.info("applied migration %s", name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    return applied


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def create_token(conn: psycopg.Connection, tenant_name: str, token_name: str = "",
                 ttl_seconds: float | None = None) -> tuple[str, str]:
    """Create the tenant if needed and a new API token for it (expiring after ttl_seconds, if given); returns
    (tenant_id, token). Only the token's hash is stored."""
    row = conn.execute("INSERT INTO tenants (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name "
                       "RETURNING id", (tenant_name,)).fetchone()
    token = "prx_" + secrets.token_urlsafe(32)
    conn.execute("INSERT INTO api_tokens (tenant_id, token_sha256, name, expires_at) VALUES (%s, %s, %s, "
                 "now() + make_interval(secs => %s))", (row["id"], hash_token(token), token_name, ttl_seconds))
    return str(row["id"]), token


def token_identity(conn: psycopg.Connection, token: str) -> dict | None:
    """{"tenant_id", "token_id", "token_name"} of a live token (not revoked, not expired), or None; records the
    use (the auth interceptor calls this at most once per cache period per token)."""
    row = conn.execute("UPDATE api_tokens SET last_used_at = now() WHERE token_sha256 = %s AND revoked_at IS NULL "
                       "AND (expires_at IS NULL OR expires_at > now()) RETURNING tenant_id, id, name",
                       (hash_token(token),)).fetchone()
    return None if row is None else {"tenant_id": str(row["tenant_id"]), "token_id": str(row["id"]),
                                     "token_name": row["name"]}


def list_tokens(conn: psycopg.Connection, tenant_name: str) -> list[dict]:
    """A tenant's tokens (never the secrets): id, name, created, expires, last used, revoked."""
    return list(conn.execute(
        "SELECT t.id, t.name, t.created_at, t.expires_at, t.last_used_at, t.revoked_at FROM api_tokens t "
        "JOIN tenants n ON n.id = t.tenant_id WHERE n.name = %s ORDER BY t.created_at", (tenant_name,)).fetchall())


def revoke_tokens(conn: psycopg.Connection, tenant_name: str, *, token_id: str | None = None,
                  token_name: str | None = None) -> int:
    """Revoke a tenant's token by id, or every live token with a name; returns how many. Servers stop accepting
    them within their auth cache period (PRAXON_GRPC__AUTH_CACHE_SECONDS)."""
    if (token_id is None) == (token_name is None):
        raise ValueError("give token_id or token_name")
    where, arg = ("t.id = %s::uuid", token_id) if token_id is not None else ("t.name = %s", token_name)
    rows = conn.execute(
        f"UPDATE api_tokens t SET revoked_at = now() FROM tenants n WHERE n.id = t.tenant_id AND n.name = %s "
        f"AND {where} AND t.revoked_at IS NULL RETURNING t.id", (tenant_name, arg)).fetchall()
    return len(rows)


def rotate_token(conn: psycopg.Connection, tenant_name: str, token_name: str,
                 ttl_seconds: float | None = None) -> tuple[str, str, int]:
    """A new token under `token_name`, and every older live token of that name revoked, in one transaction:
    (tenant_id, new token, how many were revoked)."""
    with conn.transaction():
        revoked = revoke_tokens(conn, tenant_name, token_name=token_name)
        tenant_id, token = create_token(conn, tenant_name, token_name, ttl_seconds=ttl_seconds)
    return tenant_id, token, revoked
