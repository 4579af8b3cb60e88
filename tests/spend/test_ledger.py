"""Prices, the ledger and ``switchboard usage`` without a running service: exact sums, the budget's
indexed reads, and the operator's report from the database file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bot.cli import main as cli_main
from bot.db import Database
from bot.spend import tables
from bot.spend.budgets import BudgetGate
from bot.spend.ledger import SpendLedger
from bot.spend.prices import money, turn_cost_micros
from bot.spend.scope import SpendKey, agent_of, schedule_of
from channels.types import InboundMessage, Sender
from config.schema import BudgetsConfig, ModelPricing, Settings
from tests.conftest import fresh_pg_database

NOON = 1_796_904_000.0  # 2026-12-10 12:00 UTC
PRICING = ModelPricing(input=Decimal("0.15"), cached=Decimal("0.075"), output=Decimal("0.60"))


def test_a_turns_cost_charges_cached_prompt_tokens_at_their_own_price():
    # 4,000 fresh + 8,000 cached prompt tokens, 600 out: (600 + 600 + 360) millionths of a dollar.
    assert turn_cost_micros(PRICING, 12_000, 600, 8_000) == 1_560
    assert turn_cost_micros(None, 12_000, 600, 8_000) == 0
    assert money(1_560, "USD") == "$0.0016" and money(12_340_000, "EUR") == "12.34 EUR"


def test_a_million_tiny_turns_sum_exactly():
    one = turn_cost_micros(ModelPricing(input=Decimal("0.1")), 30, 0, 0)  # 3 micro-dollars
    assert one == 3 and sum([one] * 1_000_000) == 3_000_000  # float: 0.1 * 30 / 1e6 summed drifts


def test_two_currencies_are_refused_with_a_clear_error():
    with pytest.raises(ValidationError, match="one currency; found EUR, USD"):
        Settings(
            models=[
                {"name": "a", "pricing": {"input": 1, "currency": "USD"}},
                {"name": "b", "pricing": {"input": 1, "currency": "EUR"}},
            ]
        )


def test_the_agent_and_schedule_of_a_turn_come_from_its_message():
    chat = InboundMessage("telegram", "", "42", Sender("1", "A"), "hi", "m1")
    github = InboundMessage(
        "github", "", "o/r#1", Sender("1", "A"), "hi", "d1", context={"agent": "reviewer"}
    )
    scheduled = InboundMessage("telegram", "", "42", Sender("1", "A"), "hi", "schedule:ab12cd:1796212800")
    assert (agent_of(chat), agent_of(github)) == ("default", "reviewer")
    assert (schedule_of(chat), schedule_of(scheduled)) == ("", "ab12cd")


async def _ledger(tmp_path: Path, url: str | None = None) -> tuple[Database, SpendLedger]:
    db = Database(url or f"sqlite+aiosqlite:///{tmp_path / 'spend.db'}")
    async with db.engine.begin() as conn:
        await conn.run_sync(tables.metadata.create_all)
    return db, SpendLedger(db)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    async with fresh_pg_database() as url:
        yield url


async def test_budgets_count_today_and_this_month_and_a_raise_lifts_them_for_the_day(
    tmp_path: Path, database_url: str | None
):
    db, ledger = await _ledger(tmp_path, database_url)
    alice = SpendKey("alice", "telegram/-/42", "default")
    try:
        for when, cost in ((NOON - 86_400 * 3, 700_000), (NOON, 200_000), (NOON, 150_000)):
            await ledger.record(
                alice, "default", input_tokens=1, output_tokens=1, cached_tokens=0, cost_micros=cost, now=when
            )
        spent = await ledger.spent("owner", "alice", NOON)
        assert (spent.day, spent.month) == (350_000, 1_050_000)
        budgets = BudgetsConfig(per_owner={"day": Decimal("0.30"), "month": Decimal("1")})
        gate = BudgetGate(Settings(budgets=budgets), ledger)
        reached = await gate.reached(alice, NOON)
        assert [(r.period, r.limit, r.spent) for r in reached] == [
            ("day", 300_000, 350_000),
            ("month", 1_000_000, 1_050_000),
        ]
        assert [r.period for r in await gate.newly_warned(alice, NOON)] == ["day", "month"]
        assert await gate.newly_warned(alice, NOON) == [], "a warning is sent once"
        await gate.raise_for_today(reached, "alice", by="admin", now=NOON)
        assert await gate.reached(alice, NOON) == []
        assert len(await gate.reached(alice, NOON + 86_400)) == 1, (
            "the raise lasts one day (the month is still over)"
        )
        bob = SpendKey("bob", "telegram/-/42", "default")
        assert await gate.reached(bob, NOON) == []
    finally:
        await db.close()


async def test_switchboard_usage_reports_from_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    db, ledger = await _ledger(tmp_path)
    try:
        for owner, chat, cost in (
            ("alice", "slack/T1/C1", 4_000),
            ("bob", "slack/T1/C1", 9_000),
            ("alice", "slack/T1/C2", 1_000),
        ):
            await ledger.record(
                SpendKey(owner, chat, "default"),
                "default",
                input_tokens=1000,
                output_tokens=200,
                cached_tokens=0,
                cost_micros=cost,
                now=NOON,
            )
    finally:
        await db.close()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'spend.db'}"},
                "data_dir": str(tmp_path / "data"),
            }
        )
    )
    args = ["usage", "--config", str(config), "--since", "2026-12-10", "--until", "2026-12-10"]
    assert await asyncio.to_thread(cli_main, args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["bob", "$0.0090"] and out[1].split()[:2] == ["alice", "$0.0050"]
    assert await asyncio.to_thread(cli_main, [*args, "--by", "chat", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["chat"], r["cost"], r["turns"]) for r in report["rows"]] == [
        ("slack/T1/C1", "0.013", 2),
        ("slack/T1/C2", "0.001", 1),
    ]
    assert await asyncio.to_thread(cli_main, ["usage", "--config", str(config), "--since", "yesterday"]) == 2
    assert "'yesterday' is not a day (YYYY-MM-DD)" in capsys.readouterr().err
