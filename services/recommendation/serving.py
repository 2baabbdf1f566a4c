"""Serving recommendation models: the Recommender as loaded from the registry, request validation that needs the
catalogue, and dynamic batching of concurrent requests into one forward per model; the machinery (registry loading,
caching, hot swap when an alias moves, batching) is services/common/serving.py's. No grpc here: the servicer
(api.py), the kserve predictor (predictor.py) and the benchmark build on it. A swap never fails a request: a request
holds the Recommender object it started with.

Errors: besides the common ones (MODEL_NOT_REGISTERED, MODEL_LOADING), a registered version that is not a
recommendation model -> FailedPrecondition (NOT_A_RECOMMENDATION_MODEL)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.common import serving
from services.recommendation.settings import ServingConfig
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.serving import parse_model_ref as parse_model_ref  # re-exported for the CLI
from services.recommendation.recommender import REGISTRY_KIND, Recommender, load_recommender

MAX_ID_CHARS = 256


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: int
    model_version_id: str
    model_kind: str
    catalogue_size: int


@dataclass(frozen=True)
class Loaded:
    """What this service's ModelCache serves."""

    rec: Recommender
    info: VersionInfo


def build_loaded(tensors: dict, config: dict, row: dict) -> Loaded:
    """A registry row + its weights -> a ready Recommender (blocking)."""
    if row.get("kind") != REGISTRY_KIND:
        raise FailedPrecondition(f"model {row['name']} v{row['version']} is a {row.get('kind')!r} model, not a "
                                 "recommendation model", reason="NOT_A_RECOMMENDATION_MODEL")
    try:
        rec = load_recommender(tensors, config)
    except InvalidArgument as exc:
        raise FailedPrecondition(f"model {row['name']} v{row['version']} cannot be served: {exc.message}",
                                 reason="NOT_A_RECOMMENDATION_MODEL") from None
    return Loaded(rec, VersionInfo(row["name"], int(row["version"]), str(row["id"]), rec.kind, rec.n_items))


# ---------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Query:
    """A validated history: raw ids (catalogue-independent checks done) or catalogue indices (range checked later)."""

    ids: tuple[str, ...] | None = None
    indices: tuple[int, ...] | None = None


def check_k(k: int, config: ServingConfig, field: str = "k") -> int:
    if k < 1 or k > config.max_k:
        raise InvalidArgument(field, f"must be in 1..{config.max_k} (and at most the catalogue size)")
    return int(k)


def check_query(ids: Sequence[str], indices: Sequence[int], config: ServingConfig, field: str) -> Query:
    """Checks that need no model: one form only, size, well-formed ids."""
    if len(ids) and len(indices):
        raise InvalidArgument(f"{field}.item_ids", "give raw item_ids or item_indices, not both")
    n = max(len(ids), len(indices))
    if n > config.max_history_items:
        which = "item_ids" if len(ids) else "item_indices"
        raise InvalidArgument(f"{field}.{which}", f"{n} items; at most {config.max_history_items} per history "
                                                  "(the model reads only the most recent ones)",
                              reason="HISTORY_TOO_LONG")
    if len(indices):
        return Query(indices=tuple(int(i) for i in indices))
    for i, x in enumerate(ids):
        if not x or len(x) > MAX_ID_CHARS or not x.isprintable():
            raise InvalidArgument(f"{field}.item_ids[{i}]", f"an item id is 1..{MAX_ID_CHARS} printable characters")
    return Query(ids=tuple(ids))


def history_of(rec: Recommender, q: Query, field: str) -> list[str]:
    """Raw ids for the Recommender; catalogue indices must name catalogue items."""
    if q.indices is None:
        return list(q.ids or ())
    n = rec.n_items
    out = []
    for i, x in enumerate(q.indices):
        if not 1 <= x <= n:
            raise InvalidArgument(f"{field}.item_indices[{i}]", f"{x} is outside the catalogue 1..{n}",
                                  reason="ITEM_INDEX_OUT_OF_RANGE")
        out.append(rec.item_ids[x - 1])
    return out


def check_k_for(rec: Recommender, k: int, info: VersionInfo, field: str = "k") -> None:
    if k > rec.n_items:
        raise InvalidArgument(field, f"{k} is more than the {rec.n_items} items of {info.name} v{info.version}'s "
                                     "catalogue")


# ---------------------------------------------------------------------------------------------- results
POPULARITY_MODEL, EMPTY_HISTORY, NO_KNOWN_ITEMS, MODEL = "popularity_model", "empty_history", "no_known_items", "model"


@dataclass
class Row:
    """One ranked list: item indices (1..N), raw ids and float32 scores, best first (unfilled slots dropped)."""

    indices: list[int]
    ids: list[str]
    scores: list[float]
    scored_by: str
    fallback_reason: str
    unknown_ids: list[str]
    history_items_used: int


def rows_from(rec: Recommender, histories: Sequence[Sequence[str]], ks: Sequence[int], exclude_seen: bool
              ) -> list[Row]:
    """One forward for many histories (one k: the largest; each list is cut to its own k: the ranking is a total
    order, ties broken by the lower index, so a top-k is the prefix of a top-k' for k' >= k)."""
    kmax = max(ks)
    out = rec.recommend([list(h) for h in histories], k=kmax, exclude_seen=exclude_seen)
    scores, idxs = out.scores.tolist(), out.item_indices.tolist()
    rows = []
    for b, (hist, k) in enumerate(zip(histories, ks, strict=True)):
        keep = [j for j in range(k) if idxs[b][j] > 0]
        n_known = len(hist) - len(out.unknown_items[b])
        if rec.model is None:
            by = POPULARITY_MODEL
        elif not hist:
            by = EMPTY_HISTORY
        elif n_known == 0:
            by = NO_KNOWN_ITEMS
        else:
            by = MODEL
        rows.append(Row(indices=[idxs[b][j] for j in keep], ids=[out.ids[b][j] for j in keep],
                        scores=[scores[b][j] for j in keep], scored_by=by, fallback_reason=out.fallback[b] or "",
                        unknown_ids=list(out.unknown_items[b]),
                        history_items_used=min(n_known, rec.max_history) if by == MODEL else 0))
    return rows


# ---------------------------------------------------------------------------------------------- batching
@dataclass
class _Item:
    rec: Recommender
    history: list[str]
    k: int
    exclude_seen: bool


def forward_group(items: Sequence[_Item]) -> list[Row]:
    """One group of the batch (same model, same exclude_seen): one forward over its histories."""
    first = items[0]
    return rows_from(first.rec, [it.history for it in items], [it.k for it in items], first.exclude_seen)


def group_of(item: _Item) -> tuple[int, bool]:
    return id(item.rec), item.exclude_seen


class Batcher(serving.Batcher[_Item, Row]):
    """services.common.serving.Batcher grouped by (model, exclude_seen), one batch at a time (a batch is one forward
    per model and uses the cores itself); a failing group is retried item by item by the common batcher."""

    def __init__(self, *, max_batch: int = 64, max_wait_ms: float = 2.0, max_queued: int = 2048,
                 retry_after_s: float = 1.0):
        super().__init__(forward_group, max_batch=max_batch, max_wait_ms=max_wait_ms, workers=1, group_key=group_of,
                         max_queued=max_queued, retry_after_s=retry_after_s)

    @property
    def histories(self) -> int:
        return self.items

    async def submit(self, rec: Recommender, history: list[str], k: int, exclude_seen: bool) -> Row:
        return await self.run(_Item(rec, history, k, exclude_seen))

    async def submit_many(self, rec: Recommender, histories: Sequence[list[str]], k: int,
                          exclude_seen: bool) -> list[Row]:
        """Enqueued together, so one request's histories go into as few forwards as possible."""
        return await self.run_many([_Item(rec, h, k, exclude_seen) for h in histories])
