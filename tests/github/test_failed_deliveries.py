"""SCENARIO 43: a fan-out failure answers 5xx, the delivery is kept, and an operator can retry it."""

from __future__ import annotations

import asyncio

import yaml

from bot.cli import main as cli_main
from tests.github.conftest import BOT, REPO, comment_payload, github_settings, running_service


def write_cli_config(tmp_path, settings) -> str:
    """The CLI reads the same database as the running service."""
    path = tmp_path / "cli-config.yaml"
    path.write_text(
        yaml.safe_dump({"database": {"url": settings.database.url}, "data_dir": settings.data_dir})
    )
    return str(path)


async def run_cli(*argv: str) -> int:
    return await asyncio.to_thread(cli_main, list(argv))


async def test_a_full_bus_answers_503_keeps_the_delivery_and_a_retry_runs_it(tmp_path, llm, github, capsys):
    settings = github_settings(tmp_path, llm, github, bus={"queue_size": 1})
    config = write_cli_config(tmp_path, settings)
    github.pause("create_comment")  # the first turn holds the only slot while its comment is pending
    async with running_service(settings) as sb:
        first = await sb.deliver("issue_comment", comment_payload(f"@{BOT} first", number=1))
        failed = await sb.deliver(
            "issue_comment", comment_payload(f"@{BOT} second", number=2), delivery="fail-1"
        )
        assert first.json()["dispatch"]["fired"] == ["reviewer"]
        assert failed.status_code == 503
        assert failed.headers["retry-after"]
        assert failed.json()["ok"] is False and failed.json()["delivery"] == "fail-1"

        capsys.readouterr()
        assert await run_cli("webhooks", "list", "--failed", "--config", config) == 0
        listing = capsys.readouterr().out
        assert "fail-1" in listing and "issue_comment.created" in listing and "Backpressure" in listing

        github.resume("create_comment")
        await sb.idle()
        assert await run_cli("webhooks", "retry", "fail-1", "--config", config) == 0
        assert "retried: reviewer" in capsys.readouterr().out
        await sb.idle()
        [answer] = github.comments_on(REPO, 2)
        await github.wait_for(lambda: answer.body.startswith("echo:"))

        # Done now: nothing left to retry, and a second retry is refused.
        assert await run_cli("webhooks", "list", "--failed", "--config", config) == 0
        assert "no failed deliveries" in capsys.readouterr().out
        assert await run_cli("webhooks", "retry", "fail-1", "--config", config) == 1
        assert "only failed or stuck deliveries" in capsys.readouterr().out
    assert len(github.comments_on(REPO, 1)) == 1


async def test_githubs_own_redelivery_of_a_failed_delivery_runs_it_once(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, bus={"queue_size": 1})
    github.pause("create_comment")
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} first", number=1))
        data = comment_payload(f"@{BOT} second", number=2)
        failed = await sb.deliver("issue_comment", data, delivery="redeliver-1")
        github.resume("create_comment")
        await sb.idle()
        again = await sb.deliver("issue_comment", data, delivery="redeliver-1")
        await sb.idle()
        once_more = await sb.deliver("issue_comment", data, delivery="redeliver-1")
    assert failed.status_code == 503
    assert again.status_code == 200 and again.json()["duplicate"] is False
    assert again.json()["dispatch"]["fired"] == ["reviewer"]
    assert once_more.json()["duplicate"] is True
    assert len(github.comments_on(REPO, 2)) == 1


async def test_retrying_an_unknown_delivery_says_so(tmp_path, llm, github, capsys):
    settings = github_settings(tmp_path, llm, github)
    config = write_cli_config(tmp_path, settings)
    async with running_service(settings):
        assert await run_cli("webhooks", "retry", "no-such-delivery", "--config", config) == 1
    assert "unknown delivery no-such-delivery" in capsys.readouterr().out
