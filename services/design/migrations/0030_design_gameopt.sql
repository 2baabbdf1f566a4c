-- GameOpt design campaigns (issue 13). A campaign holds the design space and its constraints; observations are
-- idempotent per (campaign, sequence, replicate); every StartSuggestionJob inserts one design_suggestion_jobs row
-- in the same transaction as its job (its round number); the suggested batch is the job's result. For campaigns
-- with a built-in oracle the job scores its batch, and a trigger records those scores as observations in the
-- worker's finishing transaction (exactly once: the primary key makes a second insert a no-op).
CREATE TABLE design_campaigns (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id         uuid NOT NULL REFERENCES tenants(id),
    name              text NOT NULL,
    alphabet          text NOT NULL,
    length            integer NOT NULL CHECK (length > 0),
    allowed_letters   text[] NOT NULL DEFAULT '{}',
    parents           text[] NOT NULL DEFAULT '{}',
    max_edits         integer,
    forbidden_motifs  text[] NOT NULL DEFAULT '{}',
    batch_size        integer NOT NULL CHECK (batch_size > 0),
    direction         text NOT NULL CHECK (direction IN ('MAXIMIZE', 'MINIMIZE')),
    noise_std         double precision,
    oracle            jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
CREATE INDEX design_campaigns_by_tenant ON design_campaigns (tenant_id, created_at DESC, id DESC);

CREATE TABLE design_suggestion_jobs (
    job_id        uuid PRIMARY KEY REFERENCES jobs(id),
    campaign_id   uuid NOT NULL REFERENCES design_campaigns(id),
    round         integer NOT NULL,
    observations  integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (campaign_id, round)
);

CREATE TABLE design_observations (
    campaign_id    uuid NOT NULL REFERENCES design_campaigns(id),
    sequence       text NOT NULL,
    replicate      integer NOT NULL CHECK (replicate >= 0),
    value          double precision NOT NULL,
    source_job_id  uuid REFERENCES jobs(id),
    round          integer NOT NULL DEFAULT 0,
    observed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign_id, sequence, replicate)
);
CREATE INDEX design_observations_by_time ON design_observations (campaign_id, observed_at, sequence);

-- A suggestion job's oracle observations are recorded by its kind's on_finish hook,
-- services/design/gameopt/hooks.py. (Databases migrated before issue 38 had a trigger on the jobs table here; 0070
-- drops it, so both histories end with the same schema.)
