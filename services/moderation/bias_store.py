"""LLMCert-B certificates in PostgreSQL (migration 0081): written once by the moderation.certify_bias kind's on_finish
hook, in the job's finishing transaction, from the job's result; read tenant-scoped by the servicer (another
tenant's certificate is NOT_FOUND). The table is insert-only (triggers), so a certificate is never rewritten.
Light: no numpy / torch (the servicer imports it)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from services.common.errors import NotFound
from services.common.jobs import decode_page_token, encode_page_token, parse_uuid

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
COLUMNS = ("id, tenant_id, job_id, generator_name, generator_version, generator_model_version_id, "
           "prefix_distribution, detector, detector_model_version_id, groups, confidence, samples, unbiased, "
           "lower_bound, upper_bound, prompts, spec_sha256, params, samples_artifact_id, created_at")


def _uuid(value: Any) -> str | None:
    return value if isinstance(value, str) and UUID_RE.fullmatch(value) else None


def certificate_finished(conn: Connection, job: dict) -> None:
    """on_finish of moderation.certify_bias: a SUCCEEDED job's result becomes its certificate (once: job_id is
    unique). The numbers come from the job's own result; nothing here may fail the transition on a malformed one
    (it is skipped), as the unlearning hooks do."""
    if job.get("state") != "SUCCEEDED":
        return
    r, p = job.get("result"), job.get("params")
    if not isinstance(r, dict) or not isinstance(p, dict):
        return
    cert = r.get("certificate")
    gen = _uuid(p.get("generator_model_version_id"))
    if not isinstance(cert, dict) or gen is None:
        return
    try:
        samples, unbiased = int(cert["samples"]), int(cert["unbiased"])
        lo, hi, conf = float(cert["lower"]), float(cert["upper"]), float(cert["confidence"])
    except (KeyError, TypeError, ValueError):
        return
    conn.execute(
        "INSERT INTO moderation_bias_certificates (tenant_id, job_id, generator_name, generator_version, "
        "generator_model_version_id, prefix_distribution, detector, detector_model_version_id, groups, confidence, "
        "samples, unbiased, lower_bound, upper_bound, prompts, spec_sha256, params, samples_artifact_id) "
        "SELECT j.tenant_id, j.id, %s, %s, v.id, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        "(SELECT a.id FROM artifacts a WHERE a.id = %s AND a.tenant_id = j.tenant_id) "
        "FROM jobs j JOIN model_versions v ON v.id = %s AND v.tenant_id = j.tenant_id WHERE j.id = %s "
        "ON CONFLICT (job_id) DO NOTHING",
        (str(p.get("generator_name", "")), int(p.get("generator_version", 0)), str(p.get("prefix_distribution")),
         str(p.get("detector")), _uuid(p.get("detector_model_version_id")), Jsonb(list(p.get("groups", []))), conf,
         samples, unbiased, lo, hi, Jsonb(cert.get("prompts", [])), str(cert.get("spec_sha256", "")), Jsonb(p),
         _uuid(r.get("samples_artifact_id")), gen, job["id"]))


@dataclass(frozen=True)
class Certificate:
    id: str
    job_id: str
    generator_name: str
    generator_version: int
    generator_model_version_id: str
    prefix_distribution: str
    detector: str
    detector_model_version_id: str
    groups: list[str]
    confidence: float
    samples: int
    unbiased: int
    lower: float
    upper: float
    prompts: list[dict[str, Any]]
    spec_sha256: str
    params: dict[str, Any]
    samples_artifact_id: str
    created_at: datetime


def _cert(row: dict) -> Certificate:
    return Certificate(
        id=str(row["id"]), job_id=str(row["job_id"]), generator_name=row["generator_name"],
        generator_version=int(row["generator_version"]),
        generator_model_version_id=str(row["generator_model_version_id"]),
        prefix_distribution=row["prefix_distribution"], detector=row["detector"],
        detector_model_version_id=str(row["detector_model_version_id"] or ""), groups=list(row["groups"]),
        confidence=float(row["confidence"]), samples=int(row["samples"]), unbiased=int(row["unbiased"]),
        lower=float(row["lower_bound"]), upper=float(row["upper_bound"]), prompts=list(row["prompts"]),
        spec_sha256=row["spec_sha256"], params=dict(row["params"]),
        samples_artifact_id=str(row["samples_artifact_id"] or ""), created_at=row["created_at"])


class BiasCertificates:
    def __init__(self, pool: ConnectionPool):
        self.pool = pool

    def get(self, tenant_id: str, certificate_id: str, field: str = "certificate_id") -> Certificate:
        cid = parse_uuid(certificate_id, field)
        with self.pool.connection() as conn:
            row = conn.execute(f"SELECT {COLUMNS} FROM moderation_bias_certificates WHERE id = %s AND tenant_id = %s",
                               (cid, tenant_id)).fetchone()
        if row is None:
            raise NotFound(f"bias certificate {certificate_id} not found")
        return _cert(row)

    def list(self, tenant_id: str, size: int, token: str = "", generator_model_version_id: str = ""
             ) -> tuple[list[Certificate], str]:
        sql = f"SELECT {COLUMNS} FROM moderation_bias_certificates WHERE tenant_id = %s"
        args: list[Any] = [tenant_id]
        if generator_model_version_id:
            sql += " AND generator_model_version_id = %s"
            args.append(parse_uuid(generator_model_version_id, "generator_model_version_id"))
        if token:
            at, last = decode_page_token(token)
            sql += " AND (created_at, id) < (%s, %s)"
            args += [at, last]
        sql += " ORDER BY created_at DESC, id DESC LIMIT %s"
        args.append(size + 1)
        with self.pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        out = [_cert(r) for r in rows[:size]]
        nxt = encode_page_token(rows[size - 1]["created_at"], str(rows[size - 1]["id"])) if len(rows) > size else ""
        return out, nxt
