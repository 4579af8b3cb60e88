"""Operator gauges for ``/metrics``: what is built and running, what waits, what was set aside.

Kept apart from :mod:`bot.metrics` (the per-turn hot path): everything here is read at scrape time,
never on a message's way through. The inbox counts are one indexed query, cached for a few seconds so
several scrapers (or a dashboard refreshing fast) cost the database one query per interval.

- ``switchboard_build_info{version,python}`` is 1: which build runs where (join on it in queries).
- ``process_*`` (CPU, memory, open files, start time) from prometheus-client's process collector.
- ``switchboard_inbox_entries{status}``: entries not finished, by status — ``pending`` (the queue, this
  database's whole cluster), ``failed`` (waiting for another attempt), ``retry`` (an operator asked) and
  ``dead`` (dead-lettered after ``bus.max_attempts``: ``switchboard inbox list --failed``).
- ``switchboard_channel_state{channel,state}``: 1 for each configured channel's current state
  (stopped, starting, connected, reconnecting, error), 0 for the others, so an alert can say "error
  for 5 minutes" without parsing ``/health``.
"""

from __future__ import annotations

import platform
import time
import weakref
from typing import TYPE_CHECKING

from prometheus_client import Gauge, ProcessCollector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from bot.bounded import NoAnswer, within
from bot.inbox import DEAD, FAILED, PENDING, RETRY, inbox_table
from bot.metrics import REGISTRY
from bot.version import VERSION

if TYPE_CHECKING:
    from bot.service import Service

#: The states :class:`channels.types.ChannelStatus` takes; each gets a series per channel.
CHANNEL_STATES = ("stopped", "starting", "connected", "reconnecting", "error")
#: Unfinished statuses only: ``done`` rows are most of the table and say nothing about health.
INBOX_STATUSES = (PENDING, FAILED, RETRY, DEAD)
#: How long one inbox count serves scrapes, and how long a scrape waits for one.
COUNT_CACHE_SECONDS = 5.0
COUNT_TIMEOUT_SECONDS = 2.0

ProcessCollector(registry=REGISTRY)

BUILD_INFO = Gauge(
    "switchboard_build_info",
    "Always 1; the labels say which version runs on which Python.",
    ["version", "python"],
    registry=REGISTRY,
)
BUILD_INFO.labels(VERSION, platform.python_version()).set(1)

INBOX_ENTRIES = Gauge(
    "switchboard_inbox_entries",
    "Unfinished inbox entries in the database by status: pending (queued), failed (to be retried), "
    "retry (an operator asked), dead (dead-lettered after bus.max_attempts).",
    ["status"],
    registry=REGISTRY,
)
CHANNEL_STATE = Gauge(
    "switchboard_channel_state",
    "1 for the channel's current state (stopped, starting, connected, reconnecting, error), else 0.",
    ["channel", "state"],
    registry=REGISTRY,
)


class InboxCounts:
    """The inbox's unfinished entries by status, counted at most every :data:`COUNT_CACHE_SECONDS`."""

    def __init__(self) -> None:
        self._at = 0.0
        self._counts: dict[str, int] = {}

    async def read(self, service: Service) -> dict[str, int]:
        now = time.monotonic()
        if now - self._at >= COUNT_CACHE_SECONDS:
            query = (
                select(inbox_table.c.status, func.count())
                .where(inbox_table.c.status.in_(INBOX_STATUSES))
                .group_by(inbox_table.c.status)
            )
            async with service.db.engine.connect() as conn:
                rows = await conn.execute(query)
                self._counts = {str(status): int(count) for status, count in rows}
            self._at = now
        return self._counts


#: One cache per service: several services in one process (tests, embedders) have their own databases.
_counts: weakref.WeakKeyDictionary[Service, InboxCounts] = weakref.WeakKeyDictionary()


async def refresh(service: Service) -> None:
    """Set the scrape-time gauges from ``service``; a database that does not answer leaves the counts
    as they were (``switchboard_component_up{component="database"}`` says so)."""
    for name, channel in service.channels.items():
        for state in CHANNEL_STATES:
            CHANNEL_STATE.labels(name, state).set(1 if channel.status.state == state else 0)
    for name in service.channel_errors:  # configured but could not be created
        for state in CHANNEL_STATES:
            CHANNEL_STATE.labels(name, state).set(1 if state == "error" else 0)
    if service.started_at is None:
        return
    try:
        cache = _counts.setdefault(service, InboxCounts())
        counts = await within(cache.read(service), COUNT_TIMEOUT_SECONDS)
    except (NoAnswer, ConnectionError, SQLAlchemyError, OSError):
        return  # the database is away or slow: /health and component_up report it
    for status in INBOX_STATUSES:
        INBOX_ENTRIES.labels(status).set(counts.get(status, 0))
