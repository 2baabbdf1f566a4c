-- praxon schema v1: tenants and tokens, jobs and their events, artifacts, the model registry.
CREATE TABLE tenants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- API tokens are stored as sha256 of the secret; the secret is shown once at creation.
CREATE TABLE api_tokens (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     uuid NOT NULL REFERENCES tenants(id),
    token_sha256  bytea NOT NULL UNIQUE,
    name          text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

CREATE TABLE jobs (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id          uuid NOT NULL REFERENCES tenants(id),
    kind               text NOT NULL,
    queue              text NOT NULL,
    state              text NOT NULL CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    params             jsonb NOT NULL DEFAULT '{}',
    result             jsonb,
    error_reason       text,
    error_message      text,
    progress           double precision NOT NULL DEFAULT 0,
    message            text NOT NULL DEFAULT '',
    idempotency_key    text,
    attempts           integer NOT NULL DEFAULT 0,
    cancel_requested   boolean NOT NULL DEFAULT false,
    lease_owner        text,
    lease_expires_at   timestamptz,
    enqueued_at        timestamptz,
    checkpoint_key     text,
    checkpoint_sha256  text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, created_at DESC, id DESC);
CREATE INDEX jobs_by_lease ON jobs (lease_expires_at) WHERE state = 'RUNNING';
CREATE INDEX jobs_queued ON jobs (enqueued_at) WHERE state = 'QUEUED';

CREATE TABLE job_events (
    job_id      uuid NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    state       text NOT NULL,
    progress    double precision NOT NULL,
    message     text NOT NULL DEFAULT '',
    metrics     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, seq)
);

-- Artifacts written by a job stay staged (committed = false) until the job succeeds, so a cancelled,
-- failed or re-run job never leaves a second set behind.
CREATE TABLE artifacts (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id         uuid NOT NULL REFERENCES tenants(id),
    name              text NOT NULL,
    sha256            text NOT NULL,
    size_bytes        bigint NOT NULL,
    content_type      text NOT NULL,
    object_key        text NOT NULL,
    metadata          jsonb NOT NULL DEFAULT '{}',
    producing_job_id  uuid REFERENCES jobs(id),
    committed         boolean NOT NULL DEFAULT true,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX artifacts_one_per_job_name ON artifacts (producing_job_id, name) WHERE producing_job_id IS NOT NULL;
CREATE INDEX artifacts_by_tenant ON artifacts (tenant_id, created_at DESC);

-- Presigned uploads waiting for CompleteUpload.
CREATE TABLE uploads (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     uuid NOT NULL REFERENCES tenants(id),
    name          text NOT NULL,
    content_type  text NOT NULL,
    sha256        text NOT NULL,
    object_key    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);

CREATE TABLE models (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- A version number is assigned when the producing job succeeds (staged rows have none).
CREATE TABLE model_versions (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    model_id             uuid NOT NULL REFERENCES models(id),
    tenant_id            uuid NOT NULL REFERENCES tenants(id),
    version              integer,
    kind                 text NOT NULL,
    config               jsonb NOT NULL DEFAULT '{}',
    metrics              jsonb NOT NULL DEFAULT '{}',
    weights_artifact_id  uuid NOT NULL REFERENCES artifacts(id),
    producing_job_id     uuid REFERENCES jobs(id),
    dataset_artifact_id  uuid REFERENCES artifacts(id),
    committed            boolean NOT NULL DEFAULT true,
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, version)
);
CREATE UNIQUE INDEX model_versions_one_per_job_model ON model_versions (producing_job_id, model_id)
    WHERE producing_job_id IS NOT NULL;

CREATE TABLE model_version_parents (
    version_id  uuid NOT NULL REFERENCES model_versions(id) ON DELETE CASCADE,
    parent_id   uuid NOT NULL REFERENCES model_versions(id),
    PRIMARY KEY (version_id, parent_id)
);

CREATE TABLE model_aliases (
    model_id    uuid NOT NULL REFERENCES models(id),
    alias       text NOT NULL,
    version_id  uuid NOT NULL REFERENCES model_versions(id),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, alias)
);
