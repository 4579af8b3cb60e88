"""Several ``serve`` instances on one PostgreSQL database: claims, instances and wake-ups.

Why: with one database and two instances, each used to run only what it accepted itself, so a
redelivery the *other* instance was still running looked pending and was answered twice, and a dead
instance's unfinished turns waited for it to come back. Here any instance may run any pending inbox
entry, and a claim row says who runs it:

- **A claim per conversation** (``conv:<provider>/<workspace>/<chat>/<topic>``) for turns: only the
  oldest pending turn of a conversation can be claimed, and the key is the primary key of
  ``cluster_claims``, so at most one turn per thread runs anywhere and the thread keeps its order.
  The claim belongs to the instance's *lane* for that thread, not to one entry: while it is held, the
  thread's later messages are claimed by the same instance and queue in its lane ("⏳ Queued", as on
  one instance), and a hidden follow-up (a goal step) runs under it through a *hold*. It is released
  when the last of them is finished, so no other instance can start a turn of the thread meanwhile.
- **A claim per entry** (``entry:<id>``) for chat commands (``/stop``, ``/help``…): they run at once,
  as on one instance, instead of waiting behind the turn they may be about to stop.

A claim expires ``cluster.claim_ttl_seconds`` after its last renewal (PostgreSQL's clock, so skewed
hosts agree); the heartbeat renews every claim this instance holds. A lapsed claim is taken over by the
next instance that looks for work, and the entry's saved reply reference and answer come with it. An
instance that finds a claim it thought it held renewed by nobody (it was paused past the TTL and
another instance took over) cancels that turn without replying.

Wake-ups are ``LISTEN/NOTIFY`` on one asyncpg connection per instance: ``switchboard_inbox`` when work
appears or a claim is freed, ``switchboard_stop`` (payload: a thread id) for ``/stop`` sent to another
instance. A slow poll (``cluster.poll_seconds``) covers a lost notification and finds lapsed claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Column, Float, Integer, MetaData, String, Table, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.db import Database
from bot.inbox import Inbox, InboxEntry
from channels.types import InboundMessage
from config.schema import Settings

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger(__name__)

metadata = MetaData()
instances_table = Table(
    "cluster_instances",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
)
claims_table = Table(
    "cluster_claims",
    metadata,
    Column("key", String(1000), primary_key=True),
    Column("entry_id", String(32), nullable=False, index=True),
    Column("holder", String(200), nullable=False, index=True),
    Column("expires", Float, nullable=False),
)

leases_table = Table(
    "cluster_leases",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("token", BigInteger, nullable=False),  # fencing: rises every time the holder changes
    Column("expires", Float, nullable=False),
)

INBOX_CHANNEL = "switchboard_inbox"
STOP_CHANNEL = "switchboard_stop"
#: Payload: a lease's name, released by a stopping instance (the others try to take it at once).
LEASE_CHANNEL = "switchboard_lease"
#: Pending entries read per page of a look for work (oldest first). A pass reads further pages only
#: while it has found less work than it may take (the oldest entries may all wait behind threads
#: other instances run), up to SCAN_PAGES pages; a backlog beyond that waits its turn.
SCAN_LIMIT = 500
SCAN_PAGES = 20
NOW = "EXTRACT(EPOCH FROM clock_timestamp())"
#: After regaining the database, an instance waits a heartbeat period plus this before it takes over
#: another instance's lapsed claim, so a holder that is alive renews its claims first.
TAKEOVER_GRACE_SECONDS = 1.0

_LIVE_KEYS = text(f"SELECT key, holder FROM cluster_claims WHERE expires >= {NOW}")
_PENDING = text("SELECT * FROM inbox WHERE status = 'pending' ORDER BY created_at, id LIMIT :limit")
_PENDING_AFTER = text(
    "SELECT * FROM inbox WHERE status = 'pending' AND (created_at, id) > (:created, :id) "
    "ORDER BY created_at, id LIMIT :limit"
)
#: Taken before a claim is written, without waiting: two instances claiming the same key in overlapping
#: passes skip instead of queueing on each other's rows (which could deadlock across two passes).
CLAIM_LOCKSPACE = 17017
_TRY_LOCK = text("SELECT pg_try_advisory_xact_lock(:space, hashtext(:key))")
_PREVIOUS = text("SELECT holder FROM cluster_claims WHERE key = :key")
_UPSERT = text(
    "INSERT INTO cluster_claims (key, entry_id, holder, expires) "
    f"VALUES (:key, :entry, :me, {NOW} + :ttl) "
    "ON CONFLICT (key) DO UPDATE SET entry_id = EXCLUDED.entry_id, holder = EXCLUDED.holder, "
    f"expires = EXCLUDED.expires WHERE cluster_claims.expires < {NOW} RETURNING key"
)
_STILL_PENDING = text("SELECT * FROM inbox WHERE id = :id AND status = 'pending'")
_OLDER_IN_CHAT = text(
    "SELECT payload FROM inbox WHERE provider = :provider AND workspace = :workspace AND chat = :chat "
    "AND status = 'pending' AND (created_at < :created OR (created_at = :created AND id < :id))"
)
_STILL_PENDING_IDS = text("SELECT id FROM inbox WHERE id = ANY(:ids) AND status = 'pending'")
#: Only the keys this process holds: rows left under the same id by a dead process are not renewed.
_RENEW = text(
    f"UPDATE cluster_claims SET expires = {NOW} + :ttl WHERE holder = :me AND key = ANY(:keys) RETURNING key"
)
_SAME_ID = text(
    f"SELECT host, pid, heartbeat_at, {NOW} - heartbeat_at AS age FROM cluster_instances WHERE id = :me"
)
_DROP_MINE = text("DELETE FROM cluster_claims WHERE holder = :me")
#: A claim's release that failed is tried again after this long, doubling up to ``RELEASE_RETRY_MAX``.
RELEASE_RETRY_FIRST = 0.1
RELEASE_RETRY_MAX = 2.0
_RELEASE = text("DELETE FROM cluster_claims WHERE key = :key AND holder = :me")
#: Hold tokens share ``cluster_claims.entry_id`` (32 characters) with inbox entry ids.
HOLD_PREFIX = "hold-"
_HEARTBEAT = text(
    "INSERT INTO cluster_instances (id, host, pid, started_at, heartbeat_at) "
    f"VALUES (:me, :host, :pid, {NOW}, {NOW}) "
    "ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at, pid = EXCLUDED.pid"
)
_LIVE_INSTANCES = text(
    f"SELECT id, host, pid, {NOW} - heartbeat_at AS age, "
    "(SELECT count(*) FROM cluster_claims c WHERE c.holder = i.id AND c.expires >= "
    f"{NOW}) AS claims FROM cluster_instances i WHERE heartbeat_at >= {NOW} - :ttl ORDER BY id"
)
_FORGET_DEAD = text(f"DELETE FROM cluster_instances WHERE heartbeat_at < {NOW} - 3600")
_HOLDER_ELSEWHERE = text(
    f"SELECT holder FROM cluster_claims WHERE key = :key AND holder <> :me AND expires >= {NOW}"
)
_REQUEUE = text("UPDATE inbox SET status = 'pending' WHERE id = :id AND status = 'failed'")
_REQUEUE_ALL = text("UPDATE inbox SET status = 'pending' WHERE status = 'failed'")

_LEASE_ACQUIRE = text(
    "INSERT INTO cluster_leases (name, holder, token, expires) "
    f"VALUES (:name, :me, 1, {NOW} + :ttl) "
    "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires, "
    "token = cluster_leases.token + CASE WHEN cluster_leases.holder = EXCLUDED.holder THEN 0 ELSE 1 END "
    f"WHERE cluster_leases.expires < {NOW} OR cluster_leases.holder = EXCLUDED.holder "
    "RETURNING token"
)
_LEASE_RENEW = text(
    f"UPDATE cluster_leases SET expires = {NOW} + :ttl "
    "WHERE name = :name AND holder = :me AND token = :token RETURNING token"
)
#: Released by expiring it, not deleting it: the row keeps the token, so tokens only ever rise.
_LEASE_RELEASE = text(
    "UPDATE cluster_leases SET expires = 0 WHERE name = :name AND holder = :me AND token = :token"
)
#: Each lease transaction gives up on a row lock, and is ended by PostgreSQL when its client goes quiet,
#: within a third of the TTL: a holder frozen between its UPDATE and its COMMIT (a stalled network, a
#: paused host) would otherwise keep the lease row locked, and nobody could take the lease over.
_LEASE_LIMITS = text(
    "SELECT set_config('idle_in_transaction_session_timeout', :ms, true), set_config('lock_timeout', :ms, true)"
)
_LEASE_HOLDER = text(f"SELECT holder, token FROM cluster_leases WHERE name = :name AND expires >= {NOW}")
_LEASE_LAPSES_IN = text(f"SELECT holder, expires - {NOW} FROM cluster_leases WHERE name = :name")

IsCommand = Callable[[InboundMessage], bool]


class InstanceIdInUse(RuntimeError):
    """Another running instance uses this ``cluster.instance_id``; two would both think they hold its
    claims and leases, so the second is refused. The message says what to change."""


def _hold_token() -> str:
    """A hold's member id in a claim's lane: never an inbox entry id (those are 32 hex digits)."""
    return HOLD_PREFIX + uuid.uuid4().hex[:24]


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def conversation_claim_key(message: InboundMessage) -> str:
    return "conv:" + "/".join(message.conversation_key)


def claim_key(entry: InboxEntry, is_command: IsCommand) -> str:
    return f"entry:{entry.id}" if is_command(entry.message) else conversation_claim_key(entry.message)


class _NotOurs(Exception):
    """Roll a claim back: the entry was finished, or an older turn of its thread is still waiting."""


class Cluster:
    """This instance's membership: claims it holds, its heartbeat, and its LISTEN connection."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.instance_id = settings.cluster.instance_id or default_instance_id()
        self.ttl = settings.cluster.claim_ttl_seconds
        self.poll_seconds = min(settings.cluster.poll_seconds, self.ttl / 2)
        self.held: set[str] = set()  # inbox entry ids this instance claimed and has not released
        #: Claim key → what runs under it here: entry ids and hold tokens. The row is deleted when the
        #: set empties, so a thread stays this instance's while its lane has anything left to run.
        self.members: dict[str, set[str]] = {}
        self._key_of: dict[str, str] = {}  # entry id or hold token → its claim key
        #: Told the thread id (and a Stop button's turn token, if any) of a ``/stop`` another instance
        #: received (the manager's cancel_running).
        self.on_stop: Callable[[str, str | None], object] | None = None
        #: Told an entry id whose claim another instance took over (this instance must stop its turn).
        self.on_lost: Callable[[str], object] | None = None
        #: Told the name of a lease another instance released (bot.leases.LeaseKeeper.wake).
        self.on_lease_freed: Callable[[str], object] | None = None
        self._wake = asyncio.Event()
        self._listener: asyncpg.Connection | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._stopping = False  # stop() has begun: background writes are not tried again
        self._notify_queued = False
        #: When this instance last regained PostgreSQL (monotonic; None while out of touch): another
        #: instance's lapsed claim is taken over only a heartbeat period after it (_may_take_over).
        self._reachable_since: float | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._take_id()
        await self._beat()
        await self._listen()
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="cluster-heartbeat")
        log.info("cluster: instance %s joined (claim ttl %.0f s)", self.instance_id, self.ttl)

    async def stop(self) -> None:
        """Release everything still held (another instance takes it at once) and leave the cluster."""
        self._stopping = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    text("DELETE FROM cluster_claims WHERE holder = :me"), {"me": self.instance_id}
                )
                await conn.execute(
                    text("DELETE FROM cluster_instances WHERE id = :me"), {"me": self.instance_id}
                )
                await conn.execute(text("SELECT pg_notify(:c, '')"), {"c": INBOX_CHANNEL})
        except Exception as exc:  # the claims lapse by themselves after the TTL
            log.warning("cluster: leaving cleanly failed: %s", exc)
        self.held.clear()
        self.members.clear()
        self._key_of.clear()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None

    async def _take_id(self) -> None:
        """Refuse an id a running instance uses; free what a dead process under this id left behind.

        A process restarted with a fixed id (kill -9, then start again) finds its predecessor's row:
        if that heartbeat is recent, wait one heartbeat period to see whether it still beats (refused)
        or not (dead: its claims are deleted so its unfinished turns run at once, here or anywhere).
        """
        row = await self._same_id()  # not this process's own: it has not beaten yet
        if row is not None and float(row["age"]) < self.ttl:
            wait = self.ttl / 3 + 0.5
            log.info(
                "cluster: instance id %s was last seen %.1f s ago (host %s, pid %s); checking for %.1f s "
                "whether it is still running",
                self.instance_id,
                float(row["age"]),
                row["host"],
                row["pid"],
                wait,
            )
            await asyncio.sleep(wait)
            again = await self._same_id()
            if again is not None and float(again["heartbeat_at"]) > float(row["heartbeat_at"]):
                raise InstanceIdInUse(
                    f"cluster.instance_id {self.instance_id!r} is in use by a running instance (host "
                    f"{again['host']}, pid {again['pid']}): give each instance its own id, or leave it "
                    "empty for a generated one"
                )
        async with self.db.engine.begin() as conn:
            dropped = (await conn.execute(_DROP_MINE, {"me": self.instance_id})).rowcount
            if dropped:
                await conn.execute(text("SELECT pg_notify(:c, '')"), {"c": INBOX_CHANNEL})
        if dropped:
            log.warning(
                "cluster: freed %d claim(s) a previous process with id %s left behind",
                dropped,
                self.instance_id,
            )

    async def _same_id(self) -> Any:
        async with self.db.engine.connect() as conn:
            return (await conn.execute(_SAME_ID, {"me": self.instance_id})).mappings().first()

    async def _listen(self) -> bool:
        """Open the LISTEN connection; False (logged) when it cannot: the fallback poll finds work."""
        import asyncpg

        url = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        listener = None
        try:
            listener = await asyncpg.connect(url)
            await listener.add_listener(INBOX_CHANNEL, self._on_inbox)
            await listener.add_listener(STOP_CHANNEL, self._on_stop)
            await listener.add_listener(LEASE_CHANNEL, self._on_lease)
        except BaseException as exc:  # the fallback poll still finds work, only later
            if listener is not None:
                listener.terminate()  # no round trip: it may be what failed, or we are being cancelled
            if not isinstance(exc, Exception):
                raise
            log.warning("cluster: LISTEN failed, polling every %.0f s instead: %s", self.poll_seconds, exc)
            return False
        self._listener = listener
        return True

    async def _keep_listening(self) -> None:
        """Open the LISTEN connection again when it was lost (PostgreSQL restarted, a network cut).

        Called after each good heartbeat, so it comes back within a heartbeat of the database. What
        was notified meanwhile is lost: this instance looks for work at once instead."""
        if self._listener is not None and not self._listener.is_closed():
            return
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        if await self._listen():
            log.info("cluster: LISTEN connection open again")
            self._wake.set()

    def _on_inbox(self, *_args: object) -> None:
        self._wake.set()

    def _on_lease(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if self.on_lease_freed is not None:
            self.on_lease_freed(payload)

    def _on_stop(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        thread_id, _, token = payload.partition(" ")
        if self.on_stop is not None:
            self.on_stop(thread_id, token or None)

    # --- wake-ups ------------------------------------------------------------------------------------
    async def wait_for_work(self) -> None:
        """Until a NOTIFY (or a local event) says there may be work, or the fallback poll is due."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
        self._wake.clear()

    def wake_here(self) -> None:
        """Make this instance's claim loop look now (it ends there if the bus closed)."""
        self._wake.set()

    def wake(self) -> None:
        """Look for work here now and tell the other instances to look too.

        Coalesced: a burst of accepts sends one NOTIFY while one is still waiting to be sent, and
        another once that one has started (what is accepted during it needs its own).
        """
        self._wake.set()
        if not self._notify_queued:
            self._notify_queued = True
            self._spawn(self._notify_inbox())

    async def _notify_inbox(self) -> None:
        self._notify_queued = False
        async with self.db.engine.begin() as conn:
            await conn.execute(text("SELECT pg_notify(:c, '')"), {"c": INBOX_CHANNEL})

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("cluster: background write failed: %s", task.exception())

    # --- claims --------------------------------------------------------------------------------------
    async def claim(self, limit: int, is_command: IsCommand) -> tuple[list[InboxEntry], int]:
        """Claim up to ``limit`` runnable entries, oldest first: commands, and each thread's oldest turn.

        Also returns how many pending entries wait behind a thread this instance holds: they are this
        instance's to run next, so it still counts them as unfinished (``wait_idle``).
        """
        if limit <= 0:
            return [], 0
        try:
            return await self._claim(limit, is_command)
        except Exception:
            self._reachable_since = None  # out of touch: a takeover waits again once it is back
            raise

    def _may_take_over(self) -> bool:
        """Whether this instance may take over another instance's lapsed claim now.

        Not within a heartbeat period (plus a margin) of regaining the database: after an outage
        longer than the TTL every claim has lapsed, but the holders are alive and renew theirs at
        their next heartbeat. Taking one over first ran its turn twice, and the holder's reply (which
        it could not store during the outage) stayed in the chat beside the new one."""
        since = self._reachable_since
        return since is not None and time.monotonic() - since >= self.ttl / 3 + TAKEOVER_GRACE_SECONDS

    async def _claim(self, limit: int, is_command: IsCommand) -> tuple[list[InboxEntry], int]:
        seen: set[str] = set()
        entries: list[tuple[str, InboxEntry]] = []
        candidates: list[tuple[str, InboxEntry]] = []
        joining: list[tuple[str, InboxEntry]] = []  # later messages of threads this instance holds
        async with self.db.engine.connect() as conn:
            live = {row[0]: row[1] for row in await conn.execute(_LIVE_KEYS)}
            if self._reachable_since is None:
                self._reachable_since = time.monotonic()
            rows = (await conn.execute(_PENDING, {"limit": SCAN_LIMIT})).mappings().all()
            for page in range(SCAN_PAGES):
                for row in rows:
                    entry = Inbox._entry(row)
                    key = claim_key(entry, is_command)
                    entries.append((key, entry))
                    if entry.id in self.held:
                        continue
                    if key in self.members and live.get(key) == self.instance_id:
                        joining.append((key, entry))
                        continue
                    if key in seen:  # a later turn of a thread whose oldest turn is ahead of it
                        continue
                    seen.add(key)
                    if key not in live:
                        candidates.append((key, entry))
                if (
                    len(rows) < SCAN_LIMIT
                    or len(candidates) + len(joining) >= limit
                    or page + 1 == SCAN_PAGES
                ):
                    break
                last = rows[-1]
                after = {"created": last["created_at"], "id": last["id"], "limit": SCAN_LIMIT}
                rows = (await conn.execute(_PENDING_AFTER, after)).mappings().all()
        claimed = await self._join(joining[:limit])  # joined entries are in their lanes already
        mine = {key for key, holder in live.items() if holder == self.instance_id}
        took_over: list[tuple[str, str]] = []
        if candidates:
            fresh_claims: list[tuple[str, InboxEntry]] = []
            # One transaction for the pass, a savepoint per candidate (one that is not ours rolls back).
            async with self.db.engine.begin() as conn:
                for key, entry in candidates:
                    if len(claimed) + len(fresh_claims) >= limit:
                        break
                    got = await self._try_claim(conn, key, entry, is_command)
                    if got is not None:
                        fresh, previous = got
                        fresh_claims.append((key, fresh))
                        mine.add(key)
                        if previous is not None and previous != self.instance_id:
                            took_over.append((fresh.id, previous))
            for key, fresh in fresh_claims:  # committed: now they are this instance's
                self._add(key, fresh.id)
                claimed.append(fresh)
        for entry_id, previous in took_over:
            log.warning(
                "cluster: took over inbox entry %s from instance %s (its claim lapsed)", entry_id, previous
            )
        taken = {entry.id for entry in claimed} | self.held
        waiting = sum(1 for key, entry in entries if key in mine and entry.id not in taken)
        return claimed, waiting

    async def _join(self, joining: list[tuple[str, InboxEntry]]) -> list[InboxEntry]:
        """Take later messages of threads held here into their lanes (no claim row to write: the
        thread's row is ours). Read again first: one that finished since the pass began (it was run
        here and released) must not run twice."""
        if not joining:
            return []
        async with self.db.engine.connect() as conn:
            still = {
                row[0]
                for row in await conn.execute(
                    _STILL_PENDING_IDS, {"ids": [entry.id for _key, entry in joining]}
                )
            }
        joined = []
        for key, entry in joining:
            if entry.id in still and entry.id not in self.held and key in self.members:
                self._add(key, entry.id)
                joined.append(entry)
        return joined

    def _add(self, key: str, member: str) -> None:
        self.members.setdefault(key, set()).add(member)
        self._key_of[member] = key
        if not member.startswith(HOLD_PREFIX):
            self.held.add(member)

    # --- holds: hidden follow-ups under a thread's claim ----------------------------------------------
    def hold(self, message: InboundMessage) -> str | None:
        """Keep the conversation's claim for work no inbox entry stands for (a goal step, the after-turn
        hooks): a token to :meth:`release`, or None when this instance does not hold the thread."""
        key = conversation_claim_key(message)
        if key not in self.members:
            return None
        token = _hold_token()
        self._add(key, token)
        return token

    async def acquire(self, message: InboundMessage) -> str | None:
        """Claim a conversation this instance does not hold, for a hidden turn (a goal step resumed at
        start): a hold token, or None while another instance holds it or an older message waits."""
        token = self.hold(message)
        if token is not None:
            return token
        key = conversation_claim_key(message)
        token = _hold_token()
        async with self.db.engine.begin() as conn:
            if not (await conn.execute(_TRY_LOCK, {"space": CLAIM_LOCKSPACE, "key": key})).scalar():
                return None
            got = await conn.execute(
                _UPSERT, {"key": key, "entry": token, "me": self.instance_id, "ttl": self.ttl}
            )
            if got.first() is None:
                return None
        if key in self.members:  # a claim pass took the thread meanwhile: one row, shared
            return self.hold(message)
        self._add(key, token)
        return token

    async def _try_claim(
        self, conn: Any, key: str, entry: InboxEntry, is_command: IsCommand
    ) -> tuple[InboxEntry, str | None] | None:
        """Claim ``key`` for ``entry`` inside ``conn``'s transaction: the entry (read again) and the
        previous holder of a lapsed claim, or None when it is not ours to run now."""
        try:
            async with conn.begin_nested():
                if not (await conn.execute(_TRY_LOCK, {"space": CLAIM_LOCKSPACE, "key": key})).scalar():
                    return None  # another instance is claiming this key right now
                previous = (await conn.execute(_PREVIOUS, {"key": key})).scalar()
                if previous is not None and previous != self.instance_id and not self._may_take_over():
                    raise _NotOurs  # its holder may be alive and about to renew it (see _may_take_over)
                got = await conn.execute(
                    _UPSERT, {"key": key, "entry": entry.id, "me": self.instance_id, "ttl": self.ttl}
                )
                if got.first() is None:
                    # Someone else holds this thread (or command) right now. Roll the savepoint back:
                    # ON CONFLICT locked their row even though it changed nothing, and a lock kept to
                    # the end of this pass made their heartbeat wait on us while we waited on it
                    # (PostgreSQL ended the heartbeat with "deadlock detected").
                    raise _NotOurs
                # Read again after the claim (a fresh snapshot): finished meanwhile, or not its turn yet?
                row = (await conn.execute(_STILL_PENDING, {"id": entry.id})).mappings().first()
                if row is None:
                    raise _NotOurs
                fresh = Inbox._entry(row)
                if not key.startswith("entry:"):
                    older = await conn.execute(
                        _OLDER_IN_CHAT,
                        {
                            "provider": fresh.message.provider,
                            "workspace": fresh.message.workspace,
                            "chat": fresh.message.chat,
                            "created": row["created_at"],
                            "id": fresh.id,
                        },
                    )
                    if self._older_turn_waits(older, fresh.message, is_command):
                        raise _NotOurs
        except _NotOurs:
            return None
        return fresh, previous

    @staticmethod
    def _older_turn_waits(rows: Any, message: InboundMessage, is_command: IsCommand) -> bool:
        for (payload,) in rows:
            older = InboundMessage.from_json(json.loads(payload))
            if older.conversation_key == message.conversation_key and not is_command(older):
                return True
        return False

    def release(self, entry_id: str) -> None:
        """The entry (or a hold token) is finished here (done, failed, or left at shutdown); once
        nothing else runs under its claim, free the claim and wake the others.

        Called after the entry's done/failed mark is committed, so nobody can claim a finished entry.
        """
        key = self._key_of.pop(entry_id, None)
        self.held.discard(entry_id)
        if key is None:
            return
        members = self.members.get(key)
        if members is not None:
            members.discard(entry_id)
            if members:
                return
            del self.members[key]
        self._spawn(self._release(key))

    async def _release(self, key: str) -> None:
        """Delete the claim row, tried again while PostgreSQL is briefly away.

        Why again: until the row is gone the claim is live and this instance's own, so the claim loop
        skips the conversation (neither a candidate nor a thread running here) and its next message
        waited for the claim to lapse, up to the whole TTL, when one DELETE met a connection PostgreSQL
        had just dropped. Nothing can claim the key meanwhile (the row is live), so trying again cannot
        delete a newer claim of ours. Stops once the claim would have lapsed anyway, or at shutdown
        (which deletes every claim of this instance)."""
        delay, give_up = RELEASE_RETRY_FIRST, time.monotonic() + self.ttl
        while True:
            try:
                async with self.db.engine.begin() as conn:
                    await conn.execute(_RELEASE, {"key": key, "me": self.instance_id})
                    await conn.execute(text("SELECT pg_notify(:c, '')"), {"c": INBOX_CHANNEL})
                break
            except Exception as exc:
                if self._stopping or time.monotonic() + delay > give_up:
                    raise
                log.info("cluster: releasing %s failed, trying again in %.2f s: %s", key, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RELEASE_RETRY_MAX)
        self._wake.set()

    async def requeue(self, entry_id: str) -> None:
        """A failed entry runs again (on whichever instance claims it first)."""
        async with self.db.engine.begin() as conn:
            await conn.execute(_REQUEUE, {"id": entry_id})
        self.wake()

    async def requeue_failed(self) -> int:
        """At start: failed entries run again, as a single instance resumes them at its start."""
        async with self.db.engine.begin() as conn:
            moved = (await conn.execute(_REQUEUE_ALL)).rowcount
        self.wake()
        return int(moved or 0)

    async def runs_elsewhere(self, message: InboundMessage) -> bool:
        """Another live instance holds the claim on ``message``'s conversation: what waits in it is theirs."""
        async with self.db.engine.connect() as conn:
            holder = (
                await conn.execute(
                    _HOLDER_ELSEWHERE, {"key": conversation_claim_key(message), "me": self.instance_id}
                )
            ).scalar()
        return holder is not None

    async def stop_elsewhere(self, message: InboundMessage, thread_id: str, token: str | None = None) -> bool:
        """``/stop`` for a thread whose turn runs on another instance: tell that instance. True if one does.

        ``token`` (a Stop button's) makes that instance stop only the turn the button belongs to."""
        async with self.db.engine.begin() as conn:
            holder = (
                await conn.execute(
                    _HOLDER_ELSEWHERE, {"key": conversation_claim_key(message), "me": self.instance_id}
                )
            ).scalar()
            if holder is None:
                return False
            payload = f"{thread_id} {token}" if token else thread_id
            await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": STOP_CHANNEL, "p": payload})
        log.info("cluster: /stop for a turn on instance %s sent there", holder)
        return True

    # --- heartbeat -----------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self._beat()
            except Exception as exc:  # PostgreSQL briefly away: claims lapse only after the whole TTL
                log.warning("cluster: heartbeat failed: %s", exc)
                self._reachable_since = None
                continue
            await self._keep_listening()

    async def _beat(self) -> None:
        held = set(self.members)  # committed before the renewal below starts, so it must see them
        async with self.db.engine.begin() as conn:
            await conn.execute(
                _HEARTBEAT, {"me": self.instance_id, "host": socket.gethostname(), "pid": os.getpid()}
            )
            renewed = {
                row[0]
                for row in await conn.execute(
                    _RENEW, {"me": self.instance_id, "ttl": self.ttl, "keys": sorted(held)}
                )
            }
            await conn.execute(_FORGET_DEAD)
        for key in held - renewed:
            for member in sorted(self.members.pop(key, ())):
                self._key_of.pop(member, None)
                self.held.discard(member)
                log.warning("cluster: lost the claim on inbox entry %s to another instance", member)
                if self.on_lost is not None:
                    self.on_lost(member)

    # --- visibility ----------------------------------------------------------------------------------
    async def instances(self) -> list[dict[str, Any]]:
        """The live instances (heartbeat within the TTL) and how many claims each holds."""
        return await live_instances(self.db, self.ttl)

    async def health(self) -> dict[str, Any]:
        try:
            members: Sequence[dict[str, Any]] | str = await self.instances()
        except Exception as exc:
            members = f"unavailable: {type(exc).__name__}"
        return {"instance": self.instance_id, "claims": len(self.held), "instances": members}


async def live_instances(db: Database, ttl: float) -> list[dict[str, Any]]:
    async with db.engine.connect() as conn:
        rows = (await conn.execute(_LIVE_INSTANCES, {"ttl": ttl})).mappings().all()
    return [
        {
            "id": r["id"],
            "host": r["host"],
            "pid": r["pid"],
            "claims": int(r["claims"]),
            "heartbeat_age_seconds": round(float(r["age"]), 1),
        }
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class LeaseOffer:
    """What one attempt to take a lease found: ``token`` when this instance holds it now; otherwise the
    live or last ``holder`` and the seconds until its lease lapses (PostgreSQL's clock)."""

    token: int | None
    holder: str
    lapses_in: float


class Lease:
    """A named lease that at most one instance holds: for a platform connection that must exist once
    (Telegram long polling, the Discord gateway); :class:`bot.leases.LeaseKeeper` holds them.

    ``token`` is the fencing token: it rises every time the lease changes hands, so a former holder
    that wakes up after its lease lapsed can tell (its renewal, keyed by its token, finds nothing).
    """

    def __init__(self, db: Database, name: str, holder: str, ttl: float) -> None:
        self.db = db
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.token: int | None = None
        #: After a failed :meth:`acquire`: seconds until the current holder's lease lapses (PostgreSQL's
        #: clock), so a standby can try again right then instead of a whole period later.
        self.lapses_in: float = 0.0

    async def acquire(self) -> bool:
        """Take the lease if it is free or lapsed (or already ours); True when this instance holds it."""
        offer = await self.try_acquire()
        if offer.token is not None and offer.token != self.token:
            log.info("cluster: lease %s now held by %s (token %d)", self.name, self.holder, offer.token)
        self.token = offer.token
        self.lapses_in = offer.lapses_in
        return offer.token is not None

    async def try_acquire(self) -> LeaseOffer:
        """One attempt, changing nothing on this object: the token when taken, else who holds the lease
        and when it lapses. (The lease keeper assigns the token itself: an attempt it gave up waiting for
        must not change what it believes later.)"""
        async with self.db.engine.begin() as conn:
            await self._limit(conn)
            token = (
                await conn.execute(_LEASE_ACQUIRE, {"name": self.name, "me": self.holder, "ttl": self.ttl})
            ).scalar()
            if token is not None:
                return LeaseOffer(int(token), self.holder, float(self.ttl))
            row = (await conn.execute(_LEASE_LAPSES_IN, {"name": self.name})).first()
        holder, left = (str(row[0]), float(row[1] or 0.0)) if row else ("", 0.0)
        return LeaseOffer(None, holder, max(left, 0.0))

    async def renew(self) -> bool:
        """Extend the lease; False (and no longer held) when it lapsed and another instance took it."""
        if self.token is None:
            return False
        kept = await self.extend(self.token)
        if not kept:
            log.warning("cluster: lease %s lost by %s", self.name, self.holder)
            self.token = None
        return kept

    async def extend(self, token: int) -> bool:
        """Extend the lease held under ``token``; False when that token no longer holds it. Changes
        nothing on this object."""
        params = {"name": self.name, "me": self.holder, "token": token, "ttl": self.ttl}
        async with self.db.engine.begin() as conn:
            await self._limit(conn)
            return (await conn.execute(_LEASE_RENEW, params)).scalar() is not None

    async def _limit(self, conn: AsyncConnection) -> None:
        await conn.execute(_LEASE_LIMITS, {"ms": str(max(round(self.ttl / 3 * 1000), 100))})

    async def release(self) -> None:
        if self.token is None:
            return
        async with self.db.engine.begin() as conn:
            await self._limit(conn)
            await conn.execute(_LEASE_RELEASE, {"name": self.name, "me": self.holder, "token": self.token})
            await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": LEASE_CHANNEL, "p": self.name})
        self.token = None

    async def current(self) -> tuple[str, int] | None:
        """The live holder and its token, or None when nobody holds the lease."""
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(_LEASE_HOLDER, {"name": self.name})).first()
        return (row[0], int(row[1])) if row else None
