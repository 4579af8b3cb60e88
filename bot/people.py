"""One person's data, all of it: export it as JSON, or delete every trace of it (``switchboard users``).

Why one module knows every table: a person's data is spread over the stores of four packages
(connections, threads, the agent's memory and goals, approvals, schedules, the inbox, pairing, the
agent's checkpoints and the files under ``data_dir/users/``), and "delete this person" is only true if
*none* is forgotten. :data:`PERSONAL_TABLES` names, for every table the service creates, how a person's
rows are found in it — or why it holds none; ``tests/operations/test_people.py`` fails when a new table
is added without that decision.

A person is an *owner*: a signed-in user (``alice``) or an account nobody connected yet
(``telegram:-:4242``, see ``connections.identity``). Their platform accounts (connections, or the
unbound owner's own) find what is keyed by sender rather than owner: the messages they sent in group
chats, pairing, approval requests.

Threads are shared in groups: a group conversation's agent thread holds everyone's messages, and the
person's part cannot be cut out of it. Deleting a person therefore *resets* every thread they took part
in (its history, usage, goals and approvals go; a group conversation that outlives them moves to a fresh
thread, as ``/new`` does), while the others' own rows, messages and files stay. Run it while the service
is stopped, or accept that a running instance keeps the old conversation in its short cache until it
expires (docs/data.md).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Table, delete, false, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from agent import tables as agent_tables
from agent.paths import safe_component
from bot.approvals import approvals_table
from bot.db import Database
from bot.inbox import inbox_table
from bot.pairing import paired_senders_table, pairing_requests_table
from bot.schedules import schedules_table
from bot.spend.tables import budget_marks, spend_daily
from bot.tasks.store import task_cards_table
from bot.threads import conversations_table
from connections.tables import connect_codes_table, connections_table, users_table

#: Tables with an ``owner`` column: the person's rows are exactly those.
OWNED: tuple[Table, ...] = (
    connect_codes_table,
    connections_table,
    conversations_table,
    schedules_table,
    task_cards_table,
    agent_tables.memory_facts,
    agent_tables.memory_profiles,
    agent_tables.memory_cursors,
    agent_tables.memory_pending,
    agent_tables.goals,
    agent_tables.goal_continuations,
    spend_daily,  # what their turns cost, per day, chat, agent and model
    budget_marks,  # budget warnings sent to them and raises their turns asked for
)
#: Tables keyed by an agent thread: a thread the person took part in is reset, so all its rows go.
BY_THREAD: tuple[Table, ...] = (
    agent_tables.thread_usage,
    approvals_table,
    task_cards_table,
    agent_tables.memory_cursors,
    agent_tables.memory_pending,
    agent_tables.goals,
    agent_tables.goal_continuations,
    agent_tables.subagent_tasks,
    agent_tables.subagent_steps,
)
#: Tables keyed by a platform account (provider, sender id).
BY_ACCOUNT: tuple[Table, ...] = (paired_senders_table, pairing_requests_table)
#: Tables that hold nobody's personal data, and why (every other table must be in a list above).
IMPERSONAL: dict[str, str] = {
    "cluster_claims": "which instance runs which inbox row",
    "cluster_instances": "the running instances",
    "cluster_leases": "which instance polls which platform",
    "schema_version": "migration steps",
    "discord_cursors": "the last Discord message id seen per channel",
    "agent_choices": "which named agent a thread or a switched chat uses (agent names only)",
    "github_deliveries": "GitHub webhook deliveries (repository events, kept for retries; pruned by retention)",
}
#: How each table that holds personal data is searched (the test compares this with the metadata).
PERSONAL_TABLES: frozenset[str] = frozenset(
    t.name for t in (*OWNED, *BY_THREAD, *BY_ACCOUNT, users_table, inbox_table)
)


@dataclass(frozen=True, slots=True)
class Account:
    provider: str
    workspace: str
    external_id: str


@dataclass
class Person:
    """Everything that identifies a person's rows: the owner id, their threads and their accounts."""

    owner: str
    accounts: list[Account] = field(default_factory=list)
    thread_ids: set[str] = field(default_factory=set)
    #: Chats of the conversations they own, (provider, workspace, chat): their direct messages are there.
    owned_chats: set[tuple[str, str, str]] = field(default_factory=set)


def unbound_account(owner: str) -> Account | None:
    """``telegram:-:4242`` → the account it stands for (the same rule as ``connections.identity``)."""
    parts = owner.split(":", 2)
    if len(parts) != 3 or not all(parts):
        return None
    provider, workspace, external_id = parts
    return Account(provider, "" if workspace == "-" else workspace, external_id)


class PeopleData:
    """Export or delete one person's data across the database, the agent's checkpoints and files."""

    def __init__(self, db: Database, data_dir: Path) -> None:
        self.db = db
        self.data_dir = data_dir

    def files_dir(self, owner: str) -> Path:
        return self.data_dir / "users" / safe_component(owner)

    def web_chat_dir(self, owner: str) -> Path:
        """The web chat's transcripts, uploads and received files (channels/web/store.py): named by the
        signed-in user id itself, which never holds a separator (an unbound owner has no such folder)."""
        if Path(owner).name != owner or owner.startswith("."):
            return self.data_dir / "web-chat" / ".none"
        return self.data_dir / "web-chat" / owner

    async def find(self, owner: str) -> Person:
        person = Person(owner)
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(
                    connections_table.c.provider,
                    connections_table.c.workspace,
                    connections_table.c.external_id,
                ).where(connections_table.c.owner == owner)
            )
            person.accounts = [Account(*row) for row in rows]
            own = unbound_account(owner)
            if own is not None:
                person.accounts.append(own)
            c = conversations_table.c
            for row in await conn.execute(
                select(c.thread_id, c.provider, c.workspace, c.chat).where(c.owner == owner)
            ):
                person.thread_ids.add(row.thread_id)
                person.owned_chats.add((row.provider, row.workspace, row.chat))
            for table in (agent_tables.goals, agent_tables.memory_cursors, agent_tables.goal_continuations):
                found = await conn.execute(select(table.c.thread_id).where(table.c.owner == owner))
                person.thread_ids.update(r[0] for r in found)
        # Threads left behind by /new are known only by their folders.
        person.thread_ids.update(await asyncio.to_thread(_thread_folders, self.files_dir(owner)))
        return person

    # --- export --------------------------------------------------------------------------------------
    async def export(self, owner: str) -> dict[str, Any]:
        """JSON-ready: the person's rows from every table (no other person's), and their files' list."""
        person = await self.find(owner)
        out: dict[str, Any] = {"owner": owner, "exported_at": time.time(), "tables": {}}
        async with self.db.engine.connect() as conn:
            for table in (users_table, *OWNED):
                where = table.c.id == owner if table is users_table else table.c.owner == owner
                out["tables"][table.name] = await _rows(conn, table, where)
            out["tables"][agent_tables.thread_usage.name] = await _rows(
                conn, agent_tables.thread_usage, agent_tables.thread_usage.c.thread_id.in_(person.thread_ids)
            )
            requesters = [f"{a.provider}:{a.external_id}" for a in person.accounts]
            out["tables"][approvals_table.name] = await _rows(
                conn, approvals_table, approvals_table.c.requester.in_(requesters)
            )
            for table in BY_ACCOUNT:
                out["tables"][table.name] = await _rows(conn, table, _account_clause(table, person.accounts))
            out["tables"]["inbox"] = [_decoded(row) for row in await self._inbox_rows(conn, person)]
        out["tables"] = {name: rows for name, rows in out["tables"].items() if rows}
        out["accounts"] = [_account_json(a) for a in person.accounts]
        out["threads"] = sorted(person.thread_ids)
        out["files"] = await asyncio.to_thread(_file_list, self.files_dir(owner))
        out["web_chat_files"] = await asyncio.to_thread(_file_list, self.web_chat_dir(owner))
        return out

    async def _inbox_rows(self, conn: AsyncConnection, person: Person) -> list[dict[str, Any]]:
        """The messages they sent anywhere, and every message of their direct-message chats (scheduled
        runs, button presses) — never another person's message in a group."""
        found: dict[str, dict[str, Any]] = {}
        t = inbox_table.c
        senders = {(a.provider, a.external_id) for a in person.accounts}
        candidates: list[ColumnElement[bool]] = []
        if person.owned_chats:
            candidates.append(tuple_(t.provider, t.workspace, t.chat).in_(sorted(person.owned_chats)))
        for account in person.accounts:  # a cheap pre-filter on the JSON text, confirmed below
            candidates.append(
                (t.provider == account.provider) & t.payload.contains(json.dumps(account.external_id))
            )
        for where in candidates:
            for row in (await conn.execute(select(inbox_table).where(where))).mappings():
                payload = json.loads(row["payload"])
                sender = (row["provider"], str(payload.get("sender", {}).get("id")))
                private_here = payload.get("is_private") and (
                    row["provider"],
                    row["workspace"],
                    row["chat"],
                ) in (person.owned_chats)
                if sender in senders or private_here:
                    found[row["id"]] = dict(row)
        return list(found.values())

    # --- delete --------------------------------------------------------------------------------------
    async def delete(self, owner: str) -> dict[str, int]:
        """Delete everything of ``owner``; returns rows deleted per table (and ``files``).

        Checkpoints (the agent's conversation history) are not in this list: the caller deletes the
        person's threads from the checkpointer with the thread ids :meth:`find` returns, first."""
        person = await self.find(owner)
        counts: dict[str, int] = {}
        async with self.db.engine.begin() as conn:
            inbox_ids = [row["id"] for row in await self._inbox_rows(conn, person)]
            if inbox_ids:
                result = await conn.execute(delete(inbox_table).where(inbox_table.c.id.in_(inbox_ids)))
                counts["inbox"] = result.rowcount
            for table in BY_THREAD:
                if person.thread_ids:
                    result = await conn.execute(delete(table).where(table.c.thread_id.in_(person.thread_ids)))
                    counts[table.name] = result.rowcount
            for table in BY_ACCOUNT:
                result = await conn.execute(delete(table).where(_account_clause(table, person.accounts)))
                counts[table.name] = result.rowcount
            if person.accounts:  # approval requests name the requester as provider:sender
                who = [f"{a.provider}:{a.external_id}" for a in person.accounts]
                result = await conn.execute(
                    delete(approvals_table).where(approvals_table.c.requester.in_(who))
                )
                counts[approvals_table.name] = counts.get(approvals_table.name, 0) + result.rowcount
            for table in OWNED:
                result = await conn.execute(delete(table).where(table.c.owner == owner))
                counts[table.name] = counts.get(table.name, 0) + result.rowcount
            # A group conversation that outlives them continues on a fresh thread (what /new does).
            c = conversations_table.c
            shared = await conn.execute(
                select(c.provider, c.workspace, c.chat, c.topic).where(c.thread_id.in_(person.thread_ids))
            )
            for row in shared.all():
                await conn.execute(
                    update(conversations_table)
                    .where(
                        c.provider == row.provider,
                        c.workspace == row.workspace,
                        c.chat == row.chat,
                        c.topic == row.topic,
                    )
                    .values(thread_id=uuid.uuid4().hex, updated_at=time.time())
                )
                counts["conversations moved to a new thread"] = (
                    counts.get("conversations moved to a new thread", 0) + 1
                )
            result = await conn.execute(delete(users_table).where(users_table.c.id == owner))
            counts[users_table.name] = result.rowcount
        counts["files"] = await asyncio.to_thread(_remove_files, self.files_dir(owner))
        counts["web_chat_files"] = await asyncio.to_thread(_remove_files, self.web_chat_dir(owner))
        return {name: n for name, n in counts.items() if n}


async def _rows(conn: AsyncConnection, table: Table, where: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in (await conn.execute(select(table).where(where))).mappings()]


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["payload"] = json.loads(out["payload"])
    return out


def _account_json(account: Account) -> dict[str, str]:
    return {"provider": account.provider, "workspace": account.workspace, "external_id": account.external_id}


def _account_clause(table: Table, accounts: Iterable[Account]) -> Any:
    pairs = sorted({(a.provider, a.external_id) for a in accounts})
    if not pairs:
        return false()
    return tuple_(table.c.provider, table.c.sender_id).in_(pairs)


def _thread_folders(root: Path) -> list[str]:
    threads = root / "threads"
    return [p.name for p in threads.iterdir() if p.is_dir()] if threads.is_dir() else []


def _remove_files(root: Path) -> int:
    count = len(_file_list(root))
    if root.exists():
        shutil.rmtree(root)
    return count


def _file_list(root: Path) -> list[dict[str, Any]]:
    if not root.is_dir():
        return []
    return [
        {"path": str(path.relative_to(root)), "bytes": path.stat().st_size}
        for path in sorted(root.rglob("*"))
        if path.is_file()
    ]
