-- Unlearning records (issue 7). One row per StartUnlearningJob request, inserted in the same transaction as
-- its job; its outcome (certificate, new model version) and its audits are inserted once, by a trigger, when
-- the job reaches a terminal state (in the worker's finishing transaction). All three tables are
-- insert-only: UPDATE, DELETE and TRUNCATE raise, so a record can never be rewritten.
CREATE TABLE unlearning_records (
    id                       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id                uuid NOT NULL REFERENCES tenants(id),
    job_id                   uuid NOT NULL UNIQUE REFERENCES jobs(id),
    token_id                 uuid REFERENCES api_tokens(id),
    token_name               text NOT NULL DEFAULT '',
    request_id               text NOT NULL DEFAULT '',
    source_model_version_id  uuid NOT NULL REFERENCES model_versions(id),
    source_model_name        text NOT NULL,
    source_model_version     integer NOT NULL,
    dataset_artifact_id      uuid NOT NULL REFERENCES artifacts(id),
    forget_record_ids        text[] NOT NULL,
    forget_set_artifact_id   uuid REFERENCES artifacts(id),
    method                   text NOT NULL,
    epsilon                  double precision,
    delta                    double precision,
    reason                   text NOT NULL DEFAULT '',
    params                   jsonb NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unlearning_records_by_tenant ON unlearning_records (tenant_id, created_at DESC, id DESC);

CREATE TABLE unlearning_outcomes (
    record_id             uuid PRIMARY KEY REFERENCES unlearning_records(id),
    job_id                uuid NOT NULL UNIQUE REFERENCES jobs(id),
    state                 text NOT NULL,
    result                jsonb,
    new_model_version_id  uuid REFERENCES model_versions(id),
    error_reason          text,
    error_message         text,
    finished_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE unlearning_audits (
    job_id         uuid PRIMARY KEY REFERENCES jobs(id),
    record_id      uuid NOT NULL REFERENCES unlearning_records(id),
    state          text NOT NULL,
    result         jsonb,
    error_reason   text,
    error_message  text,
    finished_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unlearning_audits_by_record ON unlearning_audits (record_id, finished_at);

CREATE FUNCTION unlearning_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is immutable: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER unlearning_records_immutable BEFORE UPDATE OR DELETE ON unlearning_records
    FOR EACH ROW EXECUTE FUNCTION unlearning_forbid_change();
CREATE TRIGGER unlearning_records_no_truncate BEFORE TRUNCATE ON unlearning_records
    FOR EACH STATEMENT EXECUTE FUNCTION unlearning_forbid_change();
CREATE TRIGGER unlearning_outcomes_immutable BEFORE UPDATE OR DELETE ON unlearning_outcomes
    FOR EACH ROW EXECUTE FUNCTION unlearning_forbid_change();
CREATE TRIGGER unlearning_outcomes_no_truncate BEFORE TRUNCATE ON unlearning_outcomes
    FOR EACH STATEMENT EXECUTE FUNCTION unlearning_forbid_change();
CREATE TRIGGER unlearning_audits_immutable BEFORE UPDATE OR DELETE ON unlearning_audits
    FOR EACH ROW EXECUTE FUNCTION unlearning_forbid_change();
CREATE TRIGGER unlearning_audits_no_truncate BEFORE TRUNCATE ON unlearning_audits
    FOR EACH STATEMENT EXECUTE FUNCTION unlearning_forbid_change();

-- What happens when an unlearning job ends (its outcome and audit rows) is the job kinds' on_finish hook,
-- services/unlearning/hooks.py. (Databases migrated before issue 38 had a trigger on the jobs table here; 0070
-- drops it, so both histories end with the same schema.)
