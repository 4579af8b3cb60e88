"""How a streamed answer appears in Slack: paced updates, rate limits, long answers, formatting."""

from __future__ import annotations

import pytest

from channels.slack.channel import TEXT_LIMIT
from tests.fakes.openai_server import Reply


@pytest.mark.slow
async def test_a_429_on_an_intermediate_update_is_waited_out_and_later_updates_and_the_final_land(bot, llm):
    words = " ".join(f"word{i}" for i in range(60))
    llm.script(Reply(text=words, chunk_size=6, delay=0.03))
    bot.slack.fail_next("chat.update", "ratelimited", retry_after=1)

    bot.slack.dm("U1", "stream something")
    await bot.slack.wait_for_text("word59", "DU1", timeout=30)
    await bot.harness.idle(timeout=30)

    updates = bot.slack.calls_to("chat.update")
    limited = [i for i, call in enumerate(updates) if call.error == "ratelimited"]
    assert limited == [0]  # the first update was refused with 429 …
    assert any(call.error is None for call in updates[1:])  # … and later ones still landed
    [message] = bot.slack.channel_messages("DU1")
    assert message.text == words  # the final text, in the one message


async def test_a_failed_final_update_falls_back_to_a_new_message(bot, llm):
    llm.script(Reply(text="the final answer", chunk_size=100))
    bot.slack.fail_next("chat.update", "message_not_found", times=5)

    bot.slack.dm("U1", "answer please")
    await bot.slack.wait_for_text("the final answer", "DU1")
    await bot.harness.idle(timeout=30)
    assert [m.text for m in bot.slack.channel_messages("DU1")] == ["…", "the final answer"]


async def test_a_10000_character_answer_is_split_into_several_messages_without_breaking_a_code_fence(
    bot, llm
):
    prose = "\n".join(f"Line {i}: some explanation of the code below." for i in range(110))
    code = "\n".join(f"print('row {i}')  # a statement" for i in range(140))
    answer = f"{prose}\n\n```python\n{code}\n```\n\nThat is all."
    assert len(answer) > 9000
    llm.script(Reply(text=answer, chunk_size=400, delay=0.005))

    mention = bot.slack.mention("C1", "U1", "write a long program")
    await bot.slack.wait_for_text("That is all.", "C1", timeout=30)
    await bot.harness.idle(timeout=30)

    messages = bot.slack.channel_messages("C1")
    assert len(messages) >= 3
    assert all(m.thread_ts == mention["event"]["ts"] for m in messages)  # every part in the thread
    for m in messages:
        assert len(m.text) <= TEXT_LIMIT + 100
        assert m.text.count("```") % 2 == 0, "every message must render its code block on its own"
        assert "```python" not in m.text  # Slack would print the language tag as code
    joined = "\n".join(m.text for m in messages)
    for i in (0, 70, 139):
        assert f"print('row {i}')" in joined
    assert joined.count("Line ") == 110


async def test_model_markup_is_rendered_as_mrkdwn_and_cannot_ping_a_channel(bot, llm):
    llm.script(
        Reply(
            text="# Summary\nSee [the docs](https://example.com/a?b=1&c=2) <!channel> and `a < b`.\n"
            "| name | n |\n|---|---|\n| x | 1 |\n- done"
        )
    )
    bot.slack.dm("U1", "summarise")
    await bot.slack.wait_for_text("done", "DU1")
    await bot.harness.idle(timeout=30)
    [message] = bot.slack.channel_messages("DU1")
    assert message.text == (
        "*Summary*\n"
        "See <https://example.com/a?b=1&amp;c=2|the docs> &lt;!channel&gt; and `a &lt; b`.\n"
        "```\n| name | n |\n|---|---|\n| x | 1 |\n```\n"  # Slack has no tables: aligned as code
        "• done"
    )
