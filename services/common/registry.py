"""Artifacts and the model registry (versions, lineage, aliases), scoped by tenant.
Weights are safetensors only; reading them never unpickles."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from services.common.errors import InvalidArgument, NotFound
from services.common.jobs import parse_uuid
from services.common.store import ArtifactStore

ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SAFETENSORS = "application/vnd.safetensors"


def check_model_name(name: str, field: str = "name") -> str:
    if not NAME_RE.match(name or ""):
        raise InvalidArgument(field, "1-128 characters: letters, digits, '.', '_' or '-', starting alphanumeric")
    return name


@dataclass
class Registry:
    pool: ConnectionPool
    store: ArtifactStore

    # ---- artifacts ----
    def put_artifact(self, conn: Connection, tenant_id: str, name: str, data: bytes, content_type: str, *,
                     metadata: dict[str, Any] | None = None, job_id: str | None = None) -> dict:
        """Upload bytes and record them. A job's artifact stays staged until the job succeeds; writing the
        same name again in the same job (a resumed run) replaces it rather than adding a second."""
        key, digest = self.store.put_blob(tenant_id, data, content_type)
        return self.record_artifact(conn, tenant_id, name, key, digest, len(data), content_type,
                                    metadata=metadata, job_id=job_id)

    def record_artifact(self, conn: Connection, tenant_id: str, name: str, key: str, digest: str, size: int,
                        content_type: str, *, metadata: dict[str, Any] | None = None,
                        job_id: str | None = None) -> dict:
        if job_id is None:
            return conn.execute(
                "INSERT INTO artifacts (tenant_id, name, sha256, size_bytes, content_type, object_key, metadata) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *",
                (tenant_id, name, digest, size, content_type, key, Jsonb(metadata or {}))).fetchone()
        return conn.execute(
            "INSERT INTO artifacts (tenant_id, name, sha256, size_bytes, content_type, object_key, metadata, "
            "producing_job_id, committed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false) "
            "ON CONFLICT (producing_job_id, name) WHERE producing_job_id IS NOT NULL DO UPDATE SET "
            "sha256 = EXCLUDED.sha256, size_bytes = EXCLUDED.size_bytes, content_type = EXCLUDED.content_type, "
            "object_key = EXCLUDED.object_key, metadata = EXCLUDED.metadata RETURNING *",
            (tenant_id, name, digest, size, content_type, key, Jsonb(metadata or {}), job_id)).fetchone()

    def get_artifact(self, tenant_id: str, artifact_id: str, field: str = "artifact_id", *,
                     job_id: str | None = None) -> dict:
        """A committed artifact of the tenant (or one staged by `job_id`, for the job itself)."""
        artifact_id = parse_uuid(artifact_id, field)
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM artifacts WHERE id = %s AND tenant_id = %s "
                               "AND (committed OR producing_job_id = %s)",
                               (artifact_id, tenant_id, job_id)).fetchone()
        if row is None:
            raise NotFound(f"artifact {artifact_id} not found")
        return row

    def read_artifact(self, tenant_id: str, artifact_id: str, field: str = "artifact_id", *,
                      job_id: str | None = None) -> bytes:
        row = self.get_artifact(tenant_id, artifact_id, field, job_id=job_id)
        return self.store.get_bytes(row["object_key"], row["sha256"])

    # ---- models ----
    def stage_model(self, conn: Connection, tenant_id: str, job_id: str, name: str,
                    tensors: dict[str, torch.Tensor], *, kind: str, config: dict[str, Any],
                    metrics: dict[str, float] | None, dataset_artifact_id: str | None,
                    parent_version_ids: list[str]) -> dict:
        """Record a model version produced by a running job; it gets its number when the job succeeds."""
        check_model_name(name)
        weights = save_safetensors({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                                   metadata={"kind": kind})
        art = self.put_artifact(conn, tenant_id, f"model/{name}/weights.safetensors", weights, SAFETENSORS,
                                job_id=job_id)
        model = conn.execute("INSERT INTO models (tenant_id, name) VALUES (%s, %s) ON CONFLICT (tenant_id, name) "
                             "DO UPDATE SET name = EXCLUDED.name RETURNING id", (tenant_id, name)).fetchone()
        conn.execute("DELETE FROM model_versions WHERE producing_job_id = %s AND model_id = %s AND NOT committed",
                     (job_id, model["id"]))
        row = conn.execute(
            "INSERT INTO model_versions (model_id, tenant_id, kind, config, metrics, weights_artifact_id, "
            "producing_job_id, dataset_artifact_id, committed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false) "
            "RETURNING *",
            (model["id"], tenant_id, kind, Jsonb(config), Jsonb(_finite(metrics or {})), art["id"], job_id,
             dataset_artifact_id)).fetchone()
        for parent in parent_version_ids:
            conn.execute("INSERT INTO model_version_parents (version_id, parent_id) SELECT %s, id FROM model_versions "
                         "WHERE id = %s AND tenant_id = %s", (row["id"], parse_uuid(parent, "parent_version_ids"),
                                                              tenant_id))
        return row

    # ---- tombstones (records forgotten from a dataset) ----
    @staticmethod
    def stage_tombstones(conn: Connection, tenant_id: str, job_id: str, dataset_artifact_id: str,
                         record_ids: list[str]) -> None:
        if conn.execute("SELECT 1 FROM artifacts WHERE id = %s AND tenant_id = %s",
                        (dataset_artifact_id, tenant_id)).fetchone() is None:
            raise NotFound(f"dataset artifact {dataset_artifact_id} not found")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO dataset_tombstones (tenant_id, dataset_artifact_id, record_id, job_id) "
                            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                            [(tenant_id, dataset_artifact_id, str(r), job_id) for r in record_ids])

    def tombstones(self, tenant_id: str, dataset_artifact_id: str) -> set[str]:
        with self.pool.connection() as conn:
            return {r["record_id"] for r in conn.execute(
                "SELECT record_id FROM dataset_tombstones WHERE tenant_id = %s AND dataset_artifact_id = %s "
                "AND committed", (tenant_id, parse_uuid(dataset_artifact_id, "dataset_artifact_id")))}

    @staticmethod
    def commit_job_outputs(conn: Connection, job_id: str) -> None:
        # one statement (one round trip) for the tombstones, the artifacts and reading the staged versions
        staged = conn.execute(
            "WITH t AS (UPDATE dataset_tombstones SET committed = true WHERE job_id = %(job)s), "
            "a AS (UPDATE artifacts SET committed = true WHERE producing_job_id = %(job)s) "
            "SELECT id, model_id FROM model_versions WHERE producing_job_id = %(job)s AND NOT committed "
            "ORDER BY created_at", {"job": job_id}).fetchall()
        for row in staged:
            conn.execute("SELECT id FROM models WHERE id = %s FOR UPDATE", (row["model_id"],))
            conn.execute("UPDATE model_versions SET committed = true, version = (SELECT coalesce(max(version), 0) + 1 "
                         "FROM model_versions WHERE model_id = %s) WHERE id = %s", (row["model_id"], row["id"]))

    @staticmethod
    def discard_job_outputs(conn: Connection, job_id: str) -> None:
        conn.execute("DELETE FROM dataset_tombstones WHERE job_id = %s AND NOT committed", (job_id,))
        conn.execute("DELETE FROM model_versions WHERE producing_job_id = %s AND NOT committed", (job_id,))
        conn.execute("DELETE FROM artifacts WHERE producing_job_id = %s AND NOT committed", (job_id,))

    def resolve(self, tenant_id: str, name: str, version: int = 0, alias: str = "", field: str = "model") -> dict:
        """A committed version by number, alias, or the latest."""
        check_model_name(name, f"{field}.name")
        if version < 0:
            raise InvalidArgument(f"{field}.version", "must be >= 1 (or 0 for alias/latest)")
        if alias and not ALIAS_RE.match(alias):
            raise InvalidArgument(f"{field}.alias", "lowercase letters, digits, '-' and '_', at most 63")
        base = ("SELECT v.*, m.name FROM model_versions v JOIN models m ON m.id = v.model_id "
                "WHERE m.tenant_id = %s AND m.name = %s AND v.committed")
        with self.pool.connection() as conn:
            if version:
                row = conn.execute(base + " AND v.version = %s", (tenant_id, name, version)).fetchone()
            elif alias:
                row = conn.execute(base + " AND v.id = (SELECT version_id FROM model_aliases a WHERE "
                                   "a.model_id = m.id AND a.alias = %s)", (tenant_id, name, alias)).fetchone()
            else:
                row = conn.execute(base + " ORDER BY v.version DESC LIMIT 1", (tenant_id, name)).fetchone()
        if row is None:
            raise NotFound(f"model {name} ({'version ' + str(version) if version else alias or 'latest'}) not found")
        return row

    def version_by_id(self, tenant_id: str, version_id: str, field: str = "model_version_id") -> dict:
        version_id = parse_uuid(version_id, field)
        with self.pool.connection() as conn:
            row = conn.execute("SELECT v.*, m.name FROM model_versions v JOIN models m ON m.id = v.model_id "
                               "WHERE v.id = %s AND v.tenant_id = %s AND v.committed", (version_id, tenant_id)).fetchone()
        if row is None:
            raise NotFound(f"model version {version_id} not found")
        return row

    def load_weights(self, tenant_id: str, version: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        data = self.read_artifact(tenant_id, str(version["weights_artifact_id"]), job_id=version["producing_job_id"])
        return load_safetensors(data), dict(version["config"])

    def aliases(self, version_ids: list[str]) -> dict[str, list[str]]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT version_id, alias FROM model_aliases WHERE version_id = ANY(%s) ORDER BY alias",
                                (list(version_ids),)).fetchall()
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(str(r["version_id"]), []).append(r["alias"])
        return out

    def parents(self, version_id: str) -> list[str]:
        with self.pool.connection() as conn:
            return [str(r["parent_id"]) for r in conn.execute(
                "SELECT parent_id FROM model_version_parents WHERE version_id = %s", (version_id,))]

    def set_alias(self, tenant_id: str, name: str, alias: str, version: int) -> dict:
        if not ALIAS_RE.match(alias or ""):
            raise InvalidArgument("alias", "lowercase letters, digits, '-' and '_', at most 63, starting alphanumeric")
        if version < 1:
            raise InvalidArgument("version", "must be >= 1")
        row = self.resolve(tenant_id, name, version)
        with self.pool.connection() as conn:
            conn.execute("INSERT INTO model_aliases (model_id, alias, version_id) VALUES (%s, %s, %s) "
                         "ON CONFLICT (model_id, alias) DO UPDATE SET version_id = EXCLUDED.version_id, "
                         "updated_at = now()", (row["model_id"], alias, row["id"]))
        return row


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    """JSON has no NaN/inf; drop them rather than store invalid JSON."""
    out = {}
    for k, v in metrics.items():
        v = float(v)
        if v == v and v not in (float("inf"), float("-inf")):
            out[str(k)] = v
    return out
