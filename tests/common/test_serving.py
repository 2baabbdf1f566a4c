"""services/common/serving.py with a tiny builder: the model cache against a real registry (PostgreSQL + S3 server),
the dynamic batcher on its own, and the model-reference parser."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from services.common.serving import Batcher, ModelCache, RefKey, ServingConfig, parse_model_ref, ref_key
from tests import harness


@dataclass(frozen=True)
class Toy:
    """What the toy builder loads: the weight it read and the registry version it came from."""

    value: float
    version: int


def build_toy(tensors: dict, config: dict, row: dict) -> Toy:
    assert config == {"value": float(tensors["w"][0])}
    return Toy(float(tensors["w"][0]), int(row["version"]))


class Gated:
    """A builder that blocks until opened (a slow load), counting its calls."""

    def __init__(self, delay_s: float = 0.0):
        self.gate, self.delay_s, self.calls = threading.Event(), delay_s, 0

    def __call__(self, tensors: dict, config: dict, row: dict) -> Toy:
        self.calls += 1
        assert self.gate.wait(30)
        time.sleep(self.delay_s)
        return build_toy(tensors, config, row)


@pytest.fixture(scope="module")
def reg(settings):
    from services.common import db
    from services.common.registry import Registry
    from services.common.store import ArtifactStore

    store = ArtifactStore(settings)
    store.ensure_bucket()
    pool = db.create_pool(settings, max_size=4)
    yield Registry(pool, store)
    pool.close()


@pytest.fixture
def tenant(settings):
    return harness.token_for(settings, f"serving-{uuid.uuid4().hex[:6]}")[0]


def register(settings, reg, tenant: str, name: str, value: float) -> int:
    """A model version registered the way a job does (staged by a running job, numbered on commit)."""
    import torch

    from services.common import db
    from services.common.registry import Registry

    with db.connect(settings) as conn:
        job = conn.execute("INSERT INTO jobs (tenant_id, kind, queue, state) VALUES (%s, 'test.register', 'test', "
                           "'RUNNING') RETURNING id", (tenant,)).fetchone()
        reg.stage_model(conn, tenant, str(job["id"]), name, {"w": torch.tensor([value])}, kind="toy",
                        config={"value": value}, metrics={}, dataset_artifact_id=None, parent_version_ids=[])
        Registry.commit_job_outputs(conn, str(job["id"]))
    return int(reg.resolve(tenant, name)["version"])


async def get_when_loaded(cache: ModelCache, key: RefKey, timeout: float = 30) -> Toy:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await cache.get(key)
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------------------------------------- model cache
def test_unregistered_model_alias_or_version_is_failed_precondition(settings, reg, tenant):
    register(settings, reg, tenant, "toy", 1.0)
    cache = ModelCache(reg, build_toy, ServingConfig(), what="toy model")
    for key, which in ((RefKey(tenant, "no-such-model"), "no registered version"), (RefKey(tenant, "toy", 7), "version 7"),
                       (RefKey(tenant, "toy", 0, "nope"), "alias 'nope'")):
        with pytest.raises(FailedPrecondition) as err:
            asyncio.run(cache.get(key))
        assert err.value.reason == "MODEL_NOT_REGISTERED" and which in err.value.message
        assert err.value.metadata == {"model": key.name, "version": str(key.version), "alias": key.alias}
        with pytest.raises(FailedPrecondition):
            cache.load_now(key)
    # another tenant's model is not registered for this one
    other = harness.token_for(settings, f"serving-other-{uuid.uuid4().hex[:6]}")[0]
    with pytest.raises(FailedPrecondition):
        cache.load_now(RefKey(other, "toy"))


def test_default_alias_then_latest_pinned_versions_and_aliases(settings, reg, tenant):
    for v in (1.0, 2.0, 3.0):
        register(settings, reg, tenant, "toy", v)
    cache = ModelCache(reg, build_toy, ServingConfig(alias_check_s=3600))

    async def run():
        latest = await get_when_loaded(cache, RefKey(tenant, "toy"))  # no "production" yet: the latest
        pinned = await get_when_loaded(cache, RefKey(tenant, "toy", 1))
        reg.set_alias(tenant, "toy", "canary", 2)
        canary = await get_when_loaded(cache, RefKey(tenant, "toy", 0, "canary"))
        return latest, pinned, canary
    assert asyncio.run(run()) == (Toy(3.0, 3), Toy(1.0, 1), Toy(2.0, 2))
    reg.set_alias(tenant, "toy", "production", 1)
    assert cache.load_now(RefKey(tenant, "toy")) == Toy(1.0, 1)  # the default alias wins over the latest
    assert ModelCache(reg, build_toy, ServingConfig(), default_alias="canary").load_now(RefKey(tenant, "toy")) \
        == Toy(2.0, 2)


def test_warm_keeps_the_model_so_the_first_get_does_not_load_it_again(settings, reg, tenant):
    """What a predictor does before its server starts; the warmed version counts against max_models like any."""
    for v in (1.0, 2.0):
        register(settings, reg, tenant, "toy", v)
    builds: list[int] = []

    def counting(tensors, config, row):
        builds.append(int(row["version"]))
        return build_toy(tensors, config, row)
    cache = ModelCache(reg, counting, ServingConfig(max_models=1))
    assert cache.warm(RefKey(tenant, "toy", 1)) == Toy(1.0, 1)
    assert asyncio.run(cache.get(RefKey(tenant, "toy", 1), wait_s=0)) == Toy(1.0, 1) and builds == [1]
    cache.warm(RefKey(tenant, "toy", 2))  # evicts version 1 (max_models=1)
    assert asyncio.run(get_when_loaded(cache, RefKey(tenant, "toy", 1))) == Toy(1.0, 1) and builds == [1, 2, 1]


def test_a_loading_model_is_unavailable_with_retry_after_then_served(settings, reg, tenant):
    register(settings, reg, tenant, "toy", 5.0)
    builder = Gated()
    cache = ModelCache(reg, builder, ServingConfig(load_wait_s=0.05, retry_after_s=0.3), what="toy model")
    key = RefKey(tenant, "toy")

    async def run():
        with pytest.raises(Unavailable) as err:
            await cache.get(key)
        assert err.value.reason == "MODEL_LOADING" and err.value.retry_after_s == 0.3
        with pytest.raises(Unavailable):  # still loading: the same load, not a second one
            await cache.get(key, wait_s=0)
        builder.gate.set()
        return await get_when_loaded(cache, key)
    assert asyncio.run(run()) == Toy(5.0, 1)
    assert builder.calls == 1


def test_a_failing_load_is_unavailable_and_a_builders_own_error_passes_through(settings, reg, tenant):
    register(settings, reg, tenant, "toy", 1.0)

    def broken(tensors, config, row):
        raise RuntimeError("corrupt weights")

    def wrong_kind(tensors, config, row):
        raise FailedPrecondition("not a toy", reason="NOT_A_TOY")

    with pytest.raises(Unavailable) as err:
        asyncio.run(ModelCache(reg, broken, ServingConfig(retry_after_s=0.7)).get(RefKey(tenant, "toy")))
    assert err.value.reason == "MODEL_LOAD_FAILED" and err.value.retry_after_s == 0.7
    with pytest.raises(FailedPrecondition) as err2:
        asyncio.run(ModelCache(reg, wrong_kind, ServingConfig()).get(RefKey(tenant, "toy")))
    assert err2.value.reason == "NOT_A_TOY"


def test_alias_move_hot_swaps_with_zero_failed_calls(settings, reg, tenant):
    for v in (1.0, 2.0):
        register(settings, reg, tenant, "toy", v)
    reg.set_alias(tenant, "toy", "production", 1)
    builder = Gated(delay_s=0.2)  # a slow load: the old version keeps serving meanwhile
    builder.gate.set()
    cache = ModelCache(reg, builder, ServingConfig(alias_check_s=0.05, load_wait_s=30))
    key = RefKey(tenant, "toy")

    async def run():
        seen: list[int] = []
        errors: list[BaseException] = []
        stop = asyncio.Event()

        async def hammer():
            while not stop.is_set():
                try:
                    seen.append((await cache.get(key)).version)
                except Exception as exc:  # noqa: BLE001 - counted: there must be none
                    errors.append(exc)
                await asyncio.sleep(0.002)

        async def until(pred, what):
            deadline = time.monotonic() + 30
            while not pred():
                assert time.monotonic() < deadline, what
                await asyncio.sleep(0.01)

        tasks = [asyncio.ensure_future(hammer()) for _ in range(8)]
        try:
            await until(lambda: len(seen) > 20, "requests flowing")
            for target in (2, 1, 2):
                await asyncio.to_thread(reg.set_alias, tenant, "toy", "production", target)
                await until(lambda t=target: seen[-1] == t, f"swap to v{target}")
                n = len(seen)
                await until(lambda n=n: len(seen) > n + 20, f"requests on v{target}")
                assert seen[-16:] == [target] * 16
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await cache.close()
        return seen, errors
    seen, errors = asyncio.run(run())
    assert not errors, errors[:3]
    assert seen[0] == 1 and set(seen) == {1, 2} and cache.swaps == 3
    assert builder.calls == 2  # each version loaded once; moving back to v1 reuses the cached one


def test_ref_key_defaults_and_parse_model_ref():
    @dataclass
    class Ref:
        name: str = ""
        version: int = 0
        alias: str = ""
    assert ref_key("t", Ref(), "guard") == RefKey("t", "guard", 0, "")
    assert ref_key("t", Ref("g", 3), "guard") == RefKey("t", "g", 3, "")
    assert ref_key("t", None, "guard") == RefKey("t", "guard")
    assert parse_model_ref("", "rec") == ("rec", 0, "")
    assert parse_model_ref(" rec:12 ", "x") == ("rec", 12, "")
    assert parse_model_ref("rec@production", "x") == ("rec", 0, "production")
    for bad in ("rec:", "rec:0", "rec:-1", "rec:v2"):
        with pytest.raises(InvalidArgument):
            parse_model_ref(bad, "x")


names = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)


@given(names, st.integers(1, 10**9), st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True))
def test_parse_model_ref_round_trips(name, version, alias):
    assert parse_model_ref(name, "d") == (name, 0, "")
    assert parse_model_ref(f"{name}:{version}", "d") == (name, version, "")
    assert parse_model_ref(f"{name}@{alias}", "d") == (name, 0, alias)


# ---------------------------------------------------------------------------------------------- batcher
def doubling(items: list[int]) -> list[int | BaseException]:
    return [ValueError(f"bad {x}") if x < 0 else 2 * x for x in items]


def test_concurrent_calls_share_batches_and_get_their_own_results():
    seen: list[list[int]] = []

    def run_batch(items):
        seen.append(list(items))
        return doubling(items)

    async def run():
        b = Batcher(run_batch, max_batch=8, max_wait_ms=20)
        try:
            out = await asyncio.gather(*(b.run(i) for i in range(20)))
            return out, b.batches, b.items
        finally:
            await b.close()
    out, batches, items = asyncio.run(run())
    assert out == [2 * i for i in range(20)]
    assert items == 20 and batches == len(seen) == 3  # 8 + 8 + 4: full batches, then what is left
    assert all(len(s) <= 8 for s in seen) and sorted(x for s in seen for x in s) == list(range(20))


def test_run_many_goes_into_one_batch_and_a_failing_item_fails_only_its_caller():
    async def run():
        b = Batcher(doubling, max_batch=64, max_wait_ms=0)
        try:
            many = await b.run_many([1, 2, 3, 4, 5])
            single = await asyncio.gather(b.run(1), b.run(-1), b.run(3), return_exceptions=True)
            return many, single, b.batches
        finally:
            await b.close()
    many, single, batches = asyncio.run(run())
    assert many == [2, 4, 6, 8, 10] and batches == 2
    assert single[0] == 2 and isinstance(single[1], ValueError) and single[2] == 6


def test_workers_run_batches_at_once_and_share_the_queue():
    lock, state = threading.Lock(), {"now": 0, "most": 0}
    sizes: list[int] = []

    def slow(items):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            sizes.append(len(items))
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return doubling(items)

    async def run(workers):
        b = Batcher(slow, max_batch=32, max_wait_ms=20, workers=workers)
        try:
            return await asyncio.gather(*(b.run(i) for i in range(12)))
        finally:
            await b.close()
    assert asyncio.run(run(3)) == [2 * i for i in range(12)]
    assert state["most"] >= 2 and max(sizes) <= 4  # 12 queued among 3 workers: at most ceil(12 / 3) a batch
    state["most"], sizes[:] = 0, []
    assert asyncio.run(run(1)) == [2 * i for i in range(12)]
    assert state["most"] == 1 and sizes == [12]  # one worker: one batch takes everything queued


def test_a_broken_run_batch_never_leaves_a_caller_hanging():
    async def run(fn):
        b = Batcher(fn, max_batch=8, max_wait_ms=5)
        try:
            return await asyncio.wait_for(asyncio.gather(*(b.run(i) for i in range(3)), return_exceptions=True), 10)
        finally:
            await b.close()

    def raises(items):
        raise RuntimeError("boom")
    assert all(isinstance(r, RuntimeError) for r in asyncio.run(run(raises)))
    assert all(isinstance(r, RuntimeError) for r in asyncio.run(run(lambda items: [1])))  # too few results


def test_close_fails_queued_callers_with_unavailable():
    release = threading.Event()

    def blocked(items):
        release.wait(10)
        return doubling(items)

    async def run():
        b = Batcher(blocked, max_batch=1, max_wait_ms=0)
        first = asyncio.ensure_future(b.run(1))
        await asyncio.sleep(0.05)  # the first batch is running; the next call waits in the queue
        queued = asyncio.ensure_future(b.run(2))
        await asyncio.sleep(0.05)
        await b.close()
        release.set()
        first.cancel()
        return await asyncio.gather(queued, return_exceptions=True)
    (queued,) = asyncio.run(run())
    assert isinstance(queued, Unavailable)


# ---------------------------------------------------------------------------------------------- grouped batches
def test_group_key_gives_run_batch_one_group_at_a_time_in_input_order():
    calls: list[list[tuple[str, int]]] = []

    def per_group(items):  # items of one group only: what a service writes (one forward per model)
        assert len({m for m, _ in items}) == 1, items
        calls.append(list(items))
        return [f"{m}:{x * 10}" for m, x in items]

    async def run():
        b = Batcher(per_group, max_batch=64, max_wait_ms=20, group_key=lambda it: it[0])
        try:
            items = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("a", 6)]
            return await asyncio.gather(*(b.run(it) for it in items)), b.batches
        finally:
            await b.close()
    out, batches = asyncio.run(run())
    assert out == ["a:10", "b:20", "a:30", "c:40", "b:50", "a:60"]
    assert batches == 1 and [c[0][0] for c in calls] == ["a", "b", "c"]  # one batch, one call per group
    assert calls[0] == [("a", 1), ("a", 3), ("a", 6)]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 20)), min_size=1, max_size=40))
def test_run_grouped_isolates_failures_to_their_own_items(items):
    """A group whose run_batch raises is retried item by item: every good item gets its result, every bad one
    its own exception, in input order, whatever the grouping."""
    from services.common.serving import run_grouped

    def per_group(group):
        if any(x < 0 for _, x in group):
            raise ValueError(f"bad item in {group}")
        if any(x == 13 for _, x in group):
            return []  # a broken run_batch (wrong count) is isolated the same way
        return [k * 100 + x for k, x in group]

    out = run_grouped(per_group, items, lambda it: it[0])
    assert len(out) == len(items)
    for (k, x), r in zip(items, out, strict=True):
        if x < 0:
            assert isinstance(r, ValueError)
        elif x == 13:
            assert isinstance(r, RuntimeError)
        else:
            assert r == k * 100 + x


def test_run_grouped_runs_a_failing_item_once_when_it_is_alone_and_once_more_when_isolated():
    """A failing group of one already ran alone: it is not run a second time (that would repeat its work and any
    side effects). A failing group of several is retried item by item, once each."""
    from services.common.serving import run_grouped

    calls: list[list[tuple[str, int]]] = []

    def per_group(group):
        calls.append(list(group))
        if any(x < 0 for _, x in group):
            raise ValueError(f"bad item in {group}")
        return [x for _, x in group]

    out = run_grouped(per_group, [("a", -1), ("b", 2), ("b", -3)], lambda it: it[0])
    assert isinstance(out[0], ValueError) and out[1] == 2 and isinstance(out[2], ValueError)
    assert calls == [[("a", -1)], [("b", 2), ("b", -3)], [("b", 2)], [("b", -3)]]
