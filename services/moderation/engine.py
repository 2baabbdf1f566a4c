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

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.registry import Registry
from services.common.serving import ModelCache, RefKey
from services.moderation.decision import Item, ModerationResult, Thresholds
from services.moderation.policy_store import ModerationStore, StoredPolicy, StoredThresholds, check_policy_id
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.serving import Batcher, EmbedBatcher, Loaded, build_conformal, build_guard, build_scorer
from services.moderation.settings import ServingConfig
from services.moderation.taxonomy import ROLES

MAX_POLICIES_PER_REQUEST = 32


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


def check_policy_threshold(value: float, field: str = "policy_threshold") -> float | None:
    """None (0, the field left unset): the policy scorer's own default, chosen on its training rows."""
    if value == 0:
        return None
    if not 0.0 < value < 1.0:
        raise InvalidArgument(field, "must be a probability strictly between 0 and 1 (0 for the scorer's default)")
    return float(value)


def check_policy_ids(ids: Sequence[str], field: str = "policy_ids") -> list[str]:
    """At most MAX_POLICIES_PER_REQUEST distinct, well-formed policy ids."""
    if len(ids) > MAX_POLICIES_PER_REQUEST:
        raise InvalidArgument(field, f"at most {MAX_POLICIES_PER_REQUEST} policies per request")
    seen: set[str] = set()
    for i, pid in enumerate(ids):
        check_policy_id(pid, f"{field}[{i}]")
        if pid in seen:
            raise InvalidArgument(f"{field}[{i}]", f"duplicate policy id {pid}")
        seen.add(pid)
    return list(ids)


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
        self.embedder = EmbedBatcher(max_batch=self.config.max_batch, max_wait_ms=self.config.max_wait_ms,
                                     workers=self.config.batch_workers, max_queued=self.config.max_queued,
                                     retry_after_s=self.config.retry_after_s)

    async def close(self) -> None:
        await self.batcher.close()
        await self.embedder.close()
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
    async def open_stream(self, tenant: str, key: RefKey, role: str, prompt: str | None = None):
        from services.moderation.stream import StreamModerator

        loaded = await self.model(key)
        th = (await self.thresholds(tenant)).thresholds
        return loaded, StreamModerator(loaded.obj, th, role=role, prompt=prompt)

    async def handle(self, req: ModerationRequest) -> ModerationAnswer:
        """The whole of a moderation request: the guard's results and, when asked, the policies' verdicts and the
        severity sets. Every encoder pass goes through the batchers: the guard's chunks together with each text's
        whole prediction that a calibration reads (one scorer call; free for a text of one chunk), and the base
        encoder's sentences, prompts and rules for the policies, concurrently."""
        guard = await self.model(req.guard, req.prefix + "model")
        extras = await self.extras(req.tenant, guard, policy_ids=req.policy_ids, scorer_key=req.scorer,
                                   policy_threshold=req.policy_threshold, calibration_key=req.calibration,
                                   group=req.group, prefix=req.prefix)
        th = (await self.thresholds(req.tenant)).thresholds
        whole = extras.calibration is not None
        if not extras.policies:
            results = await self.batcher.submit_many(guard.obj, list(req.items), th, whole=whole)
            if not whole:
                return ModerationAnswer(guard, results)
            return ModerationAnswer(guard, results, self.annotate(req.items, results, extras), extras.calibration)
        from services.common.minilm import get_base_encoder
        from services.moderation.policies import policy_texts

        policies = [sp.policy for sp in extras.policies]
        texts = [t for it in req.items for t in policy_texts(it.text, policies, policy_context(it))]
        # The scorer was trained on the frozen base encoder's embeddings, whatever the guard's kind.
        encoder = await asyncio.to_thread(get_base_encoder)
        results, table = await asyncio.gather(self.batcher.submit_many(guard.obj, list(req.items), th, whole=whole),
                                              self.embedder.embed(encoder, texts))
        annotations = await asyncio.to_thread(self.annotate, req.items, results, extras, table)
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
    def annotate(items: Sequence[Item], results: Sequence[ModerationResult], extras: Extras,
                 embeddings: dict | None = None) -> list[Annotation]:
        """Policy verdicts (over precomputed base-encoder embeddings: no encoder pass here) and severity prediction
        sets (from each result's whole-text prediction). A response with a prompt is checked against the policies
        with the prompt as context (policies.evaluate_policies)."""
        versions = {sp.policy.policy_id: sp.version for sp in extras.policies}
        if extras.policies:
            from services.moderation.policies import EmbeddingTable, evaluate_policies

            table = EmbeddingTable(embeddings or {})
        out = []
        for it, res in zip(items, results, strict=True):
            verdicts: tuple = ()
            sets = None
            if extras.policies:
                verdicts = tuple(evaluate_policies(it.text, [sp.policy for sp in extras.policies], extras.scorer.obj,
                                                   table, threshold=extras.policy_threshold,
                                                   context=policy_context(it)))
            if extras.calibration is not None:
                proba = {k: np.asarray(v)[None] for k, v in res.whole.items()}
                sets = tuple(sorted(int(x) for x in extras.calibration.obj.prediction_sets(
                    proba, [extras.group] if extras.group else None)[0]))
            out.append(Annotation(verdicts, versions, sets))
        return out


def policy_context(it: Item) -> str | None:
    """The context a text's policy checks read: a response's prompt."""
    return it.prompt if it.role == "response" else None


def resolve_thresholds(model: Any, th: Thresholds) -> Thresholds:
    """The thresholds a model decides with (unset probabilities from its decision defaults)."""
    return th.resolve(getattr(model, "config", {}).get("decision_defaults"))
