"""The connections repository: users, one-time connect codes and identity bindings.

Two rules need real atomicity, not check-then-act in Python, because several workers (and several
instances on PostgreSQL) run them at once:

* **at most N pending codes per owner and provider** — counting and inserting happen inside one
  exclusive section: ``BEGIN IMMEDIATE`` on SQLite (takes the database write lock before the count), a
  transaction-scoped advisory lock keyed on (owner, provider) on PostgreSQL;
* **a code is consumed once** — a conditional ``UPDATE … WHERE used_at IS NULL AND expires_at > now AND
  provider = :p`` whose row count says who won;
* **one active owner per platform identity** — the bind runs under an exclusive section keyed on the
  identity and a partial unique index backs it up; a bind from another owner revokes the old row in the
  same transaction.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import and_, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from config.batching import KeyQuery
from connections.attempts import AttemptLimiter
from connections.identity import PlatformIdentity, validate_user_id
from connections.tables import ACTIVE, REVOKED, connect_codes_table, connections_table, users_table

# owners_of's statement, built once per number of (provider, workspace) groups (config.batching.KeyQuery)
# — not a row-value IN, for which SQLite walks the whole active-identity index.
_OWNERS_OF = KeyQuery(
    [connections_table.c.provider, connections_table.c.workspace, connections_table.c.external_id],
    lambda where: select(
        connections_table.c.provider,
        connections_table.c.workspace,
        connections_table.c.external_id,
        connections_table.c.owner,
    ).where(where, connections_table.c.status == ACTIVE),
    varying=2,
)

MAX_PENDING_CODES = 5
CODE_BYTES = 18  # 144 bits of randomness → 24 URL-safe characters (Telegram deep links allow 64)
BIND_ATTEMPTS = 3

Listener = Callable[[PlatformIdentity], None]

log = logging.getLogger(__name__)


class ConnectionsError(Exception):
    """Base for refusals the API and the chat command turn into clear messages."""


class TooManyPendingCodes(ConnectionsError):
    def __init__(self, provider: str, limit: int) -> None:
        super().__init__(
            f"you already have {limit} unused {provider} codes; use one or wait for them to expire"
        )
        self.provider = provider
        self.limit = limit


class CodeRejected(ConnectionsError):
    """A code that cannot bind: ``reason`` is invalid | used | expired | wrong_provider | throttled."""

    def __init__(self, reason: str, *, code_provider: str | None = None, retry_after: float = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code_provider = code_provider
        #: For ``throttled``: seconds until this sender and chat may try again.
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class IssuedCode:
    code: str
    provider: str
    expires_at: float
    ttl: int


@dataclass(frozen=True, slots=True)
class Connection:
    id: str
    owner: str
    provider: str
    workspace: str
    external_id: str
    external_name: str | None
    status: str
    created_at: float
    updated_at: float

    @property
    def identity(self) -> PlatformIdentity:
        return PlatformIdentity(self.provider, self.workspace, self.external_id)


@dataclass(frozen=True, slots=True)
class Person:
    """A signed-in user and their active connections, as the operator console lists them."""

    id: str
    last_seen_at: float
    connections: list[Connection]


@dataclass(frozen=True, slots=True)
class BindResult:
    connection: Connection
    #: The owner whose binding this one replaced (None when the identity was free or already theirs).
    replaced_owner: str | None
    already_bound: bool


def hash_code(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()


def _lock_key(*parts: str) -> int:
    """A signed 64-bit key for ``pg_advisory_xact_lock`` from the parts that name the resource."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _connection(row) -> Connection:  # type: ignore[no-untyped-def]
    return Connection(
        id=row["id"],
        owner=row["owner"],
        provider=row["provider"],
        workspace=row["workspace"],
        external_id=row["external_id"],
        external_name=row["external_name"],
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class ConnectionStore:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        code_ttl_seconds: int = 600,
        max_pending: int = MAX_PENDING_CODES,
        max_failed_attempts: int = 5,
        failed_attempts_window: float = 600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.attempts = AttemptLimiter(max_failed_attempts, failed_attempts_window)
        self.is_sqlite = engine.dialect.name == "sqlite"
        self.code_ttl_seconds = code_ttl_seconds
        self.max_pending = max_pending
        self.clock = clock
        self._insert = sqlite.insert if self.is_sqlite else postgresql.insert
        self._listeners: list[Listener] = []

    # --- change notification (the resolver's cache) --------------------------------------------------
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(identity)`` after a binding of ``identity`` changed (bind or revoke)."""
        self._listeners.append(listener)

    def _changed(self, identity: PlatformIdentity) -> None:
        for listener in self._listeners:
            listener(identity)

    # --- transactions -----------------------------------------------------------------------------
    @asynccontextmanager
    async def _exclusive(self, *lock: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction that no other writer of the same ``lock`` can interleave with.

        SQLite: ``BEGIN IMMEDIATE`` takes the write lock up front (other writers wait on the busy
        timeout), so a count followed by an insert cannot race. PostgreSQL: an advisory lock held until
        commit serialises writers of the same resource only.
        """
        async with self.engine.connect() as conn:
            if self.is_sqlite:
                await conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                await conn.begin()
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(*lock)})
            try:
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()

    # --- users ------------------------------------------------------------------------------------
    async def ensure_user(self, user_id: str) -> None:
        """Create the user row on first sight (users come from JWT ``sub`` or the ``default`` user)."""
        validate_user_id(user_id)
        async with self.engine.begin() as conn:
            await self._upsert_user(conn, user_id)

    async def _upsert_user(self, conn: AsyncConnection, user_id: str) -> None:
        now = self.clock()
        statement = self._insert(users_table).values(id=user_id, created_at=now, last_seen_at=now)
        await conn.execute(statement.on_conflict_do_nothing(index_elements=["id"]))

    # --- codes ------------------------------------------------------------------------------------
    async def create_code(self, owner: str, provider: str) -> IssuedCode:
        """A fresh one-time code for ``owner`` to send from ``provider``; only its hash is stored."""
        validate_user_id(owner)
        code = secrets.token_urlsafe(CODE_BYTES)
        ttl = self.code_ttl_seconds
        c = connect_codes_table.c
        async with self._exclusive("codes", owner, provider) as conn:
            now = self.clock()
            await self._upsert_user(conn, owner)
            pending = await conn.scalar(
                select(func.count())
                .select_from(connect_codes_table)
                .where(c.owner == owner, c.provider == provider, c.used_at.is_(None), c.expires_at > now)
            )
            if (pending or 0) >= self.max_pending:
                raise TooManyPendingCodes(provider, self.max_pending)
            await conn.execute(
                connect_codes_table.insert().values(
                    code_hash=hash_code(code),
                    owner=owner,
                    provider=provider,
                    created_at=now,
                    expires_at=now + ttl,
                )
            )
        return IssuedCode(code=code, provider=provider, expires_at=now + ttl, ttl=ttl)

    async def pending_codes(self, owner: str, provider: str) -> int:
        c = connect_codes_table.c
        async with self.engine.connect() as conn:
            return int(
                await conn.scalar(
                    select(func.count())
                    .select_from(connect_codes_table)
                    .where(
                        c.owner == owner,
                        c.provider == provider,
                        c.used_at.is_(None),
                        c.expires_at > self.clock(),
                    )
                )
                or 0
            )

    # --- binding ----------------------------------------------------------------------------------
    async def bind_with_code(
        self,
        code: str,
        identity: PlatformIdentity,
        external_name: str | None = None,
        *,
        chat: str | None = None,
    ) -> BindResult:
        """Consume ``code`` (once, for its provider) and bind ``identity`` to the code's owner.

        Raises :class:`CodeRejected` and changes nothing when the code is unknown, used, expired or was
        made for another platform — or, without looking at the code, when this sender or ``chat`` failed
        too often lately (``throttled``).
        """
        keys = [("sender", identity.provider, identity.workspace, identity.external_id)]
        if chat is not None:
            keys.append(("chat", identity.provider, identity.workspace, chat))
        wait = self.attempts.blocked_for(keys)
        if wait > 0:
            raise CodeRejected("throttled", retry_after=wait)
        try:
            result = await self._bind(code, identity, external_name)
        except CodeRejected:
            self.attempts.failed(keys)
            raise
        self.attempts.succeeded(keys)
        c = result.connection
        log.info(
            "account linked: %s on %s (connection %s)",
            c.owner,
            c.provider,
            c.id,
            extra={"fields": {"event": "link", "owner": c.owner, "provider": c.provider, "connection": c.id}},
        )
        return result

    async def _bind(self, code: str, identity: PlatformIdentity, external_name: str | None) -> BindResult:
        for attempt in range(BIND_ATTEMPTS):
            try:
                result = await self._bind_once(code, identity, external_name)
            except IntegrityError:
                # Only reachable if a writer bypassed the exclusive section; the index kept the invariant.
                if attempt == BIND_ATTEMPTS - 1:
                    raise
                continue
            self._changed(identity)
            return result
        raise AssertionError("unreachable")

    async def _bind_once(
        self, code: str, identity: PlatformIdentity, external_name: str | None
    ) -> BindResult:
        c = connect_codes_table.c
        hashed = hash_code(code)
        async with self._exclusive(
            "identity", identity.provider, identity.workspace, identity.external_id
        ) as conn:
            now = self.clock()
            consumed = await conn.execute(
                update(connect_codes_table)
                .where(
                    c.code_hash == hashed,
                    c.used_at.is_(None),
                    c.expires_at > now,
                    c.provider == identity.provider,
                )
                .values(used_at=now, used_by=identity.unbound_owner[:400])
            )
            if consumed.rowcount != 1:
                raise await self._why_rejected(conn, hashed, identity.provider, now)
            owner = await conn.scalar(select(c.owner).where(c.code_hash == hashed))
            if owner is None:  # the row was just consumed, so this cannot happen short of a schema bug
                raise CodeRejected("invalid")
            return await self._bind_locked(conn, owner, identity, external_name, now)

    async def _why_rejected(
        self, conn: AsyncConnection, hashed: str, provider: str, now: float
    ) -> CodeRejected:
        c = connect_codes_table.c
        row = (
            (await conn.execute(select(c.provider, c.used_at, c.expires_at).where(c.code_hash == hashed)))
            .mappings()
            .first()
        )
        if row is None:
            return CodeRejected("invalid")
        if row["used_at"] is not None:
            return CodeRejected("used")
        if row["provider"] != provider:
            return CodeRejected("wrong_provider", code_provider=row["provider"])
        return CodeRejected("expired")

    async def _bind_locked(
        self,
        conn: AsyncConnection,
        owner: str,
        identity: PlatformIdentity,
        external_name: str | None,
        now: float,
    ) -> BindResult:
        t = connections_table.c
        match = and_(
            t.provider == identity.provider,
            t.workspace == identity.workspace,
            t.external_id == identity.external_id,
            t.status == ACTIVE,
        )
        existing = (await conn.execute(select(connections_table).where(match))).mappings().first()
        name = (external_name or "")[:200] or None
        if existing is not None and existing["owner"] == owner:
            await conn.execute(
                update(connections_table)
                .where(t.id == existing["id"])
                .values(external_name=name or existing["external_name"], updated_at=now)
            )
            row = (
                (await conn.execute(select(connections_table).where(t.id == existing["id"]))).mappings().one()
            )
            return BindResult(_connection(row), replaced_owner=None, already_bound=True)
        replaced = None
        if existing is not None:
            replaced = existing["owner"]
            await conn.execute(
                update(connections_table)
                .where(t.id == existing["id"])
                .values(status=REVOKED, revoked_at=now, updated_at=now)
            )
        new_id = uuid.uuid4().hex
        await conn.execute(
            connections_table.insert().values(
                id=new_id,
                owner=owner,
                provider=identity.provider,
                workspace=identity.workspace,
                external_id=identity.external_id,
                external_name=name,
                status=ACTIVE,
                created_at=now,
                updated_at=now,
            )
        )
        row = (await conn.execute(select(connections_table).where(t.id == new_id))).mappings().one()
        return BindResult(_connection(row), replaced_owner=replaced, already_bound=False)

    async def revoke(self, owner: str, connection_id: str) -> Connection | None:
        """Unbind ``owner``'s active connection; None when it is not theirs, unknown or already revoked."""
        t = connections_table.c
        async with self._exclusive("connection", connection_id) as conn:
            row = (
                (
                    await conn.execute(
                        select(connections_table).where(
                            t.id == connection_id, t.owner == owner, t.status == ACTIVE
                        )
                    )
                )
                .mappings()
                .first()
            )
            if row is None:
                return None
            now = self.clock()
            done = await conn.execute(
                update(connections_table)
                .where(t.id == connection_id, t.owner == owner, t.status == ACTIVE)
                .values(status=REVOKED, revoked_at=now, updated_at=now)
            )
            if done.rowcount != 1:
                return None
        revoked = _connection(row)
        self._changed(revoked.identity)
        log.info(
            "account unlinked: %s on %s (connection %s)",
            owner,
            revoked.provider,
            connection_id,
            extra={
                "fields": {
                    "event": "unlink",
                    "owner": owner,
                    "provider": revoked.provider,
                    "connection": connection_id,
                }
            },
        )
        return revoked

    # --- reads ------------------------------------------------------------------------------------
    async def list_connections(self, owner: str) -> list[Connection]:
        t = connections_table.c
        async with self.engine.connect() as conn:
            rows = (
                (
                    await conn.execute(
                        select(connections_table)
                        .where(t.owner == owner, t.status == ACTIVE)
                        .order_by(t.created_at, t.id)
                    )
                )
                .mappings()
                .all()
            )
        return [_connection(r) for r in rows]

    async def people(self, limit: int) -> list[Person]:
        """Signed-in people, most recently seen first, each with their active connections (the console)."""
        u, t = users_table.c, connections_table.c
        async with self.engine.connect() as conn:
            users = (
                (await conn.execute(select(users_table).order_by(u.last_seen_at.desc(), u.id).limit(limit)))
                .mappings()
                .all()
            )
            ids = [row["id"] for row in users]
            rows = (
                (
                    await conn.execute(
                        select(connections_table)
                        .where(t.owner.in_(ids), t.status == ACTIVE)
                        .order_by(t.created_at, t.id)
                    )
                )
                .mappings()
                .all()
                if ids
                else []
            )
        found: dict[str, list[Connection]] = {user_id: [] for user_id in ids}
        for row in rows:
            found[row["owner"]].append(_connection(row))
        return [Person(row["id"], row["last_seen_at"], found[row["id"]]) for row in users]

    async def active_connections(self, identity: PlatformIdentity) -> list[Connection]:
        """Every active row for ``identity`` (the invariant says at most one; tests check it)."""
        t = connections_table.c
        async with self.engine.connect() as conn:
            rows = (
                (
                    await conn.execute(
                        select(connections_table).where(
                            t.provider == identity.provider,
                            t.workspace == identity.workspace,
                            t.external_id == identity.external_id,
                            t.status == ACTIVE,
                        )
                    )
                )
                .mappings()
                .all()
            )
        return [_connection(r) for r in rows]

    async def owners_of(self, identities: list[PlatformIdentity]) -> dict[PlatformIdentity, str]:
        """The active owner of each of ``identities`` that has one, in one SELECT (a burst of new senders)."""
        keys = [(i.provider, i.workspace, i.external_id) for i in identities]
        async with self.engine.connect() as conn:
            rows = await conn.execute(*_OWNERS_OF(keys))
            return {PlatformIdentity(r.provider, r.workspace, r.external_id): r.owner for r in rows}

    async def owner_of(self, identity: PlatformIdentity) -> str | None:
        t = connections_table.c
        async with self.engine.connect() as conn:
            return await conn.scalar(
                select(t.owner)
                .where(
                    t.provider == identity.provider,
                    t.workspace == identity.workspace,
                    t.external_id == identity.external_id,
                    t.status == ACTIVE,
                )
                .limit(1)
            )
