"""Datasets of the moderation jobs: a labeled dataset artifact (praxon / BingoGuard / WildGuardMix JSONL) or the
packaged set (the seed set, or the real-request pairs for the Gemma guards), and its train / validation split."""
from __future__ import annotations

import zlib

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.moderation.schema import (
    GuardExample,
    import_bingoguard,
    import_wildguardmix,
    load_packaged_dataset,
    parse_guard_jsonl,
)


def packaged_for(kind: str | None) -> str:
    """The packaged set a guard of `kind` trains on without a dataset: the Gemma kinds the real-request pairs they
    were measured on, the MiniLM kinds the seed set (schema.PACKAGED_DATASETS)."""
    from services.moderation.params import GEMMA_KINDS

    return "real_requests" if kind in GEMMA_KINDS else "seed"


def load_guard(ctx: JobContext, model_version_id: str):
    """A registered guard of any kind (a teacher), as gemma_guard.guard_from_registry reads it."""
    from services.moderation.gemma_guard import guard_from_registry

    tensors, config = ctx.load_model(model_version_id)
    return guard_from_registry(tensors, config, version=model_version_id)


def load_examples(ctx: JobContext, dataset_artifact_id: str | None, fmt: str, packaged: str = "seed"
                  ) -> list[GuardExample]:
    """The rows of a dataset artifact, or without one the packaged set `packaged` (schema.PACKAGED_DATASETS)."""
    if dataset_artifact_id is None:
        return load_packaged_dataset(packaged)
    data = ctx.read_artifact(dataset_artifact_id)
    if fmt == "praxon":
        return parse_guard_jsonl(data)
    rows = import_bingoguard(data) if fmt == "bingoguard" else import_wildguardmix(data)
    if not rows:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset produced no labeled rows")
    return rows


def split_examples(rows: list[GuardExample], validation_fraction: float) -> tuple[list[GuardExample],
                                                                                  list[GuardExample]]:
    """The rows' own split when any row has one (train = "train"; validation = "validation"); otherwise a fixed
    hash-of-text split so the same text always lands on the same side."""
    if any(r.split for r in rows):
        return [r for r in rows if r.split == "train"], [r for r in rows if r.split == "validation"]
    cut = int(validation_fraction * 2**32)
    val = [zlib.crc32(r.text.encode()) < cut for r in rows]
    return [r for r, v in zip(rows, val, strict=False) if not v], [r for r, v in zip(rows, val, strict=False) if v]
