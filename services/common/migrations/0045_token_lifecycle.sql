-- API tokens: optional expiry, and when each was last used (written at most once per auth-cache period).
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN last_used_at timestamptz;
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at);
