-- Issue 38: what a service does when its jobs end is its JobKind's on_finish hook, a Python function the job store
-- calls inside the transaction of every terminal transition (services/unlearning/hooks.py,
-- services/design/gameopt/hooks.py), no longer a trigger on the shared jobs table matching kind strings. The hooks do
-- exactly what these trigger functions did.
DROP TRIGGER IF EXISTS jobs_unlearning_finished ON jobs;
DROP FUNCTION IF EXISTS unlearning_job_finished();
DROP TRIGGER IF EXISTS jobs_design_suggestion_finished ON jobs;
DROP FUNCTION IF EXISTS design_suggestion_finished();
