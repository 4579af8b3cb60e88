"""The spend tables: cost per day and who/where it was spent, and the budget marks (warned, raised).

``spend_daily`` has one row per UTC day, owner, chat, agent, schedule and model; a turn adds to its row.
Every budget check is one indexed read of it (an index per scope, day second, so a month is a range).
``budget_marks`` records, per period and budget scope, that the 80 % warning was sent (once, across a
cluster: the primary key makes the second insert fail) and that an admin raised the day's limit.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, Integer, MetaData, String, Table

metadata = MetaData()

spend_daily = Table(
    "spend_daily",
    metadata,
    Column("day", String(10), primary_key=True),  # UTC, YYYY-MM-DD
    Column("owner", String(200), primary_key=True),
    Column("chat", String(400), primary_key=True),  # provider/workspace/chat
    Column("agent", String(100), primary_key=True),
    Column("schedule", String(64), primary_key=True),  # "" for a turn no schedule started
    Column("model", String(100), primary_key=True),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("cached_tokens", BigInteger, nullable=False, default=0),
    Column("cost_micros", BigInteger, nullable=False, default=0),
    Column("turns", Integer, nullable=False, default=0),
    Index("ix_spend_daily_owner_day", "owner", "day"),
    Index("ix_spend_daily_chat_day", "chat", "day"),
    Index("ix_spend_daily_agent_day", "agent", "day"),
    Index("ix_spend_daily_schedule_day", "schedule", "day"),
)

budget_marks = Table(
    "budget_marks",
    metadata,
    Column("period", String(10), primary_key=True),  # the day (YYYY-MM-DD) or month (YYYY-MM)
    Column("scope", String(16), primary_key=True),  # owner | chat | agent | schedule
    Column("key", String(400), primary_key=True),
    Column("kind", String(16), primary_key=True),  # warned | raised
    # The person whose turn led to the mark (for an owner budget, the key itself): their data.
    Column("owner", String(200), nullable=False),
    Column("by", String(200)),  # who raised it (provider:sender id)
    Column("at", Float, nullable=False),
)
