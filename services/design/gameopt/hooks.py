"""What GameOpt does when a suggestion job ends (JobKind.on_finish of design.gameopt.suggest, called by the job store
inside the transaction of the job's terminal transition): for a campaign with a built-in oracle the job scored its
batch, and those scores become the campaign's observations in the same transaction (exactly once: a job succeeds
once, and the primary key makes a second insert a no-op). No torch, no algorithm: a server process cancelling a job
imports this too."""
from __future__ import annotations

from psycopg import Connection


def suggestion_finished(conn: Connection, job: dict) -> None:
    result = job["result"]
    if job["state"] != "SUCCEEDED" or not isinstance(result, dict) or not isinstance(
            result.get("oracle_observations"), list):
        return
    conn.execute(
        "INSERT INTO design_observations (campaign_id, sequence, replicate, value, source_job_id, round) "
        "SELECT s.campaign_id, o->>'sequence', 0, (o->>'value')::double precision, j.id, s.round "
        "FROM jobs j JOIN design_suggestion_jobs s ON s.job_id = j.id, "
        "jsonb_array_elements(j.result->'oracle_observations') o "
        "WHERE j.id = %s AND jsonb_typeof(o->'value') IN ('number', 'null') AND jsonb_typeof(o->'sequence') = 'string' "
        "ON CONFLICT DO NOTHING", (job["id"],))
