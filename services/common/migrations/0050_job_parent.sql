-- Child jobs (JobContext.start_child): the job that started a job, so that cancelling the parent cancels its
-- unfinished children and ListJobs can show a parent's children.
ALTER TABLE jobs ADD COLUMN parent_job_id uuid REFERENCES jobs(id);
CREATE INDEX jobs_by_parent ON jobs (parent_job_id) WHERE parent_job_id IS NOT NULL;
