"""Who is calling: the call's caller and request id (context variables the Dispatcher sets once per call, read by
servicers through current_tenant / current_request_id / current_token), and AppContext, what servicers share."""
from __future__ import annotations

import asyncio
import contextvars
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import grpc
from psycopg_pool import ConnectionPool

from services.common import db
from services.common.jobs import JobQuota, JobStore
from services.common.registry import Registry
from services.common.settings import Settings
from services.common.store import ArtifactStore

# the call's (caller, request id): the caller's identity (db.token_identity: tenant_id, token_id, token_name; the
# cached dict, never changed; None on health and reflection) and the client's x-request-id ("" until one is made).
# One variable, set once per call: each set costs about 1.5k instructions, 0.3% of a trivial call.
_call: contextvars.ContextVar[tuple[dict | None, str]] = contextvars.ContextVar("praxon_call", default=(None, ""))
# the call's metadata as grpc handed it to the Dispatcher (each call runs in its own task, so its own context)
_call_metadata: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("praxon_call_metadata", default=None)



def current_tenant() -> str:
    """The authenticated caller's tenant id (set by the Dispatcher)."""
    caller = _call.get()[0]
    if caller is None:
        raise LookupError("no authenticated caller in this context")
    return caller["tenant_id"]


def current_request_id() -> str:
    """The call's request id: the client's x-request-id, or one made the first time it is asked for (most calls
    never need one, so none is made for them)."""
    caller, rid = _call.get()
    if not rid:
        rid = f"{_request_ids.getrandbits(128):032x}"
        _call.set((caller, rid))
    return rid


def current_token() -> tuple[str, str]:
    """(token id, token name) the caller authenticated with (set by the Dispatcher; empty outside a call)."""
    caller = _call.get()[0]
    return (caller["token_id"], caller["token_name"]) if caller is not None else ("", "")


@dataclass
class AppContext:
    """What servicers share in one process; built once in __main__/the CLI and passed down."""

    settings: Settings
    pool: ConnectionPool
    store: ArtifactStore
    jobs: JobStore
    registry: Registry
    extras: dict[str, Any] = field(default_factory=dict)

    async def db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking database/store work off the event loop."""
        return await asyncio.to_thread(fn, *args)


Registrar = Callable[[grpc.aio.Server, AppContext], Iterable[str]]


def build_app_context(settings: Settings) -> AppContext:
    pool = db.create_pool(settings)
    store = ArtifactStore(settings)
    from services.common.queue import make_celery  # only processes that serve need it
    quota = JobQuota(settings.jobs.max_active_per_tenant, settings.jobs.max_active_per_tenant_kind)
    return AppContext(settings, pool, store, JobStore(pool, make_celery(settings), quota), Registry(pool, store))


# a request id is a correlation key, not a secret: 128 random bits from a fast generator of the server's own (the
# global one is the embedding program's: a server in its process must not move its seeded state)
_request_ids = random.Random()
