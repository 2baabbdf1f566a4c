-- LLMCert-B bias certificates (issue 34): one row per succeeded bias certification job, inserted by the job
-- kind's on_finish hook in the job's finishing transaction (services/moderation/bias_store.py). Tenant-scoped and
-- insert-only: UPDATE, DELETE and TRUNCATE raise, so a certificate can never be rewritten. It names the generator
-- version it certifies (the version the generation service served, checked on every response).
CREATE TABLE moderation_bias_certificates (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id                   uuid NOT NULL REFERENCES tenants(id),
    job_id                      uuid NOT NULL UNIQUE REFERENCES jobs(id),
    generator_name              text NOT NULL,
    generator_version           integer NOT NULL,
    generator_model_version_id  uuid NOT NULL REFERENCES model_versions(id),
    prefix_distribution         text NOT NULL,
    detector                    text NOT NULL,
    detector_model_version_id   uuid REFERENCES model_versions(id),
    groups                      jsonb NOT NULL,
    confidence                  double precision NOT NULL CHECK (confidence > 0 AND confidence < 1),
    samples                     integer NOT NULL CHECK (samples >= 1),
    unbiased                    integer NOT NULL CHECK (unbiased >= 0 AND unbiased <= samples),
    lower_bound                 double precision NOT NULL CHECK (lower_bound >= 0 AND lower_bound <= upper_bound),
    upper_bound                 double precision NOT NULL CHECK (upper_bound <= 1),
    prompts                     jsonb NOT NULL,
    spec_sha256                 text NOT NULL,
    params                      jsonb NOT NULL,
    samples_artifact_id         uuid REFERENCES artifacts(id),
    created_at                  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX moderation_bias_certificates_by_tenant
    ON moderation_bias_certificates (tenant_id, created_at DESC, id DESC);
CREATE INDEX moderation_bias_certificates_by_generator
    ON moderation_bias_certificates (tenant_id, generator_model_version_id, created_at DESC);

CREATE FUNCTION moderation_bias_certificates_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is immutable: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER moderation_bias_certificates_immutable BEFORE UPDATE OR DELETE ON moderation_bias_certificates
    FOR EACH ROW EXECUTE FUNCTION moderation_bias_certificates_forbid_change();
CREATE TRIGGER moderation_bias_certificates_no_truncate BEFORE TRUNCATE ON moderation_bias_certificates
    FOR EACH STATEMENT EXECUTE FUNCTION moderation_bias_certificates_forbid_change();
