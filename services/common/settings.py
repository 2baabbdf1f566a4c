"""One Settings object per process, read from PRAXON_* environment variables (nested with __),
built in __main__ / the CLI and passed down. Nothing here is read at import time."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class S3Settings(BaseModel):
    """Object store (MinIO in a cluster, SeaweedFS `weed mini` embedded)."""

    endpoint: str = "127.0.0.1:8333"
    access_key: SecretStr = SecretStr("praxon")
    secret_key: SecretStr = SecretStr("praxon-secret")
    bucket: str = "praxon"
    secure: bool = False
    region: str = "us-east-1"
    presign_seconds: int = Field(300, ge=1, le=3600)
    multipart_bytes: int = Field(16 * 1024 * 1024, ge=5 * 1024 * 1024)


class GrpcSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    grace_seconds: float = Field(10.0, ge=0)
    default_deadline_seconds: float = Field(30.0, gt=0)
    # Per API token: sustained calls per second and the burst above it (token bucket); 0 = unlimited.
    requests_per_second_per_token: float = Field(200.0, ge=0)
    request_burst_per_token: int = Field(400, ge=1)
    # A revoked or expired token stops working within this long (each server caches token lookups).
    auth_cache_seconds: float = Field(30.0, ge=0)
    # An unknown token's lookup is cached this long, so a flood of bad tokens cannot hammer the database; a token
    # created after a failed attempt works at most this long later.
    auth_negative_cache_seconds: float = Field(2.0, ge=0)
    # TLS (PEM files; empty: plaintext, for loopback or a mesh that encrypts). A client CA file turns on mTLS:
    # clients must present a certificate it signed.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""


class JobSettings(BaseModel):
    lease_seconds: float = Field(30.0, gt=0)
    heartbeat_seconds: float = Field(5.0, gt=0)
    reaper_interval_seconds: float = Field(5.0, gt=0)
    max_attempts: int = Field(5, ge=1)
    # torch intra-op threads of every process that runs models: each job process of a worker, `praxon serve`,
    # `praxon up` and a predictor (apply_torch_threads). 0: torch's default, one per core. Default 1: on a machine
    # whose cores are shared (other processes of the platform, other users) one thread is several times faster than
    # one per core (benchmarks/platform/torch_threads.py, RESULTS.md); a node given to one process can set its cores.
    torch_threads: int = Field(1, ge=0)
    # Quotas: unfinished (queued or running) jobs per tenant, and per tenant and job kind; 0 = no limit. A
    # submit over either gets RESOURCE_EXHAUSTED with RetryInfo (resubmitting a known idempotency key never does).
    max_active_per_tenant: int = Field(200, ge=0)
    max_active_per_tenant_kind: int = Field(50, ge=0)


class ServingConfig(BaseModel):
    """The knobs every model-serving service has; a service's settings section extends it (and may change the
    defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_alias: str = "production"
    alias_check_s: float = 2.0        # a followed alias is re-resolved at most this often (hot swap latency)
    load_wait_s: float = 10.0         # a request waits this long for a loading model, then gets UNAVAILABLE
    retry_after_s: float = 1.0        # RetryInfo delay of UNAVAILABLE answers
    max_models: int = 8               # loaded model versions kept per cache (LRU)
    max_batch: int = 32               # dynamic batching: at most this many requests per batch
    max_wait_ms: float = 2.0          # ... collected for at most this long after the first one arrives
    # Items waiting for a batch; more -> RESOURCE_EXHAUSTED (QUEUE_FULL) with retry_after_s. Two full
    # RecommendBatch requests or eight full ModerateBatch ones: room for bursts, while an overloaded server
    # answers at once instead of holding requests (and their texts) in memory without limit.
    max_queued: int = Field(2048, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PRAXON_", env_nested_delimiter="__", extra="ignore")

    database_url: SecretStr = SecretStr("postgresql://postgres@127.0.0.1:5432/praxon")
    database_pool_max: int = Field(10, ge=1)
    broker_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    s3: S3Settings = Field(default_factory=S3Settings)
    grpc: GrpcSettings = Field(default_factory=GrpcSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    metrics_port: int = Field(9464, ge=0, le=65535)
    log_level: str = "INFO"
    # Service specs hosted beside the built-in ones ("module:SPEC"): plugins, and the tests' own job kinds.
    extra_services: list[str] = Field(default_factory=list)


def apply_torch_threads(settings: Settings) -> int:
    """Set torch's intra-op thread count from settings.jobs.torch_threads (0: leave torch's default); returns the
    count torch now uses. Called by every process that serves or trains (servers, predictors, worker job
    processes), before their first model runs."""
    import torch

    n = settings.jobs.torch_threads
    if n and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
