"""Who may call: bearer API tokens -> the caller's identity (Authenticator), looked up in PostgreSQL (stored
hashed) and cached per process (TokenLookups over two TtlCaches), each call counted against its token's rate."""
from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from typing import Any, Callable

from psycopg_pool import ConnectionPool

from services.common import db
from services.common.errors import Unauthenticated
from services.common.server.limits import TokenBuckets



class TtlCache:
    """A bounded map whose entries live `seconds` (0: nothing is kept); at capacity the least recently used entry
    is dropped, so a flood of new keys evicts old ones one at a time and never grows memory or empties the cache."""

    def __init__(self, seconds: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.max_entries, self.clock = seconds, max(1, max_entries), clock
        self._entries: collections.OrderedDict[Any, tuple[float, Any]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any, now: float | None = None) -> Any | None:
        """The live value of `key`, or None; `now`: the clock's time, when the caller has read it already."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= (self.clock() if now is None else now):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        if self.seconds <= 0:
            return
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)
        self._entries[key] = (self.clock() + self.seconds, value)


class TokenLookups:
    """Authorization header -> the live identity of its API token (db.token_identity: tenant_id, token_id,
    token_name; None for an unknown, revoked or expired token), cached per process and keyed by a digest of the
    header (_cache_key), so that a cached call needs neither the header parsed nor the token held: a live token for
    `cache_seconds` (a revoked or expired one stops working within that), an unknown one for
    `negative_cache_seconds` (so a flood of bad tokens costs the database one lookup per token per period; a token
    created after a miss works at most that long later). Concurrent callers with the same uncached header share one
    lookup. Used on one event loop: the gRPC server's (Dispatcher) and the predictors' (services.common.oip)."""

    def __init__(self, pool: ConnectionPool, cache_seconds: float = 30.0, negative_cache_seconds: float = 2.0, *,
                 max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.pool = pool
        self._known = TtlCache(cache_seconds, max_entries, clock)              # -> identity
        self._unknown = TtlCache(negative_cache_seconds, max_entries, clock)   # -> True
        self._lookups: dict[bytes, asyncio.Future] = {}                        # in flight

    def cached(self, header: str, now: float | None = None) -> dict | None:
        """The live identity of the header's token if it is cached (no await: the common case of every call)."""
        return self._known.get(_cache_key(header), now)

    async def identity(self, header: str, token: str) -> dict | None:
        """The live identity of `token`, the bearer token the caller parsed from `header`."""
        key = _cache_key(header)
        hit = self._known.get(key)
        if hit is not None or self._unknown.get(key) is not None:
            return hit
        task = self._lookups.get(key)
        if task is None:
            def lookup() -> dict | None:
                with self.pool.connection() as conn:
                    return db.token_identity(conn, token)
            task = self._lookups[key] = asyncio.ensure_future(asyncio.to_thread(lookup))

            def done(t: asyncio.Future) -> None:
                self._lookups.pop(key, None)
                if not t.cancelled() and t.exception() is None:
                    found = t.result()
                    if found is None:
                        self._unknown.put(key, True)
                    else:
                        self._known.put(key, found)
            task.add_done_callback(done)
        return await asyncio.shield(task)  # one caller's cancellation does not cancel it for the others


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value, or None when it carries none."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if token and scheme.lower() == "bearer" else None


def _cache_key(header: str) -> bytes:
    """The token caches' key: the header's BLAKE2s digest, so that no cache holds a token itself. Not the database's
    sha256 (db.hash_token): this runs on every call, and CPython's built-in BLAKE2s costs about 3.9k instructions
    where OpenSSL's sha256 costs 6.6k, 1.4% of a trivial call (benchmarks/platform/RESULTS.md)."""
    return hashlib.blake2s(header.encode()).digest()


class Authenticator:
    """Bearer API token -> the caller's identity (tokens are stored hashed; lookups cached by TokenLookups).
    Missing or bad token -> UNAUTHENTICATED; a token over its request rate -> RESOURCE_EXHAUSTED with RetryInfo."""

    def __init__(self, pool: ConnectionPool, cache_seconds: float = 30.0, limits: TokenBuckets | None = None, *,
                 negative_cache_seconds: float = 2.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.limits = limits or TokenBuckets(0, 1)
        self.tokens = TokenLookups(pool, cache_seconds, negative_cache_seconds, max_entries=max_entries, clock=clock)

    def cached(self, header: str, now: float) -> dict | None:
        """authenticate() without waiting, for a token whose identity is cached (the common case of every call);
        None when authenticate() must look the token up."""
        found = self.tokens.cached(header, now)
        if found is not None:
            self.limits.take(found["token_id"], now)
        return found

    async def authenticate(self, header: str, now: float | None = None) -> dict:
        """The caller's identity (db.token_identity) from the call's `authorization` metadata, counted against its
        token's request rate; or raises. `now`: the time of the call on this authenticator's clock, when the caller
        has read it."""
        token = bearer_token(header)
        if token is None:
            raise Unauthenticated("missing bearer token in the 'authorization' metadata", reason="MISSING_TOKEN")
        found = await self.tokens.identity(header, token)  # (it answers from the cache when it can)
        if found is None:
            raise Unauthenticated("invalid or revoked API token", reason="INVALID_TOKEN")
        self.limits.take(found["token_id"], now)
        return found

