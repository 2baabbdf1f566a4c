-- Per-tenant quotas count a tenant's unfinished jobs at every submit.
CREATE INDEX jobs_unfinished_by_tenant ON jobs (tenant_id, kind) WHERE state IN ('QUEUED', 'RUNNING');
