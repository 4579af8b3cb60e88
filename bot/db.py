"""The database engine: SQLite (aiosqlite) embedded by default, PostgreSQL (asyncpg) by URL.

Each package owns its tables on its own ``MetaData``; the service creates them all at start-up. Schema
changes ship as additive steps in :mod:`bot.migrations` (see docs/database.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

log = logging.getLogger(__name__)

#: Any 64-bit number, the same in every instance: schema creation and upgrades run under this
#: PostgreSQL advisory lock, so instances starting together wait for each other instead of racing
#: ``CREATE TABLE`` ("duplicate key value violates unique constraint pg_type_typname_nsp_index").
SCHEMA_LOCK_KEY = 0x5357_4244_0001  # "SWBD" + 1

SQLITE_BUSY_TIMEOUT_MS = 10_000
SAFETY_NET_CHECKPOINT_PAGES = 20_000  # ~80 MB of WAL
CHECKPOINT_INTERVAL_SECONDS = 1.0


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed while the inbox writer commits; NORMAL sync is durable across process
    # crashes (WAL is fsynced at checkpoints), which is the failure the inbox must survive.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    # Checkpoints run in the background (Database.start_maintenance); automatic ones inside a commit
    # made that message wait 10-20 ms. This limit is only a safety net if maintenance is not running.
    cursor.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_CHECKPOINT_PAGES}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class DatabaseInUse(RuntimeError):
    """Another running instance holds this SQLite database; the message says what to do instead."""


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for PostgreSQL and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    return Path(database) if database and database != ":memory:" else None


def _lockable(path: Path | None) -> Path | None:
    """A plain file path to lock (a ``file:`` URI with options is left alone: tests' shared memory)."""
    return None if path is None or str(path).startswith("file:") else path


def _instance_lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".instance-lock")


def _try_instance_lock(database: Path) -> int:
    """An open, exclusively locked descriptor on the database's lock file, or :class:`DatabaseInUse`.

    ``flock`` is released by the kernel when the process dies, so a kill -9 never leaves the file
    locked; the pid written into it is only for the message.
    """
    path = _instance_lock_path(database)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DatabaseInUse(
            f"another Switchboard instance (pid {holder}) is already running on the SQLite database "
            f"{database}. SQLite serves one instance only: stop the other one, give this one its own "
            "database.url, or run several instances on PostgreSQL (docs/scale-out.md)."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_sqlite_free(url: str) -> None:
    """Raise :class:`DatabaseInUse` if a running instance holds the SQLite database at ``url``.

    For ``serve``'s preflight, so the refusal is one clear line before the web server starts; the
    lock that counts is the one :meth:`Database.claim_instance` holds for the service's lifetime.
    """
    path = _lockable(sqlite_file(url))
    if path is not None and path.parent.exists():
        os.close(_try_instance_lock(path))


class Database:
    """Engine + session factory, with the dialect facts other parts need (``is_sqlite``)."""

    def __init__(self, url: str, *, pool_size: int = 15) -> None:
        """``pool_size``: connections the event loop may hold at once (the service sizes it from its
        concurrency limits); beyond it callers wait, they never get "QueuePool limit … reached"."""
        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, object] = {}
        pooled = True
        if self.is_sqlite:
            database = parsed.database or ""
            pooled = bool(database) and database != ":memory:"  # an in-memory database has one connection
            if pooled and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        else:
            kwargs["pool_pre_ping"] = True
        if pooled:
            # All of it as the pool proper, no overflow: overflow connections are closed on return, and
            # under a burst that meant a new connection (and aiosqlite thread) per query. Connections
            # are still opened only when needed.
            kwargs.update(pool_size=pool_size, max_overflow=0)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self.engine, expire_on_commit=False
        )

        self._sync_engine: Engine | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self._stop_maintenance = asyncio.Event()
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._instance_lock: int | None = None

    def claim_instance(self) -> None:
        """Hold this SQLite database for this process until :meth:`close` (a no-op on PostgreSQL).

        Two services on one SQLite file would each run the other's inbox entries and answer messages
        twice; several instances are PostgreSQL's job. Raises :class:`DatabaseInUse`.
        """
        path = _lockable(self.sqlite_path)
        if path is not None and self._instance_lock is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._instance_lock = _try_instance_lock(path)

    @property
    def sync_engine(self) -> Engine:
        """A plain (synchronous) SQLite engine: its dialect opens the inbox's own connection
        (:meth:`sqlite_connection`), which handles ``file:`` URIs the way the async engine does."""
        if not self.is_sqlite:
            raise RuntimeError("sync_engine is only used with SQLite")
        if self._sync_engine is None:
            url = make_url(self.url).set(drivername="sqlite")
            self._sync_engine = create_engine(
                url,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
                pool_size=1,
                max_overflow=0,
            )
            event.listen(self._sync_engine, "connect", _sqlite_pragmas)
        return self._sync_engine

    def sqlite_connection(self) -> sqlite3.Connection:
        """A new plain ``sqlite3`` connection to the same database with the same pragmas, owned by the
        caller (the inbox's writer, which runs its small commits on the event loop; see bot/inbox.py)."""
        engine = self.sync_engine
        (filename,), params = engine.dialect.create_connect_args(engine.url)  # handles file: URIs
        conn = sqlite3.connect(
            filename,
            uri=bool(params.get("uri")),
            timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
            check_same_thread=False,
        )
        _sqlite_pragmas(conn, None)
        return conn

    @property
    def sqlite_path(self) -> Path | None:
        """The database file, for SQLite (the agent's checkpointer keeps its own file beside it)."""
        return sqlite_file(self.url)

    @property
    def checkpoint_path(self) -> Path | None:
        """SQLite keeps the agent's checkpoints in a file beside the database (its own write lock);
        None on PostgreSQL, where they are tables in the same database."""
        path = self.sqlite_path
        return path.with_name(path.stem + "-checkpoints.db") if path is not None else None

    async def create_schema(self, metadatas: Iterable[MetaData]) -> None:
        from bot.migrations import upgrade

        async with self.engine.begin() as conn:
            if not self.is_sqlite:
                # Held until this transaction ends: the next instance sees the finished schema.
                from sqlalchemy import text

                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            for metadata in metadatas:
                await conn.run_sync(metadata.create_all)
            await upgrade(conn)

    async def ping(self) -> bool:
        return await self.problem() is None

    async def problem(self) -> str | None:
        """None when the database answers ``SELECT 1`` now; else ``unreachable (<error class>)``.

        Only the class of the error that stopped it (``ConnectionRefusedError``): a driver's message
        may name the host, the user or the database, and this answer is served on /health."""
        from sqlalchemy import text

        from bot.faults import describe

        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            return f"unreachable ({describe(exc)})"
        return None

    def start_maintenance(self) -> None:
        """SQLite: copy the WAL into the database every second, off the event loop and off every commit."""
        if self.is_sqlite and self.sqlite_path is not None and self._maintenance is None:
            self._stop_maintenance.clear()
            self._maintenance = asyncio.create_task(self._checkpoint_loop(), name="sqlite-checkpoint")

    async def stop_maintenance(self) -> None:
        """Stop the checkpoint loop cooperatively and wait for it.

        Not ``cancel()``: cancelling a task that awaits ``asyncio.to_thread`` abandons the thread, which
        keeps using the checkpoint connection while :meth:`close` closes it (a worker once segfaulted
        that way). The loop checks the event between rounds, so a running checkpoint always finishes.
        """
        if self._maintenance is None:
            return
        self._stop_maintenance.set()
        await self._maintenance
        self._maintenance = None

    async def _checkpoint_loop(self) -> None:
        while not self._stop_maintenance.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_maintenance.wait(), CHECKPOINT_INTERVAL_SECONDS)
                return
            try:
                await asyncio.to_thread(self._checkpoint, "PASSIVE")
            except Exception as exc:  # a busy database just means the next round does it
                log.debug("WAL checkpoint skipped: %s", exc)

    def _checkpoint(self, mode: str) -> None:
        if self._checkpoint_conn is None:
            conn = sqlite3.connect(
                str(self.sqlite_path), timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            self._checkpoint_conn = conn
        # PASSIVE never waits for readers or writers: it copies what it can and returns.
        self._checkpoint_conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    async def close(self) -> None:
        """Maintenance first (awaited, so no thread still holds a connection), then every connection."""
        await self.stop_maintenance()
        if self._checkpoint_conn is not None:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.to_thread(self._checkpoint, "TRUNCATE")
            self._checkpoint_conn.close()
            self._checkpoint_conn = None
        if self._sync_engine is not None:
            self._sync_engine.dispose()
        await self.engine.dispose()
        if self._instance_lock is not None:
            os.close(self._instance_lock)  # closing the descriptor releases the flock
            self._instance_lock = None
