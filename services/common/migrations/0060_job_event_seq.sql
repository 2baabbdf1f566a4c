-- The seq of a job's last event, on the job row: with_event (services/common/jobs.py) numbers a new event from it
-- under the row's lock. (max(seq) + 1 over job_events, as before, read a snapshot older than that lock when the
-- statement had waited for it, and repeated the seq of the event it waited for.) A new job's first event is 1.
ALTER TABLE jobs ADD COLUMN event_seq bigint NOT NULL DEFAULT 1;
UPDATE jobs SET event_seq = coalesce((SELECT max(seq) FROM job_events e WHERE e.job_id = jobs.id), 0);
