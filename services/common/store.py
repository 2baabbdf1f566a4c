"""Artifact store over the `minio` SDK (MinIO in a cluster, SeaweedFS when embedded).
Objects are content-addressed under a per-tenant prefix; every read is checked against its sha256."""
from __future__ import annotations

import hashlib
import io
import logging
import time
from datetime import timedelta
from typing import Callable, TypeVar

import urllib3
from minio import Minio
from minio.error import S3Error, ServerError

from services.common.db import TRANSIENT_DB_ERRORS
from services.common.errors import IntegrityError, NotFound
from services.common.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# Transport-level failures (server restarting, connection refused/reset) are retried; 4xx answers are not.
TRANSIENT_STORE_ERRORS = (urllib3.exceptions.HTTPError, ServerError, ConnectionError, TimeoutError)
# S3 errors a server answers while it starts up or sheds load (a SeaweedFS just restarted answers InternalError
# for a moment); retried like a refused connection. A full disk is not: it does not clear in seconds.
TRANSIENT_S3_CODES = frozenset({"InternalError", "ServiceUnavailable", "SlowDown", "XAmzContentSHA256Mismatch"})


def store_error_is_transient(exc: BaseException) -> bool:
    if isinstance(exc, S3Error):
        return exc.code in TRANSIENT_S3_CODES
    return isinstance(exc, TRANSIENT_STORE_ERRORS)


def transient(exc: BaseException) -> bool:
    """The database or the object store failed in a way that retrying fixes: a restart, a dropped connection, a
    serialization conflict, an S3 server still starting up. Jobs re-queue on these and services answer UNAVAILABLE."""
    return isinstance(exc, TRANSIENT_DB_ERRORS) or store_error_is_transient(exc)


def retry(fn: Callable[[], T], *, what: str, attempts: int = 8, base_delay: float = 0.25,
          transient: Callable[[BaseException], bool] = store_error_is_transient) -> T:
    """Call fn, retrying transient errors with exponential backoff (capped at 5 s)."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not transient(exc):
                raise
            delay = min(5.0, base_delay * 2 ** (attempt - 1))
            log.warning("%s failed (%s: %s); retry %d/%d in %.2fs", what, type(exc).__name__, exc,
                        attempt, attempts - 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_key(tenant_id: str, sha256: str) -> str:
    return f"tenants/{tenant_id}/blobs/{sha256[:2]}/{sha256}"


class ArtifactStore:
    def __init__(self, settings: Settings):
        s3 = settings.s3
        # Short connect/read timeouts and no urllib3-level retries: retries are ours, with backoff.
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=3.0, read=60.0), retries=False, maxsize=16)
        self.client = Minio(s3.endpoint, access_key=s3.access_key.get_secret_value(),
                            secret_key=s3.secret_key.get_secret_value(), secure=s3.secure, region=s3.region,
                            http_client=http)
        self.bucket = s3.bucket
        self.part_size = s3.multipart_bytes
        self.presign_seconds = s3.presign_seconds

    def ensure_bucket(self) -> None:
        def make() -> None:
            if not self.client.bucket_exists(self.bucket):
                try:
                    self.client.make_bucket(self.bucket)
                except S3Error as exc:
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
        retry(make, what="ensure bucket")

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Upload; objects larger than the part size go up as multipart."""
        def put() -> None:
            self.client.put_object(self.bucket, key, io.BytesIO(data), len(data), content_type=content_type,
                                   part_size=self.part_size if len(data) > self.part_size else 0)
        retry(put, what=f"put {key}")

    def put_blob(self, tenant_id: str, data: bytes, content_type: str) -> tuple[str, str]:
        """Store content-addressed bytes; returns (object_key, sha256). Same content, same key."""
        digest = sha256_hex(data)
        key = blob_key(tenant_id, digest)
        self.put_bytes(key, data, content_type)
        return key, digest

    def get_bytes(self, key: str, sha256: str | None = None) -> bytes:
        def get() -> bytes:
            try:
                resp = self.client.get_object(self.bucket, key)
            except S3Error as exc:
                if exc.code in ("NoSuchKey", "NoSuchObject"):
                    raise NotFound(f"object {key} is missing from the store") from exc
                raise
            try:
                return resp.read()
            finally:
                resp.close()
                resp.release_conn()
        data = retry(get, what=f"get {key}")
        if sha256 is not None and sha256_hex(data) != sha256:
            raise IntegrityError(f"object {key} does not match its recorded sha256 (corrupted or replaced)")
        return data

    def stat_sha256(self, key: str) -> tuple[str, int]:
        """(sha256, size) computed from the stored bytes."""
        data = self.get_bytes(key)
        return sha256_hex(data), len(data)

    def delete(self, key: str) -> None:
        retry(lambda: self.client.remove_object(self.bucket, key), what=f"delete {key}")

    def presigned_get(self, key: str) -> str:
        return self.client.presigned_get_object(self.bucket, key, expires=timedelta(seconds=self.presign_seconds))

    def presigned_put(self, key: str) -> str:
        return self.client.presigned_put_object(self.bucket, key, expires=timedelta(seconds=self.presign_seconds))
