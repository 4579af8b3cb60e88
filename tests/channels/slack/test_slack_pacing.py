"""chat.update is limited per workspace, not per channel: concurrent answers share one budget.

Slack's Tier 3 (chat.update) is "50+ per minute", counted per method per workspace per app. The fake
enforces 50 in any trailing 60 s and answers more with HTTP 429 + ``Retry-After``, as Slack does.
"""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import Reply


def answer(n: int) -> str:
    return " ".join(f"a{n}w{i}" for i in range(150))


@pytest.mark.slow
async def test_three_concurrent_answers_in_one_workspace_stay_under_the_update_limit_and_all_land(bot, llm):
    # Each answer streams for about 4 s; paced only per channel (0.05 s in this suite) the three
    # would make well over 50 chat.update calls in that time.
    llm.script(*(Reply(text=answer(n), chunk_size=8, delay=0.03) for n in range(3)))

    for n in range(3):
        bot.slack.dm(f"U{n}", "write something long")
    # The model hands out the scripted answers in the order the requests arrive, so any DM may get any.
    dms = [f"DU{n}" for n in range(3)]
    await bot.slack.wait_for(
        lambda: all(any(m.text.endswith("w149") for m in bot.slack.channel_messages(d)) for d in dms),
        60,
        "every final text",
    )
    await bot.harness.idle(timeout=30)

    updates = bot.slack.calls_to("chat.update")
    assert [c for c in updates if c.error == "ratelimited"] == [], "the workspace's chat.update limit was hit"
    assert len(updates) <= 50
    shown = {d: [m.text for m in bot.slack.channel_messages(d)] for d in dms}
    assert sorted(texts[0] for texts in shown.values()) == sorted(answer(n) for n in range(3))
    assert all(len(texts) == 1 for texts in shown.values()), "every answer arrived whole, in its one message"
    # The workspace's updates are shared in arrival order, so which answer got how many varies; together
    # they were still shown while being written, not only at the end.
    assert any(c.args.get("text") not in {shown[d][0] for d in dms} for c in updates)


@pytest.mark.slow
async def test_the_fake_refuses_the_51st_update_in_a_minute_with_retry_after(slack):
    """The fake itself, held to Slack's documented behaviour (so the test above means something)."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    posted = await client.chat_postMessage(channel="C1", text="…")
    for i in range(50):
        await client.chat_update(channel="C1", ts=posted["ts"], text=f"v{i}")
    with pytest.raises(SlackApiError) as refused:
        await client.chat_update(channel="C1", ts=posted["ts"], text="one too many")
    assert refused.value.response.status_code == 429
    assert refused.value.response["error"] == "ratelimited"
    assert 1 <= int(refused.value.response.headers["Retry-After"]) <= 60
