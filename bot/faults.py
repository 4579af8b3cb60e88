"""Storage faults: a turn that failed because the database was unreachable is retried, not answered.

Why: when PostgreSQL restarted, every turn of the next minutes failed on the agent's checkpoints (or
the inbox), was answered "⚠️ Something went wrong" and marked done — the question was never answered.
A storage fault is not the message's fault and not the model's, and it passes: so the manager waits
and runs the same work again, in place, until storage answers again.

- :func:`is_storage_error` tells a storage fault from every other failure: a connection to PostgreSQL
  refused, closed or shut down (asyncpg, psycopg and its pool, SQLAlchemy's wrappers), SQLite out of
  disk or failing I/O, or any write refused for lack of space (``ENOSPC``/``EDQUOT``: an upload or a
  thread's folder on a full disk). A syntax error or a constraint violation is not one: retrying
  would not help.
- :class:`StorageRetry` runs an operation again with back-off (1, 2, 4 … up to ``max_delay`` seconds,
  ended early once the service's health checks saw storage fail and answer again) while it fails that
  way. For a turn the reply says so once — its live message is edited into the partial answer plus
  :data:`RETRY_NOTE` (:data:`DISK_FULL_NOTE` when the disk is full) — and the next attempt edits that
  same message into the answer. Nothing counts as a failed attempt (no dead-lettering over an outage), the inbox row stays
  pending, and the turn keeps its place in its thread's lane (and, in a cluster, its claim), so the
  thread's order holds. Waiting ends with the process: a stopping service cancels it after its drain
  time and the entry, still pending, resumes at the next start.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, TypeVar

from sqlalchemy.exc import DBAPIError

from channels.reply import ReplyStream
from channels.resume import ReplyState

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_NOTE = "⏳ I can't reach my database right now, so I'll retry this by myself as soon as it's back."
#: The same line when the fault is a full disk: waiting for the database to come back would not help.
DISK_FULL_NOTE = (
    "⏳ My disk is full right now, so I can't save this; I'll retry it by myself once there is space."
)
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 10.0
#: How often a back-off asks the storage probe whether storage is back.
PROBE_SECONDS = 1.0

#: Modules of the database drivers: an OS-level error raised inside one of them is a storage fault.
_DRIVER_MODULES = ("asyncpg", "psycopg", "psycopg_pool", "sqlalchemy", "aiosqlite", "langgraph.checkpoint")
#: SQLite reports every problem as ``OperationalError``; only these mean the storage, not the statement.
_SQLITE_FAULTS = (
    "disk i/o error",
    "database or disk is full",
    "unable to open database file",
    "database is locked",
    "disk full",
)
_CHAIN_LIMIT = 8
#: Out of space (or quota), wherever it is raised: it passes when space is freed, and is never the
#: message's fault — an upload or a thread's files failing to be written on a full disk is one too.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_FULL_PHRASES = ("database or disk is full", "disk full")


@functools.cache
def _driver_faults() -> tuple[type[BaseException], ...]:
    """The driver exception classes that mean "the database is unreachable right now".

    Imported on first use: asyncpg and psycopg are optional (the ``postgres`` extra) and slow to import.
    """
    found: list[type[BaseException]] = []
    try:
        import asyncpg
        from asyncpg import exceptions as pg
    except ImportError:
        pass
    else:
        found += [
            asyncpg.PostgresConnectionError,  # refused, failed, does not exist
            pg.OperatorInterventionError,  # shutting down, starting up, admin shutdown, crash
            pg.InsufficientResourcesError,  # disk full, out of memory, too many connections
            asyncpg.InterfaceError,  # "connection is closed"
        ]
    try:
        import psycopg
    except ImportError:
        pass
    else:
        found.append(psycopg.OperationalError)  # includes the pool's PoolTimeout
    return tuple(found)


@functools.cache
def _not_faults() -> tuple[type[BaseException], ...]:
    """Driver errors that look like faults but will not pass by waiting: a closed pool (we stop)."""
    try:
        from psycopg_pool import PoolClosed
    except ImportError:
        return ()
    return (PoolClosed,)


def _raised_in_driver(tb: TracebackType | None) -> bool:
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and module.startswith(_DRIVER_MODULES):
            return True
        tb = tb.tb_next
    return False


def _is_fault(exc: BaseException) -> bool:
    if isinstance(exc, StorageUnavailable):
        return True
    if isinstance(exc, DBAPIError):  # SQLAlchemy's wrapper: a lost connection, or what the driver says
        return exc.connection_invalidated or (exc.orig is not None and _is_fault(exc.orig))
    if isinstance(exc, _not_faults()):
        return False
    if isinstance(exc, _driver_faults()):
        return True
    if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError):
        text = str(exc).lower()
        return any(phrase in text for phrase in _SQLITE_FAULTS)
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    # Connecting: asyncpg raises the socket's own error (refused, reset, timed out) under SQLAlchemy's
    # pre-ping. Only when it was raised inside a driver: the model's client raises the same classes.
    if isinstance(exc, OSError | TimeoutError):
        return _raised_in_driver(exc.__traceback__)
    return False


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: SQLAlchemy's errors carry the driver's) is a storage fault."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_LIMIT):
        if seen is None:
            return False
        if _is_fault(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_disk_full(exc: BaseException) -> bool:
    """Whether a storage fault is the disk being full (SQLite's SQLITE_FULL, or ENOSPC/EDQUOT)."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_LIMIT):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        if isinstance(seen, sqlite3.DatabaseError) and any(p in str(seen).lower() for p in _FULL_PHRASES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def describe(exc: BaseException) -> str:
    """A short, secret-free name for a storage fault (``ConnectionRefusedError``), for logs and /ready.

    Only class names: a driver's message may carry the host, user or database name."""
    seen: BaseException | None = exc
    names: list[str] = []
    for _ in range(_CHAIN_LIMIT):
        if seen is None:
            break
        if not isinstance(seen, StorageUnavailable):
            names.append(type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return names[-1] if names else type(exc).__name__


class StorageUnavailable(Exception):
    """A turn stopped because storage was unreachable (raised by the manager instead of answering with
    an error sentence). Carries its live reply and what the model had said, to show the retry note."""

    def __init__(self, reply: ReplyStream | None, partial: str = "") -> None:
        super().__init__("storage unavailable")
        self.reply = reply
        self.partial = partial


class RetriedAsk(Protocol):
    """What :meth:`StorageRetry.run_turn` needs of a turn's ``TurnAsk``."""

    @property
    def entry_id(self) -> str | None: ...


class RetriedTurn(Protocol):
    """What :meth:`StorageRetry.run_turn` needs of the manager's ``Turn``."""

    @property
    def ask(self) -> RetriedAsk: ...

    resume: ReplyState | None
    reply: ReplyStream | None


#: Stores a reply's state durably (``Inbox.save_reply_ref``).
SaveRef = Callable[[str, ReplyState], Awaitable[None]]
#: The service's storage check: None when storage answers, else why not.
Probe = Callable[[], Awaitable[str | None]]
#: Gives an inbox entry back (``MessageBus.release``): it stays pending for the next start.
Release = Callable[[str], None]


def backoff(failures: int, max_delay: float = MAX_DELAY_SECONDS) -> float:
    """Seconds before the next attempt after ``failures`` consecutive storage faults."""
    return float(min(max_delay, FIRST_DELAY_SECONDS * 2 ** max(0, failures - 1)))


class StorageRetry:
    """Runs work again while it fails on storage (see the module docstring)."""

    def __init__(self, save_ref: SaveRef, release: Release, *, max_delay: float = MAX_DELAY_SECONDS) -> None:
        self.save_ref = save_ref
        self.release = release
        self.max_delay = max_delay
        #: The service's storage check (``Service.storage_problem``: cached, cheap), when it has one:
        #: a back-off ends early once storage, seen failing during it, answers again.
        self.probe: Probe | None = None

    async def _pause(self, failures: int) -> None:
        """Wait ``backoff(failures)``; with a probe, look every second whether storage came back.

        Only a recovery ends the wait early (the probe failed, then answered): a fault the probe
        does not see (the checkpoint file full while the database answers) keeps the full back-off,
        so a turn is never re-run every second against storage that still fails."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + backoff(failures, self.max_delay)
        seen_down = False
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(PROBE_SECONDS, left))
            if self.probe is None:
                continue
            down = await self.probe() is not None
            if seen_down and not down:
                return
            seen_down = seen_down or down

    async def call(
        self, what: str, operation: Callable[[], Awaitable[T]], *, failed: BaseException | None = None
    ) -> T:
        """``operation()``, run again after a back-off for as long as it raises a storage fault.

        ``failed``: the storage fault the caller's own first try raised (a hot path tries once without
        this loop); the back-off then starts at once, as if this call had made that try."""
        failures = 0
        while True:
            if failed is None:
                try:
                    return await operation()
                except Exception as exc:
                    if not is_storage_error(exc):
                        raise
                    failed = exc
            failures += 1
            log.warning(
                "%s failed: storage unavailable (%s); retrying in %.0f s",
                what,
                describe(failed),
                backoff(failures, self.max_delay),
            )
            failed = None
            await self._pause(failures)

    async def run_turn(self, turn: RetriedTurn, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run a turn's ``attempt`` until it is not stopped by storage.

        After each storage fault: its reply shows the retry note, and before the next attempt the reply's
        reference is stored with the inbox entry (itself retried: it also tells that the inbox answers
        again), so the next attempt — or, after a crash, the next process — edits the same message.
        Cancelled while waiting (the service stops), the entry is given back, still pending."""
        failures = 0
        while True:
            try:
                return await attempt()
            except StorageUnavailable as fault:
                failures += 1
                log.warning(
                    "turn stopped: storage unavailable (%s); running it again in %.0f s",
                    describe(fault),
                    backoff(failures, self.max_delay),
                )
                state = await self._tell(fault)
            turn.reply = None  # finished: the next attempt opens the same messages again by their refs
            if state is not None and state.parts:
                turn.resume = state
            entry_id, stored = turn.ask.entry_id, turn.resume
            try:
                await self._pause(failures)
                if entry_id is not None and stored is not None:
                    await self.call(
                        "saving the reply reference", functools.partial(self.save_ref, entry_id, stored)
                    )
            except asyncio.CancelledError:
                if entry_id is not None:
                    self.release(entry_id)
                raise

    @staticmethod
    async def _tell(fault: StorageUnavailable) -> ReplyState | None:
        """Edit the turn's live message into its partial answer plus the retry note (one line, however
        often it is retried: each attempt edits the same message)."""
        reply = fault.reply
        if reply is None:
            return None
        partial = fault.partial.rstrip()
        note = DISK_FULL_NOTE if is_disk_full(fault) else RETRY_NOTE
        try:
            await reply.finish(f"{partial}\n\n{note}" if partial else note)
        except Exception as exc:  # the platform may be failing too; the retry still runs
            log.info("could not show the retry note: %s", exc)
        return reply.state
