-- Records forgotten from a dataset. Dataset readers exclude them, so a later training job on the same
-- dataset never sees deleted data. Staged with the unlearning job; committed when it succeeds.
CREATE TABLE dataset_tombstones (
    tenant_id            uuid NOT NULL REFERENCES tenants(id),
    dataset_artifact_id  uuid NOT NULL REFERENCES artifacts(id),
    record_id            text NOT NULL,
    job_id               uuid NOT NULL REFERENCES jobs(id),
    committed            boolean NOT NULL DEFAULT false,
    created_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dataset_artifact_id, record_id, job_id)
);
CREATE INDEX dataset_tombstones_committed ON dataset_tombstones (dataset_artifact_id) WHERE committed;
