-- The throwaway plugin's own table (applied by `praxon migrate` when PRAXON_EXTRA_SERVICES names the plugin): what
-- each finished echo.count job counted, written by the kind's on_finish hook in the job's finishing transaction.
CREATE TABLE echo_counts (
    job_id      uuid PRIMARY KEY REFERENCES jobs(id),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    counted     integer NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX echo_counts_by_tenant ON echo_counts (tenant_id, finished_at);
