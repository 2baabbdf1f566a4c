"""ModerationEngine: the one serving path of the moderation service (kserve's data-plane split). The gRPC servicer
(api.py), the kserve predictor (predictor.py) and the benchmarks all call it, so they answer alike by construction.

It owns the registry-backed model caches (guards and students by alias or version, with hot swap when an alias
moves; policy scorers; calibrations), the tenant thresholds (ModerationStore, short per-process cache) and the
dynamic batcher (concurrent requests share padded encoder batches). No grpc here."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.registry import Registry
from services.common.serving import ModelCache, RefKey
from services.moderation.decision import Item, ModerationResult, Thresholds
from services.moderation.policy_store import ModerationStore, StoredPolicy, StoredThresholds
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.serving import Batcher, Loaded, build_conformal, build_guard, build_scorer
from services.moderation.settings import ServingConfig
from services.moderation.taxonomy import ROLES


def check_text(text: str, field: str, max_bytes: int) -> str:
    """A text to moderate: at most max_bytes UTF-8 bytes (checked first, cheaply), not blank, at most
    MAX_TEXT_CHARS characters."""
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes):
        raise InvalidArgument(field, f"text is larger than {max_bytes} bytes", reason="TEXT_TOO_LARGE")
    if not text.strip():
        raise InvalidArgument(field, "must be a non-empty text", reason="EMPTY_TEXT")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_TEXT_CHARS} characters", reason="TEXT_TOO_LONG")
    return text


@dataclass(frozen=True)
class Extras:
    """What a request adds to the guard's answer: custom policies (+ the scorer) and a calibration model."""

    policies: tuple[StoredPolicy, ...] = ()
    scorer: Loaded | None = None
    policy_threshold: float | None = None  # None: the scorer's default
    calibration: Loaded | None = None
    group: str = ""


@dataclass(frozen=True)
class ModerationRequest:
    """One request to moderate, as the servicer and the predictor build it: the engine answers it in one call
    (handle). `prefix`: where these fields sit in the caller's message, so that errors name them."""

    tenant: str
    guard: RefKey
    items: tuple[Item, ...]
    policy_ids: tuple[str, ...] = ()
    scorer: RefKey | None = None            # the policy scorer (needed with policy_ids)
    policy_threshold: float | None = None   # None: the scorer's default
    calibration: RefKey | None = None       # a conformal calibration model: severity prediction sets
    group: str = ""
    prefix: str = ""


@dataclass(frozen=True)
class ModerationAnswer:
    """The guard that answered, a result per item, and (when policies or a calibration were asked) an Annotation
    per item with the calibration model it used."""

    guard: Loaded
    results: list[ModerationResult]
    annotations: list | None = None
    calibration: Loaded | None = None


@dataclass(frozen=True)
class Annotation:
    """Per text: policy verdicts (policies.ChunkVerdict, with the policy versions) and a severity set."""

    verdicts: tuple = ()
    policy_versions: dict | None = None
    severity_set: tuple[int, ...] | None = None


class ModerationEngine:
    def __init__(self, registry: Registry, store: ModerationStore, config: ServingConfig | None = None):
        self.config = config or ServingConfig()
        self.registry, self.store = registry, store
        self.guards = ModelCache(registry, build_guard, self.config, what="guard model")
        self.scorers = ModelCache(registry, build_scorer, self.config, what="policy scorer")
        self.calibrations = ModelCache(registry, build_conformal, self.config, what="calibration model")
        self.batcher = Batcher(max_batch=self.config.max_batch, max_wait_ms=self.config.max_wait_ms,
                               workers=self.config.batch_workers, max_queued=self.config.max_queued,
                               retry_after_s=self.config.retry_after_s)

    async def close(self) -> None:
        await self.batcher.close()
        for cache in (self.guards, self.scorers, self.calibrations):
            await cache.close()

    # -- request limits (one set for the servicer and the predictor, from ServingConfig)
    def check_batch_size(self, n: int, field: str) -> None:
        if n == 0:
            raise InvalidArgument(field, "at least one item is required", reason="EMPTY_REQUEST")
        if n > self.config.max_batch_items:
            raise InvalidArgument(field, f"at most {self.config.max_batch_items} items")

    def check_item(self, text: str, role: str, prompt: str, field: Callable[[str], str]) -> Item:
        """One text to moderate, with its role and (for a response, optional) the prompt it answers; field(part)
        names "text", "role" or "prompt" of this item in the caller's request."""
        check_text(text, field("text"), self.config.max_text_bytes)
        if role not in ROLES:
            raise InvalidArgument(field("role"), f"must be one of {list(ROLES)}")
        if prompt and role != "response":
            raise InvalidArgument(field("prompt"), "only a response is judged with a prompt")
        return Item(text, role, check_text(prompt, field("prompt"), self.config.max_text_bytes) if prompt else None)

    # -- models and thresholds
    async def model(self, key: RefKey, field: str = "model") -> Loaded:
        return await self.guards.get(key, field=field)

    def guard_key(self, tenant: str, name: str = "", version: int = 0, alias: str = "") -> RefKey:
        return RefKey(tenant, name or self.config.default_guard, version, alias)

    async def thresholds(self, tenant: str) -> StoredThresholds:
        hit = self.store.peek_thresholds(tenant)
        return hit if hit is not None else await asyncio.to_thread(self.store.get_thresholds, tenant, cached=True)

    # -- moderation
    async def moderate(self, tenant: str, key: RefKey, items: Sequence[Item], field: str = "model"
                       ) -> tuple[Loaded, list[ModerationResult]]:
        """Moderate texts with the model a reference serves now, under the tenant's thresholds (batched with
        concurrent requests)."""
        loaded = await self.model(key, field)
        th = (await self.thresholds(tenant)).thresholds
        return loaded, await self.batcher.submit_many(loaded.obj, list(items), th)

    async def open_stream(self, tenant: str, key: RefKey, role: str, prompt: str | None = None):
        from services.moderation.stream import StreamModerator

        loaded = await self.model(key)
        th = (await self.thresholds(tenant)).thresholds
        return loaded, StreamModerator(loaded.obj, th, role=role, prompt=prompt)

    async def handle(self, req: ModerationRequest) -> ModerationAnswer:
        """The whole of a moderation request: the guard's results (batched with concurrent requests), then the
        policies' verdicts and the severity sets it asked for."""
        guard, results = await self.moderate(req.tenant, req.guard, req.items, field=req.prefix + "model")
        extras = await self.extras(req.tenant, guard, policy_ids=req.policy_ids, scorer_key=req.scorer,
                                   policy_threshold=req.policy_threshold, calibration_key=req.calibration,
                                   group=req.group, prefix=req.prefix)
        if not extras.policies and extras.calibration is None:
            return ModerationAnswer(guard, results)
        annotations = await asyncio.to_thread(self.annotate, req.items, guard, extras)
        return ModerationAnswer(guard, results, annotations, extras.calibration)

    # -- policies and calibrations
    async def extras(self, tenant: str, guard: Loaded, *, policy_ids: Sequence[str], scorer_key: RefKey,
                     policy_threshold: float | None, calibration_key: RefKey | None, group: str, prefix: str = "",
                     ) -> Extras:
        policies, scorer, calib = [], None, None
        if policy_ids:
            policies = await asyncio.to_thread(self.store.latest_policies, tenant, list(policy_ids),
                                               prefix + "policy_ids")
            scorer = await self.scorers.get(scorer_key, field=prefix + "policy_scorer")
        if calibration_key is not None:
            if not calibration_key.name:
                raise InvalidArgument(prefix + "calibration_model.name", "required")
            calib = await self.calibrations.get(calibration_key, field=prefix + "calibration_model")
            want = str(calib.config.get("guard_model_version_id", ""))
            if want != guard.info.model_version_id:
                raise FailedPrecondition(
                    f"calibration model {calib.info.name} v{calib.info.version} was calibrated for guard version "
                    f"{want or '?'}, not {guard.info.name} v{guard.info.version} ({guard.info.model_version_id})",
                    reason="CALIBRATION_GUARD_MISMATCH")
        return Extras(tuple(policies), scorer, policy_threshold, calib, group)

    @staticmethod
    def annotate(items: Sequence[Item], guard: Loaded, extras: Extras) -> list[Annotation]:
        """Policy verdicts and severity prediction sets (blocking; run in a thread). A response with a prompt is
        checked against the policies with the prompt as context (policies.evaluate_policies)."""
        from services.common.minilm import get_base_encoder
        from services.moderation.policies import evaluate_policies

        versions = {sp.policy.policy_id: sp.version for sp in extras.policies}
        out = []
        for it in items:
            verdicts: tuple = ()
            sets = None
            if extras.policies:
                # The scorer was trained on the frozen base encoder's embeddings, whatever the guard's kind.
                verdicts = tuple(evaluate_policies(it.text, [sp.policy for sp in extras.policies], extras.scorer.obj,
                                                   get_base_encoder(), threshold=extras.policy_threshold,
                                                   context=it.prompt if it.role == "response" else None))
            if extras.calibration is not None:
                proba = guard.obj.predict_proba([it.text], [it.role], [it.prompt if it.role == "response" else None])
                sets = tuple(sorted(int(x) for x in extras.calibration.obj.prediction_sets(
                    proba, [extras.group] if extras.group else None)[0]))
            out.append(Annotation(verdicts, versions, sets))
        return out


def resolve_thresholds(model: Any, th: Thresholds) -> Thresholds:
    """The thresholds a model decides with (unset probabilities from its decision defaults)."""
    return th.resolve(getattr(model, "config", {}).get("decision_defaults"))
