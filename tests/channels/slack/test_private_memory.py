"""Issue 12: /memory asked in a Slack channel posts no remembered fact into the channel.

/memory is a private command: in a channel its answer is an ephemeral only the asker sees (issue 15).
"""

from __future__ import annotations

import asyncio

from tests.agent.test_memory_durability import kiwi_memory
from tests.channels.slack.conftest import running_bot


async def test_memory_in_a_slack_channel_posts_no_fact_and_the_dm_still_shows_it(tmp_path, llm, slack):
    llm.default_reply = kiwi_memory
    memory_on = {"memory": {"enabled": True, "debounce_seconds": 0}}
    async with running_bot(tmp_path, llm, slack, settings_overrides=memory_on) as bot:
        bot.slack.dm("U1", "I grow kiwis")
        await bot.slack.wait_for_text("echo: I grow kiwis", "DU1")
        await bot.harness.idle(timeout=30)
        shown = ""
        for _ in range(50):  # extraction runs just after the turn; ask until the fact is stored
            before = len(bot.slack.channel_messages("DU1"))
            bot.slack.dm("U1", "/memory")
            await bot.slack.wait_for(
                lambda before=before: len(bot.slack.channel_messages("DU1")) > before,
                what="the /memory answer",
            )
            await bot.harness.idle(timeout=30)
            shown = bot.slack.channel_messages("DU1")[-1].text
            if "Grows kiwis" in shown:
                break
            await asyncio.sleep(0.1)
        bot.slack.mention("C1", "U1", "/memory")
        await bot.slack.wait_for(lambda: bot.slack.ephemerals_for("U1", "C1"), what="the /memory answer")
        await bot.harness.idle(timeout=30)
    assert "Grows kiwis" in shown
    (answer,) = bot.slack.ephemerals_for("U1", "C1")
    assert answer.text.startswith("Ask me in a private chat")
    assert "kiwi" not in answer.text.lower()
    assert not any("kiwi" in m.text.lower() for m in bot.slack.channel_messages("C1"))
