"""PostgreSQL storage of the moderation service: per-tenant thresholds and versioned custom policies
(migration 0004_moderation.sql). Blocking functions over a psycopg pool; the servicer runs them off the loop."""
from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from services.common.errors import AlreadyExists, FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from services.moderation.decision import Thresholds
from services.moderation.policies import Policy, validate_policy
from services.moderation.taxonomy import TOPICS

POLICY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_DISPLAY_NAME = 200


def check_policy_id(policy_id: str, field: str = "policy_id") -> str:
    if not POLICY_ID_RE.match(policy_id or ""):
        raise InvalidArgument(field, "1-63 characters: lowercase letters, digits, '.', '_' or '-', starting "
                                     "alphanumeric")
    return policy_id


@dataclass(frozen=True)
class StoredPolicy:
    policy: Policy
    version: int
    display_name: str
    created_at: datetime


@dataclass(frozen=True)
class StoredThresholds:
    thresholds: Thresholds
    is_default: bool
    updated_at: datetime | None


def _policy_from_row(row: dict) -> StoredPolicy:
    policy = validate_policy({"policy_id": row["policy_id"], "chunks": row["chunks"]})
    return StoredPolicy(policy, row["version"], row["display_name"], row["created_at"])


def _chunks_json(policy: Policy) -> list[dict[str, Any]]:
    return [{"id": c.id, "name": c.name, "core_value": c.core_value, "blocked": list(c.blocked),
             "allowed": list(c.allowed)} for c in policy.chunks]


def _opt_float(v) -> float | None:
    """NULL: the served model's decision default (migration 0010)."""
    return None if v is None else float(v)


class ModerationStore:
    """Thresholds (with a short per-process cache) and policies of every tenant."""

    def __init__(self, pool: ConnectionPool, *, thresholds_ttl_s: float = 1.0):
        self.pool = pool
        self.thresholds_ttl_s = thresholds_ttl_s
        self._cache: dict[str, tuple[float, StoredThresholds]] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- thresholds
    def get_thresholds(self, tenant_id: str, *, cached: bool = False) -> StoredThresholds:
        """The tenant's thresholds. cached=True may answer from this process's cache (at most ttl old; a
        SetThresholds through this process is seen at once, one through another replica within the ttl)."""
        now = time.monotonic()
        if cached:
            hit = self.peek_thresholds(tenant_id)
            if hit is not None:
                return hit
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM moderation_thresholds WHERE tenant_id = %s", (tenant_id,)).fetchone()
        if row is None:
            out = StoredThresholds(Thresholds(), True, None)
        else:
            out = StoredThresholds(Thresholds(tuple(int(row["levels"][t]) for t in TOPICS),
                                              _opt_float(row["unsafe_threshold"]), _opt_float(row["topic_threshold"]),
                                              bool(row["block_unspecified"])), False, row["updated_at"])
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[tenant_id] = (now + self.thresholds_ttl_s, out)
        return out

    def peek_thresholds(self, tenant_id: str) -> StoredThresholds | None:
        """The cached thresholds if fresh (non-blocking), else None."""
        with self._lock:
            hit = self._cache.get(tenant_id)
        return hit[1] if hit and hit[0] > time.monotonic() else None

    def set_thresholds(self, tenant_id: str, th: Thresholds) -> StoredThresholds:
        levels = {t: int(v) for t, v in zip(TOPICS, th.levels, strict=False)}
        with self.pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO moderation_thresholds (tenant_id, levels, unsafe_threshold, topic_threshold, "
                "block_unspecified) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id) DO UPDATE SET "
                "levels = EXCLUDED.levels, unsafe_threshold = EXCLUDED.unsafe_threshold, "
                "topic_threshold = EXCLUDED.topic_threshold, block_unspecified = EXCLUDED.block_unspecified, "
                "updated_at = now() RETURNING updated_at",
                (tenant_id, Jsonb(levels), th.unsafe_threshold, th.topic_threshold, th.block_unspecified)).fetchone()
        out = StoredThresholds(th, False, row["updated_at"])
        with self._lock:
            self._cache[tenant_id] = (time.monotonic() + self.thresholds_ttl_s, out)
        return out

    # ---------------------------------------------------------------- policies
    def create_policy(self, tenant_id: str, policy: Policy, display_name: str) -> StoredPolicy:
        check_policy_id(policy.policy_id)
        with self.pool.connection() as conn:
            head = conn.execute("SELECT * FROM moderation_policies WHERE tenant_id = %s AND policy_id = %s "
                                "FOR UPDATE", (tenant_id, policy.policy_id)).fetchone()
            if head is not None and head["deleted_at"] is None:
                raise AlreadyExists(f"policy {policy.policy_id} already exists; use UpdatePolicy",
                                    reason="POLICY_EXISTS")
            if head is None:
                head = conn.execute("INSERT INTO moderation_policies (tenant_id, policy_id, latest_version) "
                                    "VALUES (%s, %s, 1) ON CONFLICT DO NOTHING RETURNING *",
                                    (tenant_id, policy.policy_id)).fetchone()
                if head is None:  # a concurrent create won
                    raise AlreadyExists(f"policy {policy.policy_id} already exists", reason="POLICY_EXISTS")
                version = 1
            else:  # re-created after a delete: numbering continues
                version = head["latest_version"] + 1
                conn.execute("UPDATE moderation_policies SET latest_version = %s, deleted_at = NULL, "
                             "updated_at = now() WHERE tenant_id = %s AND policy_id = %s",
                             (version, tenant_id, policy.policy_id))
            row = self._insert_version(conn, tenant_id, policy, version, display_name)
        return _policy_from_row(row)

    @staticmethod
    def _insert_version(conn, tenant_id: str, policy: Policy, version: int, display_name: str) -> dict:
        return conn.execute(
            "INSERT INTO moderation_policy_versions (tenant_id, policy_id, version, display_name, chunks) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING *",
            (tenant_id, policy.policy_id, version, display_name, Jsonb(_chunks_json(policy)))).fetchone()

    def update_policy(self, tenant_id: str, policy: Policy, display_name: str | None,
                      expected_version: int = 0) -> StoredPolicy:
        check_policy_id(policy.policy_id)
        with self.pool.connection() as conn:
            head = conn.execute("SELECT * FROM moderation_policies WHERE tenant_id = %s AND policy_id = %s "
                                "AND deleted_at IS NULL FOR UPDATE", (tenant_id, policy.policy_id)).fetchone()
            if head is None:
                raise NotFound(f"policy {policy.policy_id} not found", reason="POLICY_NOT_FOUND")
            if expected_version and head["latest_version"] != expected_version:
                raise FailedPrecondition(f"policy {policy.policy_id} is at version {head['latest_version']}, "
                                         f"not {expected_version}", reason="POLICY_VERSION_MISMATCH",
                                         metadata={"current_version": str(head["latest_version"])})
            if display_name is None:
                display_name = conn.execute(
                    "SELECT display_name FROM moderation_policy_versions WHERE tenant_id = %s AND policy_id = %s "
                    "AND version = %s", (tenant_id, policy.policy_id, head["latest_version"])).fetchone()["display_name"]
            version = head["latest_version"] + 1
            conn.execute("UPDATE moderation_policies SET latest_version = %s, updated_at = now() "
                         "WHERE tenant_id = %s AND policy_id = %s", (version, tenant_id, policy.policy_id))
            row = self._insert_version(conn, tenant_id, policy, version, display_name)
        return _policy_from_row(row)

    def get_policy(self, tenant_id: str, policy_id: str, version: int = 0, field: str = "policy_id") -> StoredPolicy:
        check_policy_id(policy_id, field)
        if version < 0:
            raise InvalidArgument("version", "must be >= 1 (or 0 for the latest)")
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT v.* FROM moderation_policies p JOIN moderation_policy_versions v ON "
                "v.tenant_id = p.tenant_id AND v.policy_id = p.policy_id AND v.version = "
                + ("%s" if version else "p.latest_version") +
                " WHERE p.tenant_id = %s AND p.policy_id = %s AND p.deleted_at IS NULL",
                ((version,) if version else ()) + (tenant_id, policy_id)).fetchone()
        if row is None:
            raise NotFound(f"policy {policy_id}{' version ' + str(version) if version else ''} not found",
                           reason="POLICY_NOT_FOUND")
        return _policy_from_row(row)

    def latest_policies(self, tenant_id: str, policy_ids: list[str], field: str = "policy_ids") -> list[StoredPolicy]:
        """The latest versions of the given ids, in the given order. An unknown (or deleted) id is bad input of
        the request: INVALID_ARGUMENT naming policy_ids[i]."""
        for i, pid in enumerate(policy_ids):
            check_policy_id(pid, f"{field}[{i}]")
        if not policy_ids:
            return []
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT v.* FROM moderation_policies p JOIN moderation_policy_versions v ON "
                "v.tenant_id = p.tenant_id AND v.policy_id = p.policy_id AND v.version = p.latest_version "
                "WHERE p.tenant_id = %s AND p.policy_id = ANY(%s) AND p.deleted_at IS NULL",
                (tenant_id, list(set(policy_ids)))).fetchall()
        by_id = {r["policy_id"]: r for r in rows}
        missing = [f"{field}[{i}]" for i, pid in enumerate(policy_ids) if pid not in by_id]
        if missing:
            raise InvalidArgument(violations=[FieldViolation(f, "unknown policy id") for f in missing],
                                  reason="UNKNOWN_POLICY")
        return [_policy_from_row(by_id[pid]) for pid in policy_ids]

    def list_policies(self, tenant_id: str, size: int, token: str = "") -> tuple[list[StoredPolicy], str]:
        after = _decode_token(token) if token else ""
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT v.* FROM moderation_policies p JOIN moderation_policy_versions v ON "
                "v.tenant_id = p.tenant_id AND v.policy_id = p.policy_id AND v.version = p.latest_version "
                "WHERE p.tenant_id = %s AND p.deleted_at IS NULL AND p.policy_id > %s "
                "ORDER BY p.policy_id LIMIT %s", (tenant_id, after, size + 1)).fetchall()
        nxt = _encode_token(rows[size - 1]["policy_id"]) if len(rows) > size else ""
        return [_policy_from_row(r) for r in rows[:size]], nxt

    def delete_policy(self, tenant_id: str, policy_id: str) -> None:
        check_policy_id(policy_id)
        with self.pool.connection() as conn:
            row = conn.execute("UPDATE moderation_policies SET deleted_at = now(), updated_at = now() "
                               "WHERE tenant_id = %s AND policy_id = %s AND deleted_at IS NULL RETURNING policy_id",
                               (tenant_id, policy_id)).fetchone()
        if row is None:
            raise NotFound(f"policy {policy_id} not found", reason="POLICY_NOT_FOUND")


def _encode_token(policy_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"p": policy_id}).encode()).decode()


def _decode_token(token: str) -> str:
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))["p"]
        if not isinstance(value, str):
            raise ValueError
        return value
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeError):
        raise InvalidArgument("page_token", "malformed page token") from None
