"""Serving the moderation models: the guards, policy scorers and calibrations as loaded from the registry, and the
dynamic batching of moderation requests; the machinery (registry loading, caching, hot swap when an alias moves,
batching) is services/common/serving.py's. No grpc here: the servicer (api.py) and the kserve predictor
(predictor.py) both build on this.

Errors: besides the common ones (MODEL_NOT_REGISTERED, MODEL_LOADING), a calibration model in a build without
conformal calibration -> FailedPrecondition (CALIBRATION_UNAVAILABLE)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common import serving
from services.common.errors import FailedPrecondition
from services.common.serving import parse_model_ref as parse_model_ref  # re-exported for the CLI
from services.moderation import decision
from services.moderation.decision import ModerationResult, Thresholds


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: int
    model_version_id: str
    fingerprint: str


@dataclass(frozen=True)
class Loaded:
    """What a ModelCache of this service serves: the model object, its version, its registry config."""

    obj: Any
    info: VersionInfo
    config: dict


def loaded(obj: Any, fingerprint: str, config: dict, row: dict) -> Loaded:
    return Loaded(obj, VersionInfo(row["name"], int(row["version"]), str(row["id"]), fingerprint), dict(config))


# ---------------------------------------------------------------------------------------------- batching
# (model, text + role + prompt, thresholds, whole: also the whole text's prediction, for a calibration)
Item = tuple[Any, decision.Item, Thresholds, bool]


def moderate_group(items: Sequence[Item]) -> list[ModerationResult]:
    """One group of the batch (same model, same thresholds) in padded encoder batches (one forward per chunk; see
    decision.SCORE_TOLERANCE for the parity this keeps)."""
    model, _, th, _ = items[0]
    return decision.score_items(model, [it[1] for it in items], th, batched=True, whole=[it[3] for it in items])


def group_of(item: Item) -> tuple[int, Thresholds]:
    return id(item[0]), item[2]


class Batcher(serving.Batcher[Item, ModerationResult]):
    """services.common.serving.Batcher grouped by (model, thresholds): concurrent requests' texts share padded
    encoder batches; a failing group is retried item by item by the common batcher."""

    def __init__(self, *, max_batch: int = 32, max_wait_ms: float = 2.0, workers: int = 0, max_queued: int = 2048,
                 retry_after_s: float = 1.0):
        super().__init__(moderate_group, max_batch=max_batch, max_wait_ms=max_wait_ms, workers=workers,
                         group_key=group_of, max_queued=max_queued, retry_after_s=retry_after_s)

    @property
    def texts(self) -> int:
        return self.items

    async def submit_many(self, model: Any, items: Sequence[decision.Item], thresholds: Thresholds, *,
                          whole: bool = False) -> list[ModerationResult]:
        """Results in order; whole: each result also carries its text's whole prediction (ModerationResult.whole)."""
        return await self.run_many([(model, it, thresholds, whole) for it in items])


# (encoder, text): a text the policy checks embed with the base encoder
EmbedItem = tuple[Any, str]


def embed_group(items: Sequence[EmbedItem]) -> list[Any]:
    """One encoder's texts: canonical embeddings (each text encoded alone and LRU-cached by the encoder, so policy
    verdicts stay bit-identical to evaluate_policies called directly)."""
    emb = items[0][0].embed([t for _, t in items])
    return list(emb)


class EmbedBatcher(serving.Batcher[EmbedItem, Any]):
    """The base encoder's passes for policy checks (sentences, prompts, policy rules) through the same queueing,
    limits and worker threads as the guard's batches."""

    def __init__(self, *, max_batch: int = 32, max_wait_ms: float = 2.0, workers: int = 0, max_queued: int = 2048,
                 retry_after_s: float = 1.0):
        super().__init__(embed_group, max_batch=max_batch, max_wait_ms=max_wait_ms, workers=workers,
                         group_key=lambda it: id(it[0]), max_queued=max_queued, retry_after_s=retry_after_s)

    async def embed(self, encoder: Any, texts: Sequence[str]) -> dict[str, Any]:
        """{text: embedding [384]} for the distinct texts."""
        uniq = list(dict.fromkeys(texts))
        rows = await self.run_many([(encoder, t) for t in uniq])
        return dict(zip(uniq, rows, strict=True))


# ---------------------------------------------------------------------------------------------- builders
# (tensors, config, version row) -> Loaded: the builders of this service's ModelCaches (blocking).
MODEL_KINDS = ("frozen_linear", "finetune", "gemma_frozen", "gemma_lora", "guard.student")


def build_guard(tensors: dict, config: dict, row: dict) -> Loaded:
    """A guard-like model by its config kind: the teacher guard (GuardModel: "frozen_linear", "finetune"; GemmaGuard:
    "gemma_frozen", "gemma_lora") or the HarmAug student (StudentGuard: "guard.student"); all answer Moderate, ModerateBatch, ModerateStream and the
    predictor, and the answer names the kind."""
    if config.get("kind") == "guard.student":
        from services.moderation.distill import StudentGuard

        student = StudentGuard.from_registry(tensors, config)
        return loaded(student, student.version, config, row)
    if config.get("kind") not in ("frozen_linear", "finetune", "gemma_frozen", "gemma_lora"):
        raise FailedPrecondition(f"model {row.get('name')!r} v{row.get('version')} is a {config.get('kind')!r}, "
                                 f"not one of {list(MODEL_KINDS)}", reason="NOT_A_GUARD_MODEL")
    from services.moderation.gemma_guard import guard_from_registry

    guard = guard_from_registry(tensors, config)  # GuardModel, or GemmaGuard: heads over a frozen LM's pair
    return loaded(guard, guard.version, config, row)


def build_scorer(tensors: dict, config: dict, row: dict) -> Loaded:
    import hashlib

    from services.moderation.policies import PolicyScorer

    scorer = PolicyScorer.from_registry(tensors, config)
    digest = hashlib.sha256(scorer.w.tobytes() + repr(scorer.b).encode()).hexdigest()[:16]
    return loaded(scorer, f"sha256:{digest}", config, row)


def build_conformal(tensors: dict, config: dict, row: dict) -> Loaded:
    try:
        from services.moderation.conformal import ConformalSeverity
    except ImportError:
        raise FailedPrecondition("conformal calibration is not available in this build",
                                 reason="CALIBRATION_UNAVAILABLE") from None
    cal = ConformalSeverity.from_registry(tensors, config)
    return loaded(cal, f"conformal:{row['id']}", config, row)
