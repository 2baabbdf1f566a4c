-- Moderation: per-tenant decision thresholds and versioned custom policies.

-- One row per tenant that set its thresholds (the others use the defaults).
-- levels: {"S1": 0..4, ..., "S11": 0..4}, every topic present (a topic blocks at its level and above).
CREATE TABLE moderation_thresholds (
    tenant_id          uuid PRIMARY KEY REFERENCES tenants(id),
    levels             jsonb NOT NULL,
    unsafe_threshold   double precision NOT NULL CHECK (unsafe_threshold > 0 AND unsafe_threshold < 1),
    topic_threshold    double precision NOT NULL CHECK (topic_threshold > 0 AND topic_threshold < 1),
    block_unspecified  boolean NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- A policy id of a tenant; its content lives in versions. Deleting marks it (versions stay, so the verdicts
-- already given keep naming a version that can be read); creating the id again continues its numbering.
CREATE TABLE moderation_policies (
    tenant_id       uuid NOT NULL REFERENCES tenants(id),
    policy_id       text NOT NULL,
    latest_version  integer NOT NULL CHECK (latest_version >= 1),
    deleted_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, policy_id)
);

-- chunks: [{"id": "C1", "name", "core_value", "blocked": [...], "allowed": [...]}] (validated by the service).
CREATE TABLE moderation_policy_versions (
    tenant_id     uuid NOT NULL,
    policy_id     text NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    display_name  text NOT NULL DEFAULT '',
    chunks        jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, policy_id, version),
    FOREIGN KEY (tenant_id, policy_id) REFERENCES moderation_policies (tenant_id, policy_id) ON DELETE CASCADE
);
