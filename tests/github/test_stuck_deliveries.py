"""A delivery left in ``received`` (its process died mid fan-out) is *stuck* only after five minutes.

Before that it may still be running somewhere — on another instance, or this one under load — so GitHub's
redelivery of it is a duplicate and an operator cannot queue it (a second run would answer twice). After
five minutes nothing is running it any more: a redelivery runs its fan-out again, and ``webhooks retry``
may queue it — and since the fan-out is idempotent (the inbox knows the turn), nothing is answered twice.
The row is put back to ``received`` through the database, as a process that died between storing the
delivery and finishing it would have left it.
"""

from __future__ import annotations

import time

from sqlalchemy import select, update

from tests.github.conftest import BOT, REPO, comment_payload, github_settings, running_service
from tests.github.test_failed_deliveries import run_cli, write_cli_config
from webhooks.store import STUCK_AFTER_SECONDS, deliveries_table


async def _left_received(sb, delivery_id: str, seconds_ago: float) -> None:  # type: ignore[no-untyped-def]
    async with sb.service.db.engine.begin() as conn:
        await conn.execute(
            update(deliveries_table)
            .where(deliveries_table.c.delivery_id == delivery_id)
            .values(status="received", dispatch=None, updated_at=time.time() - seconds_ago)
        )


async def test_a_redelivery_while_a_delivery_may_still_run_is_a_duplicate_and_after_five_minutes_runs(
    tmp_path, llm, github
):
    settings = github_settings(tmp_path, llm, github)
    data = comment_payload(f"@{BOT} look at this", number=7)
    async with running_service(settings) as sb:
        first = await sb.deliver("issue_comment", data, delivery="stuck-1")
        await sb.idle()
        assert first.json()["dispatch"]["fired"] == ["reviewer"]
        assert len(github.comments_on(REPO, 7)) == 1

        await _left_received(sb, "stuck-1", seconds_ago=10)  # a run that may still be going
        during = await sb.deliver("issue_comment", data, delivery="stuck-1")
        await sb.idle()
        assert during.json()["duplicate"] is True
        assert len(github.comments_on(REPO, 7)) == 1, "nothing ran twice"

        await _left_received(sb, "stuck-1", seconds_ago=STUCK_AFTER_SECONDS + 1)  # nobody runs it now
        after = await sb.deliver("issue_comment", data, delivery="stuck-1")
        await sb.idle()
        assert after.json()["duplicate"] is False, "a stuck delivery is run again"
        async with sb.service.db.engine.connect() as conn:
            status = (
                await conn.execute(
                    select(deliveries_table.c.status).where(deliveries_table.c.delivery_id == "stuck-1")
                )
            ).scalar_one()
        assert status == "done", "and this time it finished"
    assert len(github.comments_on(REPO, 7)) == 1, "the turn it had started is not answered twice"


async def test_an_operator_may_retry_a_delivery_only_once_it_is_stuck(tmp_path, llm, github, capsys):
    settings = github_settings(tmp_path, llm, github)
    config = write_cli_config(tmp_path, settings)
    data = comment_payload(f"@{BOT} please", number=8)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", data, delivery="stuck-2")
        await sb.idle()

        await _left_received(sb, "stuck-2", seconds_ago=STUCK_AFTER_SECONDS - 30)
        capsys.readouterr()
        assert await run_cli("webhooks", "list", "--failed", "--config", config) == 0
        assert "stuck-2" not in capsys.readouterr().out
        assert await run_cli("webhooks", "retry", "stuck-2", "--config", config) == 1
        assert "only failed or stuck deliveries" in capsys.readouterr().out

        await _left_received(sb, "stuck-2", seconds_ago=STUCK_AFTER_SECONDS + 30)
        assert await run_cli("webhooks", "list", "--failed", "--config", config) == 0
        assert "stuck-2" in capsys.readouterr().out
        assert await run_cli("webhooks", "retry", "stuck-2", "--config", config) == 0
        assert "queued stuck-2" in capsys.readouterr().out
        await sb.idle()
    assert len(github.comments_on(REPO, 8)) == 1
