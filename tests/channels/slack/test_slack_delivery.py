"""Slack's delivery guarantees: retried events run once, a full bus makes Slack redeliver, the socket
reconnects after a drop, and /health tells the truth about the connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bot.doctor import run_doctor
from tests.channels.slack.conftest import running_bot, slack_section
from tests.conftest import make_settings
from tests.fakes.openai_server import Reply


async def test_a_retried_event_with_the_same_event_id_is_answered_once(bot, llm):
    llm.script(Reply(text="answered once", chunk_size=3, delay=0.05))
    first = bot.slack.dm("U1", "do it once")
    # Slack retries while the first delivery is still being worked on, and again after it finished.
    during = bot.slack.send_event(first["event"], event_id=first["event_id"], retry_num=1)
    await bot.slack.wait_for_text("answered once", "DU1")
    await bot.harness.idle(timeout=30)
    after = bot.slack.send_event(first["event"], event_id=first["event_id"], retry_num=2)
    await bot.slack.wait_for(lambda: bot.slack.acked(after["envelope_id"]), what="ack of the late retry")
    await bot.harness.idle(timeout=30)

    assert all(bot.slack.acked(e["envelope_id"]) for e in (first, during, after))
    assert [m.text for m in bot.slack.channel_messages("DU1")] == ["answered once"]
    assert len(llm.completions) == 1


@pytest.mark.slow
async def test_when_the_bus_is_full_the_envelope_is_not_acked_so_slack_redelivers_it(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack, settings_overrides={"bus": {"queue_size": 1}}) as bot:
        llm.script(Reply(text="a slow answer " * 5, chunk_size=4, delay=0.05))
        bot.slack.dm("U1", "take your time")
        await bot.slack.wait_for(lambda: bot.slack.channel_messages("DU1"), what="the first reply to start")

        refused = bot.slack.dm("U2", "me too")
        await bot.slack.wait_for(lambda: bot.service.bus.refused >= 1, what="the bus to refuse")
        assert not bot.slack.acked(refused["envelope_id"])  # Slack will retry it

        # The fake redelivers after its ack timeout, as Slack does; a retry finds room and is acked.
        await bot.slack.wait_for_text("echo: me too", "DU2", timeout=30)
        deliveries = bot.slack.deliveries(refused["event_id"])
        assert deliveries[0]["envelope_id"] == refused["envelope_id"] and len(deliveries) >= 2
        assert bot.slack.acked(deliveries[-1]["envelope_id"])
        assert [d["retry_attempt"] for d in deliveries] == list(range(len(deliveries)))


@pytest.mark.slow
async def test_a_dropped_socket_reconnects_with_backoff_and_health_shows_the_state(bot, llm):
    health = await bot.service.health()
    assert health["channels"]["slack"]["state"] == "connected"

    bot.slack.fail_next("apps.connections.open", "internal_error")  # the first reconnect attempt fails
    assert bot.slack.drop_socket() == 1
    # First "the connection dropped", then the failed reconnect's reason: /health shows the latter.
    await bot.slack.wait_for(
        lambda: (
            bot.channel.status.state == "reconnecting"
            and "internal_error" in (bot.channel.status.detail or "")
        ),
        what="reconnecting after a failed attempt",
    )
    health = await bot.service.health()
    assert health["channels"]["slack"]["state"] == "reconnecting"
    assert "internal_error" in (health["channels"]["slack"]["detail"] or "")

    await bot.slack.wait_connected(count=2, timeout=20)
    await bot.slack.wait_for(lambda: bot.channel.status.state == "connected", what="connected again")
    assert (await bot.service.health())["channels"]["slack"]["state"] == "connected"

    bot.slack.dm("U1", "still there?")
    await bot.slack.wait_for_text("echo: still there?", "DU1")


async def test_a_rejected_token_shows_as_an_error_in_health_and_in_doctor(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack, wait=False, bot_token="xoxb-revoked") as bot:
        await bot.slack.wait_for(lambda: bot.channel.status.state == "error", what="status error")
        health = await bot.service.health()
        assert health["status"] == "degraded"
        assert "invalid_auth" in health["channels"]["slack"]["detail"]
        assert "xoxb-revoked" not in str(health)
        problem = await bot.channel.check()
        assert problem is not None and "invalid_auth" in problem


async def test_doctor_accepts_good_tokens_and_names_a_bot_token_in_the_app_token_slot(
    tmp_path, llm, slack, capsys
):
    good = make_settings(tmp_path, llm, channels={"slack": slack_section(slack)})
    assert await run_doctor(good) == 0
    assert "channel slack: credentials accepted" in capsys.readouterr().out

    swapped = make_settings(
        tmp_path, llm, channels={"slack": slack_section(slack, app_token=slack.bot_token)}
    )
    assert await run_doctor(swapped) == 1
    out = capsys.readouterr().out
    assert "Slack rejected app_token (invalid_auth)" in out and "xapp-" in out
    assert slack.bot_token not in out


async def test_slacks_routine_refresh_request_moves_the_bot_to_a_new_connection(bot, llm):
    bot.slack.request_refresh()
    await bot.slack.wait_connected(count=2)
    await bot.slack.wait_for(lambda: bot.channel.status.state == "connected", what="connected")
    bot.slack.dm("U1", "after the refresh")
    await bot.slack.wait_for_text("echo: after the refresh", "DU1")
    # The old connection is closed, not leaked.
    await bot.slack.wait_for(lambda: bot.slack.connected == 1, what="exactly one live connection")


async def test_a_reply_slack_refuses_with_not_in_channel_is_tried_once_and_the_turn_fails_saying_why(
    tmp_path, llm, slack
):
    """``not_in_channel`` is Slack's answer to every further try (chat.postMessage's documented errors),
    so the final reply is tried once and posted anew once, not three more times with back-off first.
    ``max_attempts: 1``: the bus's own retry of the message is another matter; one run shows the reply's."""
    llm.script(Reply(text="the one answer", chunk_size=1000))  # one update: at most one live post
    async with running_bot(tmp_path, llm, slack, settings_overrides={"bus": {"max_attempts": 1}}) as bot:
        slack.not_joined.add("C1")  # removed from the channel just after Slack sent the mention
        started = time.monotonic()
        slack.mention("C1", "U1", "anyone there")
        failed = await _failed_entry(bot)
        took = time.monotonic() - started
        await bot.harness.idle(timeout=30)
    posts = [c for c in slack.calls_to("chat.postMessage") if c.args.get("channel") == "C1"]
    answers = [c for c in posts if c.args.get("text") == "the one answer"]
    # The live reply may have tried to show the text once before the final; the final is one try and
    # one fresh post (before: three tries with 0.5 / 1 / 2 s back-off, then a fresh post — four).
    assert 2 <= len(answers) <= 3 and {c.error for c in posts} == {"not_in_channel"}
    assert failed.error == "reply delivery failed: chat.postMessage: not_in_channel"
    assert len(llm.completions) == 1
    assert took < 3  # ~0.4 s measured; ~4 s of back-off before


async def _failed_entry(bot: Any, timeout: float = 20.0) -> Any:
    """The one inbox entry that failed (or was dead-lettered), once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if failed := await bot.service.inbox.entries(failed_only=True):
            return failed[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no inbox entry failed")
