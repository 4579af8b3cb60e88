"""``/connect CODE`` from Slack reaches the command router before any gate and binds the account."""

from __future__ import annotations

import httpx

from bot.app import create_app
from tests.channels.slack.conftest import running_bot
from tests.connections.conftest import LOCAL_URL


async def issue_code(bot) -> str:  # type: ignore[no-untyped-def]
    """A code from the public REST API, as the /connect page would get it."""
    app = create_app(bot.harness.settings, service=bot.service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL_URL) as http:
        response = await http.post("/api/channels/slack/connect")
    assert response.status_code == 200, response.text
    return str(response.json()["code"])


async def test_connect_code_in_a_dm_binds_an_unbound_sender_who_is_then_answered(tmp_path, llm, slack):
    async with running_bot(
        tmp_path, llm, slack, settings_overrides={"connections": {"require_bound_identity": True}}
    ) as bot:
        bot.slack.dm("U1", "hello?")
        hint = await bot.slack.wait_for_text("/connect CODE", "DU1")
        assert "connect" in hint.text

        bot.slack.dm("U1", "/connect not-a-real-code")
        await bot.slack.wait_for_text("invalid or expired", "DU1")

        code = await issue_code(bot)
        bot.slack.dm("U1", f"/connect {code}")
        await bot.slack.wait_for_text("Connected", "DU1")

        bot.slack.dm("U1", "hello again")
        await bot.slack.wait_for_text("echo: hello again", "DU1")
        await bot.harness.idle(timeout=30)
    assert len(llm.completions) == 1  # only the message after connecting reached the model


async def test_connect_sent_as_a_slack_slash_command_is_routed_like_typed_text(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack, allowed_users=["USOMEONE_ELSE"]) as bot:
        code = await issue_code(bot)
        envelope = bot.slack.slash_command("/connect", code, user="U2", channel="DU2")
        await bot.slack.wait_for_text("Connected", "DU2")  # before the allow-list, as specified
        assert bot.slack.acked(envelope)


async def test_the_connect_page_instruction_works_as_written_in_slack(tmp_path, llm, slack):
    """The page tells Slack users to send ``/switchboard connect CODE``: that exact slash command binds."""
    async with running_bot(tmp_path, llm, slack, allowed_users=["USOMEONE_ELSE"]) as bot:
        app = create_app(bot.harness.settings, service=bot.service)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL_URL) as http:
            issued = (await http.post("/api/channels/slack/connect")).json()
        command, text = issued["instruction"].split("send ", 1)[1].split(" (", 1)[0].split(" ", 1)
        assert (command, text) == ("/switchboard", f"connect {issued['code']}")
        envelope = bot.slack.slash_command(command, text, user="U3", channel="DU3")
        await bot.slack.wait_for_text("Connected", "DU3")
        assert bot.slack.acked(envelope)
