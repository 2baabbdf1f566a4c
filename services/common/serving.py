"""Serving registered models, for any service: loading from the registry by name + version/alias, caching, hot swap
when an alias moves, and dynamic batching of concurrent requests. Generic over what a model loads into (a service
passes a builder) and over what a batch computes (a service passes run_batch). No grpc, no torch at import: the
servicers (api.py), the kserve predictors (predictor.py) and the benchmarks build on it.

Model references: a version number pins that version (immutable, loaded once); an alias follows the alias; neither
means the default alias ("production") and, while no version carries it, the latest version. Followed references
are re-resolved in the background at most every `alias_check_s`; when the version changed, the new one is loaded
while the old one keeps serving, then swapped in with one assignment (in-flight and new requests never fail because
of a swap: a request holds the object it started with).

Errors: a model that is not registered (or an alias that names nothing) -> FailedPrecondition
(MODEL_NOT_REGISTERED); a model still loading after `load_wait_s` -> Unavailable with retry_after_s
(MODEL_LOADING); a load that failed with anything but the project's own errors -> Unavailable (MODEL_LOAD_FAILED).
A builder's own errors (e.g. FailedPrecondition for a version of another kind) reach the caller as they are."""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from services.common.errors import (FailedPrecondition, InvalidArgument, NotFound, PraxonError, ResourceExhausted,
                                   Unavailable)
from services.common.modelref import split_model_ref
from services.common.registry import Registry
from services.common.settings import ServingConfig

log = logging.getLogger(__name__)

T = TypeVar("T")  # what a model version loads into
Item = TypeVar("Item")      # a batched request
Result = TypeVar("Result")  # its result


@dataclass(frozen=True)
class RefKey:
    tenant_id: str
    name: str
    version: int = 0
    alias: str = ""   # "" with version 0: the default alias, falling back to the latest version


def ref_key(tenant_id: str, ref: Any, default_name: str) -> RefKey:
    """A praxon.common.v1.ModelRef-like object (name, version, alias) -> RefKey; empty name -> the default."""
    name = getattr(ref, "name", "") or default_name
    version = int(getattr(ref, "version", 0) or 0)
    alias = getattr(ref, "alias", "") or ""
    return RefKey(tenant_id, name, version, alias)


def parse_model_ref(text: str, default_name: str) -> tuple[str, int, str]:
    """"name", "name:3" or "name@alias" -> (name, version, alias) (the one parser, services.common.modelref);
    a malformed reference -> InvalidArgument on the field "model"."""
    try:
        return split_model_ref(text, default_name)
    except ValueError:
        raise InvalidArgument("model", "expected name, name:VERSION or name@ALIAS") from None


@dataclass
class _Entry:
    version_id: str | None = None        # what this reference serves now
    checked_at: float = float("-inf")    # monotonic time of the last resolution
    task: asyncio.Task | None = None     # background re-resolution in progress


Builder = Callable[[dict, dict, dict], T]  # (tensors, config, version row) -> the loaded object (blocking)


class ModelCache(Generic[T]):
    """Loaded models of one kind for every tenant: `builder` turns a version's weights into the served object.
    Use on one event loop (resolve() and load_now() are blocking and may run anywhere; warm() before the loop uses
    the cache)."""

    def __init__(self, registry: Registry, builder: Builder[T], config: ServingConfig, *, what: str = "model",
                 default_alias: str | None = None):
        self.registry, self.builder, self.config, self.what = registry, builder, config, what
        self.default_alias = config.default_alias if default_alias is None else default_alias
        self._entries: dict[RefKey, _Entry] = {}
        self._loaded: collections.OrderedDict[str, T] = collections.OrderedDict()  # version id -> model
        self._loading: dict[str, asyncio.Future] = {}
        self.swaps = 0  # alias moves served (for tests and metrics)

    # -- blocking
    def resolve(self, key: RefKey, field: str = "model") -> dict:
        """The registry row a reference points at now (blocking)."""
        reg = self.registry
        try:
            if key.version or key.alias:
                return reg.resolve(key.tenant_id, key.name, key.version, key.alias, field)
            try:
                return reg.resolve(key.tenant_id, key.name, 0, self.default_alias, field)
            except NotFound:
                return reg.resolve(key.tenant_id, key.name, 0, "", field)
        except NotFound:
            which = f"version {key.version}" if key.version else (f"alias {key.alias!r}" if key.alias else
                                                                  "version")
            raise FailedPrecondition(f"{self.what} {key.name!r} has no registered {which}; train one first",
                                     reason="MODEL_NOT_REGISTERED",
                                     metadata={"model": key.name, "version": str(key.version),
                                               "alias": key.alias}) from None

    def load_now(self, key: RefKey, field: str = "model") -> T:
        """Resolve and build a reference once, bypassing the cache (blocking; for predictors and tools)."""
        return self._load(key.tenant_id, self.resolve(key, field))

    def warm(self, key: RefKey, field: str = "model") -> T:
        """Resolve and load a reference now (blocking) and keep it, so that the first get() serves it without
        loading it again: for a predictor that must be ready before its server starts."""
        row = self.resolve(key, field)
        return self._keep(str(row["id"]), self._load(key.tenant_id, row))

    def _load(self, tenant_id: str, row: dict) -> T:
        tensors, config = self.registry.load_weights(tenant_id, row)
        return self.builder(tensors, config, row)

    def _keep(self, vid: str, loaded: T) -> T:
        """Cache a loaded version as the most recently used, evicting the least recently used beyond max_models."""
        self._loaded[vid] = loaded
        self._loaded.move_to_end(vid)
        while len(self._loaded) > self.config.max_models:
            self._loaded.popitem(last=False)
        return loaded

    # -- async
    def _load_task(self, tenant_id: str, row: dict) -> asyncio.Future:
        """The (shared) load of one version; the loaded model enters the cache even if no caller waits for it."""
        vid = str(row["id"])
        task = self._loading.get(vid)
        if task is None:
            async def run() -> T:
                try:
                    return self._keep(vid, await asyncio.to_thread(self._load, tenant_id, row))
                finally:
                    self._loading.pop(vid, None)
            task = self._loading[vid] = asyncio.ensure_future(run())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved"
        return task

    def _cached(self, vid: str) -> T | None:
        loaded = self._loaded.get(vid)
        if loaded is not None:
            self._loaded.move_to_end(vid)
        return loaded

    def _load_error(self, key: RefKey, exc: BaseException) -> PraxonError:
        if isinstance(exc, PraxonError):
            return exc
        log.error("%s %s: loading failed", self.what, key.name, exc_info=exc)
        return Unavailable(f"{self.what} {key.name!r} could not be loaded; retry later",
                           retry_after_s=self.config.retry_after_s, reason="MODEL_LOAD_FAILED")

    async def _refresh(self, key: RefKey, entry: _Entry, field: str) -> None:
        """Background re-resolution of a followed alias: load the new version, then swap it in."""
        try:
            row = await asyncio.to_thread(self.resolve, key, field)
            vid = str(row["id"])
            if vid != entry.version_id:
                if self._cached(vid) is None:
                    await asyncio.shield(self._load_task(key.tenant_id, row))
                log.info("%s %s: now serving version %s (%s)", self.what, key.name, row["version"], vid)
                if entry.version_id is not None:
                    self.swaps += 1
                entry.version_id = vid
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the served version stays; the next check tries again
            log.warning("%s %s: refresh failed, still serving %s: %s", self.what, key.name, entry.version_id,
                        self._load_error(key, exc).message)
        finally:
            entry.checked_at = time.monotonic()

    def _current(self, entry: _Entry) -> T | None:
        if entry.version_id is None:
            return None
        loaded = self._cached(entry.version_id)
        if loaded is None:  # evicted (LRU): resolved and loaded again on the next request
            entry.version_id = None
        return loaded

    async def get(self, key: RefKey, *, field: str = "model", wait_s: float | None = None) -> T:
        """The model a reference serves now. A reference seen for the first time is resolved at once (a missing
        model fails with FAILED_PRECONDITION), then its weights load; the caller waits up to `wait_s` (default
        load_wait_s) for them, else gets Unavailable (MODEL_LOADING) with a retry delay while the load goes on."""
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) > 10_000:
                self._entries.clear()
            entry = self._entries[key] = _Entry()
        current = self._current(entry)
        if current is not None:
            busy = entry.task is not None and not entry.task.done()
            if not key.version and not busy and time.monotonic() - entry.checked_at >= self.config.alias_check_s:
                entry.task = asyncio.ensure_future(self._refresh(key, entry, field))  # hot swap in the background
            return current
        row = await asyncio.to_thread(self.resolve, key, field)
        vid = str(row["id"])
        loaded = self._cached(vid)
        if loaded is None:
            wait = self.config.load_wait_s if wait_s is None else wait_s
            try:
                loaded = await asyncio.wait_for(asyncio.shield(self._load_task(key.tenant_id, row)), max(wait, 0))
            except (asyncio.TimeoutError, TimeoutError):
                raise Unavailable(f"{self.what} {key.name!r} version {row['version']} is loading; retry shortly",
                                  retry_after_s=self.config.retry_after_s, reason="MODEL_LOADING") from None
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


# ---------------------------------------------------------------------------------------------- batching
def default_batch_workers() -> int:
    """Concurrent batches: two per group of torch threads (one computes while the other prepares / hands results
    back), so that they fill the cores without oversubscribing them much."""
    import os

    import torch

    return max(1, 2 * (os.cpu_count() or 1) // max(1, torch.get_num_threads()))


@dataclass
class _Pending(Generic[Item]):
    item: Item
    future: asyncio.Future


def _run_checked(run_batch: Callable[[list[Item]], Sequence[Result | BaseException]],
                 batch: list[Item]) -> list[Result | BaseException]:
    results = list(run_batch(batch))
    if len(results) != len(batch):
        raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
    return results


def run_grouped(run_batch: Callable[[list[Item]], Sequence[Result | BaseException]], items: Sequence[Item],
                group_key: Callable[[Item], Hashable]) -> list[Result | BaseException]:
    """run_batch over the items of each group (same group_key; groups in order of first appearance, items in input
    order within a group), results back in input order. A group whose run_batch raises (or returns the wrong
    number of results) is retried item by item, so one bad item fails only its own request; an item that fails on
    its own gets its exception as its result."""
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(group_key(item), []).append(i)
    out: list[Any] = [None] * len(items)
    for idx in groups.values():
        try:
            for i, r in zip(idx, _run_checked(run_batch, [items[i] for i in idx]), strict=True):
                out[i] = r
        except Exception as exc:  # noqa: BLE001 - delivered to the failing items' callers
            if len(idx) == 1:  # already alone: running it again would repeat its work and side effects
                out[idx[0]] = exc
                continue
            for i in idx:  # isolate the failing item(s)
                try:
                    out[i] = _run_checked(run_batch, [items[i]])[0]
                except Exception as item_exc:  # noqa: BLE001 - delivered to that request's caller
                    out[i] = item_exc
    return out


class Batcher(Generic[Item, Result]):
    """Dynamic batching: concurrent requests are collected for up to max_wait_ms (or until max_batch of them), then
    `run_batch(items) -> results` (one result or exception per item, in order; blocking) runs them in a worker
    thread; each caller awaits its own result. Up to `workers` batches run at once (0: default_batch_workers());
    the queue is shared among them, and while they all run, new requests queue up and form the next batch. With
    workers=1 a batch takes everything queued (up to max_batch) when the previous one is done.

    group_key: items that can share one run_batch call (e.g. the same loaded model and options) have the same key;
    with it, run_batch sees one group at a time and a failing group is retried item by item (run_grouped), so a
    service writes only the per-group computation. Without it, run_batch gets the whole batch and an exception
    fails every item of the batch.

    max_queued bounds the items waiting for a batch (not those already in a running batch, at most workers *
    max_batch): a request whose items would take the queue past it gets RESOURCE_EXHAUSTED (QUEUE_FULL) with a
    retry delay of retry_after_s at once, so an overloaded server answers rather than holding every request in
    memory. A request larger than the bound on its own is admitted when the queue is empty (its size is bounded
    by the service's own request limits), so no valid request is refused forever.
    A service subclasses it with typed submit methods that build its items and call run() / run_many()."""

    def __init__(self, run_batch: Callable[[list[Item]], Sequence[Result | BaseException]], *, max_batch: int = 32,
                 max_wait_ms: float = 2.0, workers: int = 1, group_key: Callable[[Item], Hashable] | None = None,
                 max_queued: int = 2048, retry_after_s: float = 1.0):
        if group_key is not None:
            per_group = run_batch

            def run_batch(items: list[Item]) -> list[Result | BaseException]:
                return run_grouped(per_group, items, group_key)
        self.run_batch = run_batch
        self.group_key = group_key
        self.max_batch, self.max_wait_s = max(1, max_batch), max(0.0, max_wait_ms / 1000.0)
        self.workers = workers
        self.max_queued, self.retry_after_s = max(1, max_queued), retry_after_s
        self._pending: collections.deque[_Pending[Item]] = collections.deque()
        self._arrived: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self.batches = 0  # batches run (for tests and metrics)
        self.items = 0    # requests they held
        self.rejected = 0  # items refused because the queue was full

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self.workers = self.workers or default_batch_workers()
            self._arrived = asyncio.Event()
            self._slots = asyncio.Semaphore(self.workers)
            self._task = asyncio.ensure_future(self._loop())

    @property
    def queued(self) -> int:
        """Items waiting for a batch now (the queue depth)."""
        return len(self._pending)

    def _admit(self, n: int) -> None:
        """Room for n more items, or ResourceExhausted (checked before anything is enqueued: all or nothing)."""
        depth = len(self._pending)
        if depth and depth + n > self.max_queued:
            self.rejected += n
            raise ResourceExhausted(f"{depth} requests are queued (the limit is {self.max_queued}); retry shortly",
                                    retry_after_s=self.retry_after_s, reason="QUEUE_FULL")

    def _enqueue(self, item: Item) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(item, fut))
        return fut

    async def run(self, item: Item) -> Result:
        """The result of one request, computed in some batch."""
        self._admit(1)
        self._start()
        fut = self._enqueue(item)
        self._arrived.set()
        return await fut

    async def run_many(self, items: Sequence[Item]) -> list[Result]:
        """Enqueued together, so one request's items go into as few batches as possible."""
        self._admit(len(items))
        self._start()
        futs = [self._enqueue(it) for it in items]
        self._arrived.set()
        return list(await asyncio.gather(*futs))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            deadline = loop.time() + self.max_wait_s
            while len(self._pending) < self.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except (asyncio.TimeoutError, TimeoutError):
                    break
            await self._slots.acquire()  # all workers busy: requests keep queueing meanwhile
            # share the queue among the workers (a batch runs in one thread)
            take = min(self.max_batch, -(-len(self._pending) // self.workers))
            batch = [self._pending.popleft() for _ in range(take)]
            batch = [b for b in batch if not b.future.done()]  # callers that gave up (deadline, cancel)
            if not batch:
                self._slots.release()
                continue
            self.batches += 1
            self.items += len(batch)
            task = asyncio.ensure_future(self._execute(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _execute(self, batch: list[_Pending[Item]]) -> None:
        try:
            results = list(await asyncio.to_thread(self.run_batch, [b.item for b in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # noqa: BLE001 - never leave a caller hanging
            results = [exc] * len(batch)
        finally:
            self._slots.release()
        for b, r in zip(batch, results, strict=True):
            if b.future.done():
                continue
            if isinstance(r, BaseException):
                b.future.set_exception(r)
            else:
                b.future.set_result(r)

    async def close(self) -> None:
        for task in [self._task, *self._running]:
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
        for b in self._pending:
            if not b.future.done():
                b.future.set_exception(Unavailable("server shutting down", retry_after_s=1.0))
        self._pending.clear()
