"""Wires scheduled tasks into the service: the ``schedules`` table, the book ``/schedule`` writes to and
the scheduler task that hands due occurrences to the bus (docs/schedules.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from bot import schedules as schedules_module
from bot.features import Foundation, Running
from bot.schedules import Publish, ScheduleBook, Scheduler, ScheduleStore

if TYPE_CHECKING:
    from fastapi import APIRouter


class SchedulesFeature:
    name = "schedules"

    def __init__(self, base: Foundation, publish: Publish, *, clock: Callable[[], float] = time.time) -> None:
        store = ScheduleStore(base.db)
        scheduler = Scheduler(store, publish, missed=base.settings.schedules.missed, clock=clock)
        self.book = ScheduleBook(
            store=store, scheduler=scheduler, timezone=base.settings.agent.timezone, clock=clock
        )

    def tables(self) -> list[MetaData]:
        return [schedules_module.metadata]

    def routers(self) -> list[APIRouter]:
        return []

    async def start(self, running: Running) -> None:
        self.book.scheduler.start()

    async def stop(self) -> None:
        await self.book.scheduler.stop()
