"""Serving recommendation models: loading from the registry (safetensors) by name + version/alias, caching, hot swap
when an alias moves, request validation that needs the catalogue, and dynamic batching of concurrent requests into
one forward. No grpc here: the servicer (api.py), the kserve predictor (predictor.py) and the benchmark build on it.

Model references: a version number pins that version (immutable, loaded once); an alias follows the alias; neither
means the default alias ("production") and, while no version carries it, the latest version. Followed references are
re-resolved in the background at most every `alias_check_s`; when the version changed, the new one is loaded while
the old one keeps serving, then swapped in with one assignment (in-flight and new requests never fail because of a
swap: a request holds the Recommender object it started with).

Errors: a model that is not registered (or an alias that names nothing) -> FailedPrecondition (MODEL_NOT_REGISTERED);
a model still loading after `load_wait_s` -> Unavailable with retry_after_s (MODEL_LOADING); a registered version
that is not a recommendation model -> FailedPrecondition (NOT_A_RECOMMENDATION_MODEL).

(The cache mirrors services/moderation/serving.py's ModelCache; services may not import each other, so the shared
part is a candidate for services/common.)"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, PraxonError, Unavailable
from services.common.registry import Registry
from services.recommendation.jobs import REGISTRY_KIND, Recommender, load_recommender

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256


@dataclass(frozen=True)
class ServingConfig:
    """Knobs of the recommendation service (put one in app.extras["recommendation_config"] to override)."""

    default_model: str = "recommender"
    default_alias: str = "production"
    alias_check_s: float = 2.0         # a followed alias is re-resolved at most this often (hot swap latency)
    load_wait_s: float = 30.0          # a request waits this long for a loading model, then gets UNAVAILABLE
    retry_after_s: float = 1.0         # RetryInfo delay of UNAVAILABLE answers
    max_models: int = 4                # loaded model versions kept (LRU)
    max_batch: int = 64                # dynamic batching: at most this many histories per forward
    max_wait_ms: float = 2.0           # ... collected for at most this long after the first one arrives
    max_k: int = 1000                  # largest k served (also bounded by the catalogue size)
    max_history_items: int = 1000      # items in one history; the model reads only the most recent max_history
    max_batch_histories: int = 1024    # histories in one RecommendBatch


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: int
    model_version_id: str
    model_kind: str
    catalogue_size: int


@dataclass(frozen=True)
class Loaded:
    rec: Recommender
    info: VersionInfo


@dataclass(frozen=True)
class RefKey:
    tenant_id: str
    name: str
    version: int = 0
    alias: str = ""  # "" with version 0: the default alias, falling back to the latest version


@dataclass
class _Entry:
    version_id: str | None = None
    checked_at: float = float("-inf")
    task: asyncio.Task | None = None


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


class ModelCache:
    """Loaded recommendation models of every tenant. Use on one event loop."""

    def __init__(self, registry: Registry, config: ServingConfig):
        self.registry, self.config = registry, config
        self._entries: dict[RefKey, _Entry] = {}
        self._loaded: collections.OrderedDict[str, Loaded] = collections.OrderedDict()
        self._loading: dict[str, asyncio.Future] = {}
        self.swaps = 0

    def resolve(self, key: RefKey, field: str = "model") -> dict:
        """The registry row a reference points at now (blocking)."""
        reg = self.registry
        try:
            if key.version or key.alias:
                return reg.resolve(key.tenant_id, key.name, key.version, key.alias, field)
            try:
                return reg.resolve(key.tenant_id, key.name, 0, self.config.default_alias, field)
            except NotFound:
                return reg.resolve(key.tenant_id, key.name, 0, "", field)
        except NotFound:
            which = f"version {key.version}" if key.version else (f"alias {key.alias!r}" if key.alias else
                                                                  "version")
            raise FailedPrecondition(f"recommendation model {key.name!r} has no registered {which}; train one first",
                                     reason="MODEL_NOT_REGISTERED",
                                     metadata={"model": key.name, "version": str(key.version),
                                               "alias": key.alias}) from None

    def _load(self, tenant_id: str, row: dict) -> Loaded:
        tensors, config = self.registry.load_weights(tenant_id, row)
        return build_loaded(tensors, config, row)

    def _load_task(self, tenant_id: str, row: dict) -> asyncio.Future:
        vid = str(row["id"])
        task = self._loading.get(vid)
        if task is None:
            async def run() -> Loaded:
                try:
                    loaded = await asyncio.to_thread(self._load, tenant_id, row)
                    self._loaded[vid] = loaded
                    self._loaded.move_to_end(vid)
                    while len(self._loaded) > self.config.max_models:
                        self._loaded.popitem(last=False)
                    return loaded
                finally:
                    self._loading.pop(vid, None)
            task = self._loading[vid] = asyncio.ensure_future(run())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    def _cached(self, vid: str) -> Loaded | None:
        loaded = self._loaded.get(vid)
        if loaded is not None:
            self._loaded.move_to_end(vid)
        return loaded

    def _load_error(self, key: RefKey, exc: BaseException) -> PraxonError:
        if isinstance(exc, PraxonError):
            return exc
        log.error("recommendation model %s: loading failed", key.name, exc_info=exc)
        return Unavailable(f"recommendation model {key.name!r} could not be loaded; retry later",
                           retry_after_s=self.config.retry_after_s, reason="MODEL_LOAD_FAILED")

    async def _refresh(self, key: RefKey, entry: _Entry, field: str) -> None:
        try:
            row = await asyncio.to_thread(self.resolve, key, field)
            vid = str(row["id"])
            if vid != entry.version_id:
                loaded = self._cached(vid) or await asyncio.shield(self._load_task(key.tenant_id, row))
                log.info("recommendation model %s: now serving version %s", key.name, loaded.info.version)
                if entry.version_id is not None:
                    self.swaps += 1
                entry.version_id = vid
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the served version stays; the next check tries again
            log.warning("recommendation model %s: refresh failed, still serving %s: %s", key.name, entry.version_id,
                        self._load_error(key, exc).message)
        finally:
            entry.checked_at = time.monotonic()

    def _current(self, entry: _Entry) -> Loaded | None:
        if entry.version_id is None:
            return None
        loaded = self._cached(entry.version_id)
        if loaded is None:  # evicted (LRU): resolved and loaded again
            entry.version_id = None
        return loaded

    async def get(self, key: RefKey, *, field: str = "model", wait_s: float | None = None) -> Loaded:
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) > 10_000:
                self._entries.clear()
            entry = self._entries[key] = _Entry()
        current = self._current(entry)
        if current is not None:
            busy = entry.task is not None and not entry.task.done()
            if not key.version and not busy and time.monotonic() - entry.checked_at >= self.config.alias_check_s:
                entry.task = asyncio.ensure_future(self._refresh(key, entry, field))
            return current
        row = await asyncio.to_thread(self.resolve, key, field)
        vid = str(row["id"])
        loaded = self._cached(vid)
        if loaded is None:
            wait = self.config.load_wait_s if wait_s is None else wait_s
            try:
                loaded = await asyncio.wait_for(asyncio.shield(self._load_task(key.tenant_id, row)), max(wait, 0))
            except (asyncio.TimeoutError, TimeoutError):
                raise Unavailable(f"recommendation model {key.name!r} version {row['version']} is loading; retry "
                                  "shortly", retry_after_s=self.config.retry_after_s, reason="MODEL_LOADING") from None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise self._load_error(key, exc) from None
        if entry.version_id is None:
            entry.version_id, entry.checked_at = vid, time.monotonic()
        return loaded

    async def close(self) -> None:
        for e in self._entries.values():
            if e.task is not None and not e.task.done():
                e.task.cancel()


def parse_model_ref(text: str, default_name: str) -> tuple[str, int, str]:
    """"name", "name:3" or "name@alias" -> (name, version, alias)."""
    text = (text or "").strip() or default_name
    if "@" in text:
        name, _, alias = text.partition("@")
        return name, 0, alias
    if ":" in text:
        name, _, ver = text.partition(":")
        if not ver.isdigit() or int(ver) < 1:
            raise InvalidArgument("model", "expected name, name:VERSION or name@ALIAS")
        return name, int(ver), ""
    return text, 0, ""


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
    future: asyncio.Future = field(repr=False)


def run_grouped(items: Sequence[_Item]) -> list[Row | BaseException]:
    """Forward items grouped by (model, exclude_seen), in input order; a failing group is retried one by one so a
    bad item fails only its own request."""
    groups: dict[tuple[int, bool], list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault((id(it.rec), it.exclude_seen), []).append(i)
    out: list[Any] = [None] * len(items)
    for idx in groups.values():
        first = items[idx[0]]
        try:
            for i, r in zip(idx, rows_from(first.rec, [items[i].history for i in idx], [items[i].k for i in idx],
                                           first.exclude_seen), strict=True):
                out[i] = r
        except Exception:  # noqa: BLE001 - isolate the failing item(s)
            for i in idx:
                try:
                    out[i] = rows_from(items[i].rec, [items[i].history], [items[i].k], items[i].exclude_seen)[0]
                except Exception as exc:  # noqa: BLE001 - delivered to that request's caller
                    out[i] = exc
    return out


class Batcher:
    """Dynamic batching: concurrent requests are collected for up to max_wait_ms (or until max_batch histories),
    scored in one forward per model in a worker thread; each caller awaits its own future."""

    def __init__(self, *, max_batch: int = 64, max_wait_ms: float = 2.0):
        self.max_batch, self.max_wait_s = max(1, max_batch), max(0.0, max_wait_ms / 1000.0)
        self._items: collections.deque[_Item] = collections.deque()
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.batches = 0
        self.histories = 0

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._arrived = asyncio.Event()
            self._task = asyncio.ensure_future(self._run())

    def _enqueue(self, rec: Recommender, history: list[str], k: int, exclude_seen: bool) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._items.append(_Item(rec, history, k, exclude_seen, fut))
        return fut

    async def submit(self, rec: Recommender, history: list[str], k: int, exclude_seen: bool) -> Row:
        self._start()
        fut = self._enqueue(rec, history, k, exclude_seen)
        self._arrived.set()
        return await fut

    async def submit_many(self, rec: Recommender, histories: Sequence[list[str]], k: int,
                          exclude_seen: bool) -> list[Row]:
        """Enqueued together, so one request's histories go into as few forwards as possible."""
        self._start()
        futs = [self._enqueue(rec, h, k, exclude_seen) for h in histories]
        self._arrived.set()
        return list(await asyncio.gather(*futs))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._items:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            deadline = loop.time() + self.max_wait_s
            while len(self._items) < self.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except (asyncio.TimeoutError, TimeoutError):
                    break
            batch = [self._items.popleft() for _ in range(min(self.max_batch, len(self._items)))]
            batch = [b for b in batch if not b.future.done()]  # callers that gave up (deadline, cancel)
            if not batch:
                continue
            self.batches += 1
            self.histories += len(batch)
            try:
                results = await asyncio.to_thread(run_grouped, batch)
            except Exception as exc:  # noqa: BLE001 - never leave a caller hanging
                results = [exc] * len(batch)
            for b, r in zip(batch, results, strict=True):
                if b.future.done():
                    continue
                if isinstance(r, BaseException):
                    b.future.set_exception(r)
                else:
                    b.future.set_result(r)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        for b in self._items:
            if not b.future.done():
                b.future.set_exception(Unavailable("server shutting down", retry_after_s=1.0))
        self._items.clear()
