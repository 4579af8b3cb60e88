"""The delivery log on PostgreSQL (several instances share it): dedupe under a race, failure and retry.

Runs when SWITCHBOARD_TEST_PG_URL points at a scratch database (CI sets it). The database is shared
between runs, so every id and issue number here is fresh.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid

import pytest
import yaml

from bot.cli import main as cli_main
from tests.github.conftest import BOT, REPO, comment_payload, github_settings, running_service

PG_URL = os.environ.get("SWITCHBOARD_TEST_PG_URL")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="set SWITCHBOARD_TEST_PG_URL=postgresql+asyncpg://… to run"),
]


async def test_on_postgres_racing_duplicates_run_once_and_a_failed_delivery_can_be_retried(
    tmp_path, llm, github, capsys, pg_url
):
    # A database of its own: every instance on a PostgreSQL database shares its work (cluster claims).
    settings = github_settings(tmp_path, llm, github, bus={"queue_size": 1}, database={"url": pg_url})
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"database": {"url": pg_url}, "data_dir": settings.data_dir}))
    first_issue, second_issue = random.sample(range(100_000, 10_000_000), 2)
    raced, failing = f"pg-race-{uuid.uuid4()}", f"pg-fail-{uuid.uuid4()}"

    github.pause("create_comment")
    async with running_service(settings) as sb:
        data = comment_payload(f"@{BOT} race on postgres", number=first_issue)
        responses = await asyncio.gather(
            *(sb.deliver("issue_comment", data, delivery=raced) for _ in range(4))
        )
        assert sorted(r.json()["duplicate"] for r in responses) == [False, True, True, True]
        failed = await sb.deliver(
            "issue_comment", comment_payload(f"@{BOT} second", number=second_issue), delivery=failing
        )
        assert failed.status_code == 503
        github.resume("create_comment")
        await sb.idle()
        capsys.readouterr()
        assert await asyncio.to_thread(cli_main, ["webhooks", "retry", failing, "--config", str(config)]) == 0
        assert "retried: reviewer" in capsys.readouterr().out
        await sb.idle()
    assert len(github.comments_on(REPO, first_issue)) == 1
    assert len(github.comments_on(REPO, second_issue)) == 1


async def test_on_postgres_an_upgraded_log_refuses_a_replay_racing_its_original(
    tmp_path, llm, github, pg_url
):
    """The previous release's table gains the identity (migration step 4); then one event under four
    delivery ids at once (claims a batch may put in one multi-row INSERT … ON CONFLICT DO NOTHING) runs once."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(pg_url)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE github_deliveries (delivery_id VARCHAR(100) PRIMARY KEY, event VARCHAR(64) NOT NULL,"
                " action VARCHAR(64), body TEXT NOT NULL, status VARCHAR(16) NOT NULL, attempts INTEGER NOT NULL,"
                " dispatch TEXT, error TEXT, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL)"
            )
        )
    settings = github_settings(tmp_path, llm, github, database={"url": pg_url})
    number = random.randrange(100_000, 10_000_000)
    data = comment_payload(f"@{BOT} replay me on postgres", number=number)
    async with running_service(settings) as sb:
        answers = await asyncio.gather(
            *(sb.deliver("issue_comment", data, delivery=f"pg-replay-{uuid.uuid4()}") for _ in range(4))
        )
        await sb.idle()
    async with engine.connect() as conn:
        unique = await conn.scalar(
            text(
                "SELECT indisunique FROM pg_index WHERE indexrelid = 'ix_github_deliveries_identity'::regclass"
            )
        )
    await engine.dispose()
    assert [a.status_code for a in answers] == [200] * 4
    assert sorted(a.json()["duplicate"] for a in answers) == [False, True, True, True]
    assert len(github.comments_on(REPO, number)) == 1
    assert unique is True
