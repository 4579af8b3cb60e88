"""Store, then confirm: an envelope is acked only once the inbox holds its message, so whatever Slack
did not get an ack for comes back (the fake redelivers like Slack) and is answered exactly once."""

from __future__ import annotations

import pytest

from tests.channels.slack.conftest import running_bot
from tests.fakes.openai_server import Reply
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.slow  # waits for the fake's 3-second ack timeout


@pytest.fixture
def slack():  # type: ignore[no-untyped-def]
    # Slack's own 3 s ack timeout, but its later retries come quickly so a test does not wait minutes.
    with FakeSlack(retry_delays=(0.0, 0.5, 1.0)) as server:
        yield server


async def test_an_acked_envelope_is_not_redelivered(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack) as bot:
        sent = bot.slack.dm("U1", "once is enough")
        await bot.slack.wait_for_text("echo: once is enough", "DU1")
        await bot.harness.idle(timeout=30)
        assert bot.slack.acked(sent["envelope_id"])
        # Past the ack timeout: nothing was retried, because the first delivery was acked.
        await bot.slack.wait_for(lambda: not bot.slack.retrying, timeout=10, what="the retry watch to end")
        assert len(bot.slack.deliveries(sent["event_id"])) == 1
        assert len(llm.completions) == 1


async def test_an_unacked_envelope_is_redelivered_and_answered_exactly_once(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack, settings_overrides={"bus": {"queue_size": 1}}) as bot:
        llm.script(Reply(text="busy for a moment", chunk_size=2, delay=0.05))
        bot.slack.dm("U1", "keep the bus full")
        await bot.slack.wait_for(lambda: bot.slack.channel_messages("DU1"), what="the first turn to run")
        pushed = bot.slack.dm("U2", "do not lose me")
        await bot.slack.wait_for(lambda: bot.service.bus.refused >= 1, what="the bus to refuse")

        await bot.slack.wait_for_text("echo: do not lose me", "DU2", timeout=30)
        await bot.harness.idle(timeout=30)
        await bot.slack.wait_for(lambda: not bot.slack.retrying, timeout=15, what="retries to settle")

        deliveries = bot.slack.deliveries(pushed["event_id"])
        assert len(deliveries) >= 2, "the refused delivery must have been retried by Slack"
        assert not bot.slack.acked(deliveries[0]["envelope_id"])
        assert bot.slack.acked(deliveries[-1]["envelope_id"])
        assert [m.text for m in bot.slack.channel_messages("DU2")] == ["echo: do not lose me"]
        assert bot.slack.given_up == []


async def test_a_stop_while_the_bus_is_full_loses_nothing_and_the_restart_answers_once(tmp_path, llm, slack):
    overrides = {"bus": {"queue_size": 1}}
    async with running_bot(tmp_path, llm, slack, settings_overrides=overrides) as bot:
        llm.script(Reply(text="the first answer", chunk_size=2, delay=0.05))
        bot.slack.dm("U1", "first")
        await bot.slack.wait_for(lambda: bot.slack.channel_messages("DU1"), what="the first turn to run")
        pushed = bot.slack.dm("U2", "sent during the crunch")
        await bot.slack.wait_for(lambda: bot.service.bus.refused >= 1, what="the bus to refuse")
        assert not bot.slack.acked(pushed["envelope_id"])
    # The service is gone; Slack still holds the unacked event and retries once an app connects.
    assert bot.slack.channel_messages("DU2") == []

    async with running_bot(tmp_path, llm, slack, settings_overrides=overrides) as again:
        await again.slack.wait_for_text("echo: sent during the crunch", "DU2", timeout=30)
        await again.slack.wait_for_text("the first answer", "DU1", timeout=30)
        await again.harness.idle(timeout=30)
        await again.slack.wait_for(lambda: not again.slack.retrying, timeout=15, what="retries to settle")

    assert [m.text for m in slack.channel_messages("DU2")] == ["echo: sent during the crunch"]
    assert [m.text for m in slack.channel_messages("DU1") if "first answer" in m.text] == ["the first answer"]
    assert slack.given_up == []
