// Live job progress: every element marked data-live (a running job's row, or a job page) is followed over one
// server-sent-events connection (/watch merges the jobs' WatchJob streams). Each event updates the job's progress
// bar, percentage, state and message, and on a job page adds a row to its event log, fills the start and end times
// and, once the job has ended, hides its cancel button and offers a reload for the result. Events already shown (a
// reconnect replays from the start) are skipped by their sequence number.
"use strict";

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

function follow() {
  const live = new Map();
  document.querySelectorAll("[data-live]").forEach((el) => live.set(el.dataset.job, 0));
  if (live.size === 0) return;
  const query = [...live.keys()].map((id) => "job=" + encodeURIComponent(id + ":0")).join("&");
  const source = new EventSource("/watch?" + query);
  source.onmessage = (message) => {
    const e = JSON.parse(message.data);
    if (e.error) { mark(e.job_id, "UNAVAILABLE"); return; }
    if (e.sequence <= (live.get(e.job_id) || 0)) return;
    live.set(e.job_id, e.sequence);
    show(e);
  };
  source.addEventListener("end", () => source.close());
}

function each(selector, jobId, fn) {
  document.querySelectorAll(selector + '[data-job="' + CSS.escape(jobId) + '"]').forEach(fn);
}

function mark(jobId, state) {
  each(".state", jobId, (el) => { el.textContent = state; el.className = "state " + state.toLowerCase(); });
}

function show(e) {
  each("progress.bar", e.job_id, (el) => { el.value = e.progress; });
  each(".pct", e.job_id, (el) => { el.textContent = Math.round(e.progress * 100) + "%"; });
  each(".message", e.job_id, (el) => { el.textContent = e.message; });
  mark(e.job_id, e.state);
  each("table.events", e.job_id, (table) => {
    const row = table.tBodies[0].insertRow();
    const metrics = Object.keys(e.metrics).sort().map((k) => k + "=" + Number(e.metrics[k]).toPrecision(4)).join(" ");
    [e.sequence, e.time, e.state, Math.round(e.progress * 100) + "%", e.message, metrics].forEach((text) => {
      row.insertCell().textContent = String(text);
    });
  });
  if (e.state === "RUNNING") {
    each(".started", e.job_id, (el) => { if (el.textContent.trim() === "-") el.textContent = e.time; });
  }
  if (TERMINAL.has(e.state)) {
    each("[data-live]", e.job_id, (el) => { delete el.dataset.live; el.dataset.ended = e.state; });
    each(".ended", e.job_id, (el) => { el.textContent = e.time; });
    each(".while-live", e.job_id, (el) => { el.hidden = true; });  // no cancelling an ended job
    each(".when-ended", e.job_id, (el) => { el.hidden = false; });
  }
}

document.addEventListener("DOMContentLoaded", follow);
