"""What a long job sees of the platform. Every service's jobs.py is written against `JobContext`;
the worker (workers/) builds the real one over PostgreSQL and the object store, and
`InMemoryJobContext` runs the same job code in a unit test without Celery or services."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol

import torch

from services.common.errors import Cancelled, NotFound, PraxonError
from services.common.state import dumps_state, loads_state

CHILD_POLL_SECONDS = 2.0  # how soon a parent waiting for its child jobs looks again


class ChildJobsPending(Exception):
    """Raised by JobContext.wait_for_children (or start_child, when a quota refuses a child for now): the job
    cannot go on yet. The worker releases it (back to QUEUED, not an attempt, its checkpoint kept) and runs it
    again from the start after `retry_after_s`, so the worker is free to run the children meanwhile. The job
    function must therefore be safe to re-run: start_child is idempotent per key, and work done before the wait
    should be checkpointed or cheap."""

    def __init__(self, message: str, retry_after_s: float = CHILD_POLL_SECONDS):
        super().__init__(message)
        self.message, self.retry_after_s = message, float(retry_after_s)


@dataclass(frozen=True)
class ModelVersionInfo:
    name: str
    version: int | None  # assigned when the producing job succeeds (None while it runs)
    model_version_id: str


class JobContext(Protocol):
    job_id: str
    tenant_id: str
    kind: str
    params: Any  # the typed object of the kind's params model (validated at submit); a dict for a kind without one
    settings: Any  # the worker process's Settings, every service's section included (services.catalog.settings())

    def progress(self, fraction: float, message: str = "", **metrics: float) -> None:
        """Record progress in [0, 1] with optional scalar metrics (job_events row + NOTIFY)."""

    def check_cancelled(self) -> None:
        """Raise services.common.errors.Cancelled if cancellation was requested. Call at step boundaries."""

    def save_checkpoint(self, state: Any) -> None:
        """Persist nested state (dicts/lists of tensors and JSON scalars, e.g. state_dicts) to the object store."""

    def load_checkpoint(self) -> Any | None:
        """The last saved state, or None on a first run. A job resumed after a crash continues from here."""

    def read_artifact(self, artifact_id: str) -> bytes:
        """Bytes of one of this tenant's artifacts, sha256-verified."""

    def write_artifact(self, name: str, data: bytes, content_type: str,
                       metadata: dict[str, Any] | None = None) -> str:
        """Store bytes as an artifact produced by this job; returns the artifact id."""

    def register_model(self, name: str, tensors: dict[str, torch.Tensor], *, kind: str,
                       config: dict[str, Any], metrics: dict[str, float] | None = None,
                       dataset_artifact_id: str | None = None,
                       parent_version_ids: list[str] | None = None) -> ModelVersionInfo:
        """Register a new model version (weights as safetensors) with lineage to this job."""

    def load_model(self, model_version_id: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(tensors, config) of a registered model version of this tenant."""

    def forgotten_records(self, dataset_artifact_id: str) -> set[str]:
        """Record ids deleted from a dataset by unlearning. Every dataset reader must drop them."""

    def forget_records(self, dataset_artifact_id: str, record_ids: list[str]) -> None:
        """Tombstone records of a dataset; takes effect (for every later reader) when this job succeeds."""

    def start_child(self, kind: str, params: dict[str, Any], key: str) -> str:
        """Start a child job (same tenant) and return its id. Idempotent per `key` within this job: a resumed
        parent calling it again gets the same child. Cancelling this job cancels its unfinished children."""

    def wait_for_children(self, job_ids: list[str]) -> list[dict[str, Any]]:
        """The children's outcomes, in order, once every one has ended: {"job_id", "kind", "state" (SUCCEEDED |
        FAILED | CANCELLED), "result", "error_reason", "error_message", "seconds" (first start to end),
        "models" ([{"name", "version"}] committed)}. Raises ChildJobsPending while any is unfinished."""


class Steps(Protocol):
    """A long job as a small protocol (torchtune's recipe interface, without inheritance); `run_steps` owns resume,
    cancellation, checkpoints and progress, the job supplies only its work:

    total               how many steps the job takes (known after setup; a step may lower it: early stopping)
    setup(ctx)          build what the steps need (data, model, optimiser); cheap enough to redo on a resume
    step(i)             do step i (0-based); return scalar metrics for the progress event (or None)
    state() / load_state(state)
                        what a checkpoint holds (tensors, state_dicts, JSON scalars) and how to restore it
    result(ctx)         after the last step: write artifacts, register models, return the job's result dict"""

    total: int

    def setup(self, ctx: JobContext) -> None: ...

    def step(self, i: int) -> dict[str, float] | None: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def result(self, ctx: JobContext) -> dict[str, Any]: ...


def run_steps(ctx: JobContext, job: Steps, *, checkpoint_every: int = 1,
              message: Callable[[int, int], str] = lambda done, total: f"step {done}/{total}",
              progress_span: tuple[float, float] = (0.0, 0.99), fingerprint: str = "") -> dict[str, Any]:
    """Run a Steps job: resume from the last checkpoint (a killed worker's job continues where it was), check for
    cancellation before every step, checkpoint every `checkpoint_every` steps and after the last, report progress
    in `progress_span`, then hand over to job.result. A checkpoint is taken only at step boundaries, so a resumed
    job repeats at most the steps since the last one. `fingerprint` names what the steps compute from (e.g. a digest
    of the job's data): a checkpoint taken with another one (data changed by an upgrade between a crash and the
    resume) is not resumed. A step may also call ctx.progress itself, within what run_steps leaves it (e.g. below
    progress_span[0] during a long first step)."""
    if checkpoint_every < 1:
        raise ValueError("checkpoint_every must be >= 1")
    job.setup(ctx)
    saved = ctx.load_checkpoint()
    start = 0
    if (isinstance(saved, dict) and saved.get("protocol") == "steps" and saved.get("kind") == ctx.kind
            and saved.get("fingerprint", "") == fingerprint):
        job.load_state(saved["state"])
        start = int(saved["done"])
    lo, hi = progress_span
    i = start
    while i < max(int(job.total), 0):  # re-read: a step may shorten `total` (e.g. early stopping)
        ctx.check_cancelled()
        metrics = job.step(i) or {}
        i = done = i + 1
        total = max(int(job.total), 0)
        if done % checkpoint_every == 0 or done == total:
            ctx.save_checkpoint({"protocol": "steps", "kind": ctx.kind, "fingerprint": fingerprint, "done": done,
                                 "state": job.state()})
        ctx.progress(lo + (hi - lo) * done / max(total, 1), message(done, total),
                     **{k: float(v) for k, v in metrics.items()})
    ctx.check_cancelled()
    return job.result(ctx)


def _process_settings() -> Any:
    from services import catalog

    return catalog.settings()


@dataclass
class InMemoryJobContext:
    """Runs job code in-process for unit tests: same contract, dictionaries instead of services."""

    params: dict[str, Any]
    kind: str = "test"
    tenant_id: str = "00000000-0000-0000-0000-000000000001"
    job_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    cancel_after_progress: int | None = None  # raise Cancelled after this many progress calls (tests)
    events: list[tuple[float, str, dict[str, float]]] = field(default_factory=list)
    artifacts: dict[str, tuple[str, bytes, str, dict]] = field(default_factory=dict)
    models: dict[str, tuple[ModelVersionInfo, dict[str, torch.Tensor], dict[str, Any], dict]] = field(
        default_factory=dict)
    checkpoint: bytes | None = None
    checkpoints_saved: int = 0
    tombstones: dict[str, set[str]] = field(default_factory=dict)
    children: dict[str, dict[str, Any]] = field(default_factory=dict)  # child key -> outcome (wait_for_children)
    process_settings: Any = None  # None: built as a worker's (PRAXON_* variables) when a job first reads them

    @property
    def settings(self) -> Any:
        if self.process_settings is None:
            self.process_settings = _process_settings()
        return self.process_settings

    def progress(self, fraction: float, message: str = "", **metrics: float) -> None:
        self.events.append((float(fraction), message, dict(metrics)))

    def check_cancelled(self) -> None:
        if self.cancel_after_progress is not None and len(self.events) >= self.cancel_after_progress:
            raise Cancelled("job cancelled")

    def save_checkpoint(self, state: Any) -> None:
        self.checkpoint = dumps_state(state)
        self.checkpoints_saved += 1

    def load_checkpoint(self) -> Any | None:
        return None if self.checkpoint is None else loads_state(self.checkpoint)

    def add_artifact(self, data: bytes, name: str = "input", content_type: str = "application/octet-stream") -> str:
        """Test helper: put an input artifact in place."""
        return self.write_artifact(name, data, content_type)

    def read_artifact(self, artifact_id: str) -> bytes:
        if artifact_id not in self.artifacts:
            raise NotFound(f"artifact {artifact_id} not found")
        return self.artifacts[artifact_id][1]

    def write_artifact(self, name: str, data: bytes, content_type: str,
                       metadata: dict[str, Any] | None = None) -> str:
        aid = str(uuid.uuid4())
        self.artifacts[aid] = (name, bytes(data), content_type, dict(metadata or {}))
        return aid

    def register_model(self, name: str, tensors: dict[str, torch.Tensor], *, kind: str,
                       config: dict[str, Any], metrics: dict[str, float] | None = None,
                       dataset_artifact_id: str | None = None,
                       parent_version_ids: list[str] | None = None) -> ModelVersionInfo:
        # like the worker's context: the version number is assigned when the job succeeds, not before
        info = ModelVersionInfo(name=name, version=None, model_version_id=str(uuid.uuid4()))
        lineage = {"kind": kind, "metrics": dict(metrics or {}), "dataset_artifact_id": dataset_artifact_id,
                   "parent_version_ids": list(parent_version_ids or [])}
        self.models[info.model_version_id] = (info, {k: v.detach().clone() for k, v in tensors.items()},
                                              dict(config), lineage)
        return info

    def load_model(self, model_version_id: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        if model_version_id not in self.models:
            raise NotFound(f"model version {model_version_id} not found")
        _, tensors, config, _ = self.models[model_version_id]
        return tensors, config

    def forgotten_records(self, dataset_artifact_id: str) -> set[str]:
        return set(self.tombstones.get(dataset_artifact_id, set()))

    def forget_records(self, dataset_artifact_id: str, record_ids: list[str]) -> None:
        self.tombstones.setdefault(dataset_artifact_id, set()).update(str(r) for r in record_ids)

    def start_child(self, kind: str, params: dict[str, Any], key: str) -> str:
        """Runs the child inline, to its end, with the job kind's own function and typed params (as submit and the
        worker do); the child shares this context's artifacts, models and tombstones (the same tenant's stores)."""
        from services.common.jobs import catalog_kind, typed_params
        from services.common.spec import resolve

        self.check_cancelled()
        if key in self.children:
            return self.children[key]["job_id"]
        spec = catalog_kind(kind)
        if spec is None:
            raise NotFound(f"job kind {kind} is not available")
        child = InMemoryJobContext(params=typed_params(spec, params), kind=kind, tenant_id=self.tenant_id,
                                   artifacts=self.artifacts, models=self.models, tombstones=self.tombstones)
        out: dict[str, Any] = {"job_id": child.job_id, "kind": kind, "result": None, "error_reason": None,
                               "error_message": None}
        before = set(self.models)
        t0 = time.perf_counter()
        try:
            out["result"], out["state"] = resolve(spec.target)(child) or {}, "SUCCEEDED"
        except Cancelled:
            out["state"] = "CANCELLED"
        except PraxonError as exc:
            out.update(state="FAILED", error_reason=exc.reason, error_message=exc.message)
        out["seconds"] = time.perf_counter() - t0
        made = [m for m in self.models if m not in before]
        if out["state"] != "SUCCEEDED":  # as the worker's finish: a job that did not succeed leaves no model
            for m in made:
                del self.models[m]
            made = []
        out["models"] = [{"name": self.models[m][0].name, "version": None} for m in made]
        self.children[key] = out
        return child.job_id

    def wait_for_children(self, job_ids: list[str]) -> list[dict[str, Any]]:
        self.check_cancelled()
        by_id = {c["job_id"]: c for c in self.children.values()}
        missing = [j for j in job_ids if j not in by_id]
        if missing:
            raise NotFound(f"job {missing[0]} is not a child job of {self.job_id}")
        return [dict(by_id[j]) for j in job_ids]
