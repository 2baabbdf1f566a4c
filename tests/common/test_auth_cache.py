"""The auth interceptor's token caches against a real database, counted in database lookups (never timed; the
caches' clock is a counter the test moves): an unknown token is looked up once per negative-cache period however
often (or however concurrently) it is sent, a token created after a miss is accepted once that period is over,
the caches are bounded (least recently used dropped first), and a live token is still cached as before."""
from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from services.common import db
from services.common.errors import Unauthenticated
from services.common.server import Authenticator, TtlCache
from services.common.settings import Settings

NEGATIVE_S, POSITIVE_S = 2.0, 30.0


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def pool(database_url):
    p = db.create_pool(Settings(database_url=database_url), max_size=4)
    yield p
    p.close()


@pytest.fixture
def lookups(monkeypatch):
    """Every token lookup the interceptor makes in the database, in order."""
    seen: list[str] = []
    real = db.token_identity

    def counting(conn, token):
        seen.append(token)
        return real(conn, token)
    monkeypatch.setattr(db, "token_identity", counting)
    return seen


def _authenticator(pool, clock, **kw):
    return Authenticator(pool, cache_seconds=POSITIVE_S, negative_cache_seconds=NEGATIVE_S, clock=clock, **kw)


async def _outcome(auth, token):
    """The tenant a token authenticates as, or None when it is refused."""
    try:
        return (await auth.authenticate(f"Bearer {token}"))["tenant_id"]
    except Unauthenticated:
        return None


def _insert_token(database_url, tenant_id, token):
    """A token with a chosen secret (what `praxon token create` stores: its hash)."""
    with db.connect(Settings(database_url=database_url)) as conn:
        conn.execute("INSERT INTO api_tokens (tenant_id, token_sha256, name) VALUES (%s, %s, 'late')",
                     (tenant_id, db.hash_token(token)))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_flood_of_one_bad_token_costs_one_lookup_per_period(pool, lookups, seed):
    rng = random.Random(seed)
    clock = Clock()
    auth = _authenticator(pool, clock)
    bad = f"prx_bad_{seed}_{uuid.uuid4().hex}"
    sequential, concurrent = rng.randint(20, 60), rng.randint(20, 60)

    async def run():
        outs = [await _outcome(auth, bad) for _ in range(sequential)]
        outs += await asyncio.gather(*(_outcome(auth, bad) for _ in range(concurrent)))
        return outs
    assert asyncio.run(run()) == [None] * (sequential + concurrent)
    assert lookups == [bad]
    clock.now += NEGATIVE_S + 0.01  # the period is over: the next request asks the database again
    assert asyncio.run(_outcome(auth, bad)) is None
    assert lookups == [bad, bad]


def test_concurrent_requests_with_a_new_bad_token_share_one_lookup(pool, lookups):
    auth = _authenticator(pool, Clock())
    bad = f"prx_bad_{uuid.uuid4().hex}"

    async def run():
        return await asyncio.gather(*(_outcome(auth, bad) for _ in range(50)))
    assert asyncio.run(run()) == [None] * 50
    assert lookups == [bad]


def test_a_token_created_after_a_miss_works_once_the_period_is_over(pool, lookups, database_url):
    clock = Clock()
    auth = _authenticator(pool, clock)
    with db.connect(Settings(database_url=database_url)) as conn:
        tenant_id, _ = db.create_token(conn, f"late-{uuid.uuid4().hex[:6]}")
    late = f"prx_late_{uuid.uuid4().hex}"
    assert asyncio.run(_outcome(auth, late)) is None           # not created yet: refused, and the miss cached
    _insert_token(database_url, tenant_id, late)
    clock.now += NEGATIVE_S / 2
    assert asyncio.run(_outcome(auth, late)) is None           # within the period: still the cached miss
    assert lookups == [late]
    clock.now += NEGATIVE_S / 2 + 0.01
    assert asyncio.run(_outcome(auth, late)) == tenant_id      # after it: looked up again, accepted
    clock.now += POSITIVE_S / 2
    assert asyncio.run(_outcome(auth, late)) == tenant_id      # and now cached as a live token
    assert lookups == [late, late]


def test_the_negative_cache_is_bounded_and_drops_the_least_recently_used(pool, lookups):
    auth = _authenticator(pool, Clock(), max_entries=4)
    bad = [f"prx_bad_{i}_{uuid.uuid4().hex}" for i in range(10)]

    async def run(tokens):
        for t in tokens:
            assert await _outcome(auth, t) is None
    asyncio.run(run(bad))
    assert len(auth.tokens._unknown) == 4 and lookups == bad
    asyncio.run(run([bad[-1], bad[0]]))  # the newest is still cached; the oldest was dropped: looked up again
    assert lookups == [*bad, bad[0]]


def test_ttl_cache_keeps_nothing_with_a_zero_lifetime_and_expires_entries():
    clock = Clock()
    assert (c := TtlCache(0.0, clock=clock)).put("a", 1) is None and c.get("a") is None and len(c) == 0
    c = TtlCache(5.0, max_entries=2, clock=clock)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1          # "a" is now the most recently used
    c.put("c", 3)                   # at capacity: "b" goes
    assert (c.get("a"), c.get("b"), c.get("c")) == (1, None, 3)
    clock.now += 5.0
    assert c.get("a") is None and len(c) == 1
