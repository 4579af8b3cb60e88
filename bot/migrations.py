"""Additive schema upgrades, applied in order at start-up after ``create_all``.

``create_all`` creates missing tables but never alters existing ones. When a release changes an existing
table, append a step here: each runs once, recorded in ``schema_version``. Steps must be idempotent and
additive (add a column, add an index) so an older instance sharing the database keeps working during a
rolling upgrade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy import Column, Integer, MetaData, String, Table, inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

metadata = MetaData()
schema_version = Table(
    "schema_version",
    metadata,
    Column("step", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
)

Step = Callable[[AsyncConnection], Awaitable[None]]


async def _discord_cursors(conn: AsyncConnection) -> None:
    """The Discord channel's backfill cursors (it owns the table; the channel also creates it itself)."""
    # SQLAlchemy only: no discord.py import for other platforms
    from channels.discord import backfill as discord_backfill

    await conn.run_sync(discord_backfill.metadata.create_all)


def _columns(sync: Connection, table: str) -> set[str]:
    """The columns ``table`` has now (empty when there is no such table)."""
    inspector = inspect(sync)
    return {c["name"] for c in inspector.get_columns(table)} if inspector.has_table(table) else set()


async def _approval_notice_ref(conn: AsyncConnection) -> None:
    """Where an approval request was posted, so its outcome edits it (and its buttons go away)."""
    from bot import approvals

    await conn.run_sync(approvals.metadata.create_all)  # a database older than approvals has no table
    columns = await conn.run_sync(lambda sync: _columns(sync, "approvals"))
    if "notice_ref" not in columns:
        await conn.execute(text("ALTER TABLE approvals ADD COLUMN notice_ref TEXT"))


async def _conversation_approval(conn: AsyncConnection) -> None:
    """A chat's own ``sandbox.approval`` mode, set by an admin with ``/approval``."""
    columns = await conn.run_sync(lambda sync: _columns(sync, "conversations"))
    if columns and "approval" not in columns:  # no table: whoever creates it creates the column too
        await conn.execute(text("ALTER TABLE conversations ADD COLUMN approval VARCHAR(16)"))


async def _delivery_identity(conn: AsyncConnection) -> None:
    """The event a GitHub delivery carried, unique: a signed body replayed under a new delivery id is a
    duplicate (webhooks/store.py). Both statements are the same on SQLite and PostgreSQL."""
    from webhooks import store

    await conn.run_sync(store.metadata.create_all)  # a database older than the delivery log has no table
    columns = await conn.run_sync(lambda sync: _columns(sync, "github_deliveries"))
    if "identity" not in columns:
        await conn.execute(text("ALTER TABLE github_deliveries ADD COLUMN identity VARCHAR(300)"))
    await conn.execute(
        text(
            "CREATE UNIQUE INDEX IF NOT EXISTS ix_github_deliveries_identity ON github_deliveries (identity)"
        )
    )


async def _trust(conn: AsyncConnection) -> None:
    """Trust levels (docs/security.md): the pairing tables, and the level a schedule's creator had."""
    from bot import pairing

    await conn.run_sync(pairing.metadata.create_all)
    columns = await conn.run_sync(lambda sync: _columns(sync, "schedules"))
    if columns and "trust" not in columns:  # no table: whoever creates it creates the column too
        await conn.execute(text("ALTER TABLE schedules ADD COLUMN trust VARCHAR(16)"))


async def _inbox_reply_state(conn: AsyncConnection) -> None:
    """Every message of a reply (not only its first), so a resumed reply continues in place."""
    columns = await conn.run_sync(lambda sync: _columns(sync, "inbox"))
    if columns and "reply_state" not in columns:  # no table: whoever creates it creates the column too
        await conn.execute(text("ALTER TABLE inbox ADD COLUMN reply_state TEXT"))


async def _spend(conn: AsyncConnection) -> None:
    """Cost per day, owner, chat, agent, schedule and model, and the budget marks (bot/spend/)."""
    from bot.spend import tables as spend_tables

    await conn.run_sync(spend_tables.metadata.create_all)


async def _subagent_tasks(conn: AsyncConnection) -> None:
    """Subagent tasks and their steps (docs/subagents.md), for a database older than them."""
    from agent import tables as agent_tables

    tables = [agent_tables.subagent_tasks, agent_tables.subagent_steps]
    await conn.run_sync(lambda sync: agent_tables.metadata.create_all(sync, tables=tables))


async def _task_cards(conn: AsyncConnection) -> None:
    """Task cards (docs/tasks.md): one durable card per background job."""
    from bot.tasks import store

    await conn.run_sync(store.metadata.create_all)


#: (number, name, function). Numbers only ever grow; never edit a released step.
STEPS: list[tuple[int, str, Step]] = [
    (1, "discord_cursors: where Discord backfill resumes after a restart", _discord_cursors),
    (2, "approvals.notice_ref: the request's message, edited with the outcome", _approval_notice_ref),
    (3, "conversations.approval: a chat's own sandbox.approval, set by an admin", _conversation_approval),
    (4, "github_deliveries.identity: a replayed GitHub delivery is a duplicate", _delivery_identity),
    (5, "trust: pairing tables and schedules.trust (the creator's level)", _trust),
    (6, "inbox.reply_state: every message and live card of a reply, for resuming it", _inbox_reply_state),
    (7, "spend_daily, budget_marks: cost per turn and budgets", _spend),
    (8, "agent_tasks, agent_task_steps: subagent tasks and their stored steps", _subagent_tasks),
    (9, "task_cards: one durable card per background job (issue 36)", _task_cards),
]


async def upgrade(conn: AsyncConnection) -> None:
    await conn.run_sync(metadata.create_all)
    done = set((await conn.execute(select(schema_version.c.step))).scalars())
    for number, name, step in STEPS:
        if number in done:
            continue
        await step(conn)
        await conn.execute(schema_version.insert().values(step=number, name=name))
