"""Job events pushed to watchers: one LISTEN connection per server process fans NOTIFYs out to
subscribers, who then read the new rows. No polling."""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

import psycopg

from services.common.jobs import EVENTS_CHANNEL

log = logging.getLogger(__name__)


class JobEventHub:
    def __init__(self, database_url: str):
        self.url = database_url
        self._subs: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="job-event-hub")
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def subscribe(self, job_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._subs[job_id].add(event)
        return event

    def unsubscribe(self, job_id: str, event: asyncio.Event) -> None:
        subs = self._subs.get(job_id)
        if subs is not None:
            subs.discard(event)
            if not subs:
                del self._subs[job_id]

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                    self._ready.set()
                    self._wake_all()  # events may have been written while we were reconnecting
                    async for note in conn.notifies():
                        for event in self._subs.get(note.payload, ()):
                            event.set()
            except psycopg.OperationalError:
                log.warning("job event listener lost its database connection; reconnecting")
                await asyncio.sleep(1.0)

    def _wake_all(self) -> None:
        for subs in self._subs.values():
            for event in subs:
                event.set()
