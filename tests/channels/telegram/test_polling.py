"""The polling loop against Telegram's failures: a 429 on getUpdates, a failing server, then recovery."""

from __future__ import annotations

from tests.fakes.telegram import FakeTelegram


async def test_a_429_on_get_updates_waits_retry_after_before_polling_again(tg: FakeTelegram, tg_harness):
    await tg.wait_until(lambda: tg.calls("getUpdates"))
    tg.fail_next("getUpdates", status=429, retry_after=1)
    tg.user_message(42, "are you there?")

    await tg.wait_for_bot_text(42, "echo: are you there?")
    # Calls are recorded when answered (a long poll later than it arrived); order them by arrival.
    refused = await tg.wait_until(lambda: [c for c in tg.calls("getUpdates") if c["status"] == 429])
    later = await tg.wait_until(lambda: [c for c in tg.calls("getUpdates") if c["at"] > refused[0]["at"]])
    assert min(c["at"] for c in later) - refused[0]["at"] >= 0.95, "the next poll waited retry_after"


async def test_a_failing_bot_api_shows_reconnecting_and_polling_recovers_without_losing_a_message(
    tg: FakeTelegram, tg_harness
):
    channel = tg_harness.channels["telegram"]
    await tg.wait_until(lambda: tg.calls("getUpdates"))
    tg.fail_next("getUpdates", status=500, description="Internal Server Error", times=3)
    tg.user_message(42, "hello after the outage")

    await tg.wait_until(lambda: channel.status.state == "reconnecting")
    assert "getUpdates failed" in channel.status.detail
    await tg.wait_for_bot_text(42, "echo: hello after the outage")
    await tg.wait_until(lambda: channel.status.state == "connected")
    assert [c["status"] for c in tg.calls("getUpdates")].count(500) == 3
