"""How a streamed answer appears in Telegram: pacing under a 429, splitting, markup and its fallback."""

from __future__ import annotations

import re

from tests.fakes.openai_server import Reply
from tests.fakes.telegram import FakeTelegram

from .conftest import BOT_USERNAME


async def test_a_429_on_an_intermediate_edit_is_honoured_and_the_final_text_still_lands(
    tg: FakeTelegram, tg_harness, llm
):
    words = " ".join(f"word{i}" for i in range(80))
    llm.script(Reply(text=words, chunk_size=12, delay=0.04))
    tg.fail_next("editMessageText", status=429, retry_after=1)
    tg.user_message(42, "talk for a while")

    reply = await tg.wait_for_bot_text(42, "word79")
    await tg_harness.idle()

    edits = tg.calls("editMessageText")
    statuses = [c["status"] for c in edits]
    assert statuses[0] == 429, "the first intermediate edit was rate limited"
    assert statuses[1:] and all(s == 200 for s in statuses[1:]), "later edits still landed"
    assert edits[1]["at"] - edits[0]["at"] >= 0.9, "nothing was sent to the chat before retry_after passed"
    assert reply.text == words
    assert len(tg.bot_messages(42)) == 1


async def test_a_10000_character_answer_arrives_as_three_messages_without_breaking_a_code_fence(
    tg: FakeTelegram, tg_harness, llm
):
    prose = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 6 for i in range(27))
    code = "\n".join(f"    total = total + {i}  # step {i:04d}" for i in range(110))
    tail = "\n\n".join(f"Closing {i}: " + "consectetur adipiscing elit " * 5 for i in range(8))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{tail}\n\nThe end."
    assert 9_500 < len(answer) < 10_500
    llm.script(Reply(text=answer, chunk_size=400, delay=0.01))
    tg.user_message(42, "write a lot")

    await tg.wait_for_bot_text(42, "The end.")
    await tg_harness.idle()

    messages = tg.bot_messages(42)
    assert len(messages) == 3
    assert all(len(m.text) <= 4096 for m in messages)
    assert all(m.parse_mode == "HTML" for m in messages), "every part rendered as valid markup"
    html_parts = [m.raw[-1] for m in messages]
    with_code = [h for h in html_parts if "<pre>" in h or "<pre><code" in h]
    assert len(with_code) >= 2, "the code block spans a split"
    for part in html_parts:
        assert part.count("<pre") == part.count("</pre>"), "each message closes its own code block"
    shown = "\n".join(m.text for m in messages)
    steps = [int(n) for n in re.findall(r"# step (\d{4})", shown)]
    assert steps == list(range(110)), "every code line arrived once, in order"
    assert "```" not in shown


async def test_markdown_is_rendered_as_html_and_sent_as_plain_text_when_telegram_refuses_it(
    tg: FakeTelegram, tg_harness, llm
):
    llm.script(Reply(text="Use `ls -la` and see [the docs](https://example.com/a_b) for *more* <info> & co"))
    tg.fail_next(
        "sendMessage", status=400, description="Bad Request: can't parse entities: unexpected end tag"
    )
    tg.user_message(42, "how do I list files?")

    reply = await tg.wait_for_bot_text(42, "co")
    await tg_harness.idle()

    assert reply.history[0] == "…", "the placeholder went out as plain text after the parse error"
    assert reply.text == "Use ls -la and see the docs for more <info> & co"
    assert '<a href="https://example.com/a_b">the docs</a>' in reply.raw[-1]
    assert "<code>ls -la</code>" in reply.raw[-1] and "&lt;info&gt; &amp; co" in reply.raw[-1]


async def test_an_answer_in_a_group_quotes_the_question_and_every_part_of_it(
    tg: FakeTelegram, tg_harness, llm
):
    llm.script(Reply(text="x" * 3000 + "\n\n" + "y" * 3000, chunk_size=500))
    asked = tg.user_message(-100777, f"@{BOT_USERNAME} long one please", chat_type="group")
    await tg.wait_until(lambda: any("y" * 100 in t for t in tg.bot_texts(-100777)))
    await tg_harness.idle()
    assert [m.reply_to for m in tg.bot_messages(-100777)] == [asked["message_id"]] * 2


async def test_an_edit_telegram_calls_not_modified_is_ignored(tg: FakeTelegram, tg_harness, llm):
    words = " ".join(f"item{i}" for i in range(60))
    llm.script(Reply(text=words, chunk_size=10, delay=0.03))
    tg.fail_next("editMessageText", status=400, description="Bad Request: message is not modified")
    tg.user_message(42, "list things")

    reply = await tg.wait_for_bot_text(42, "item59")
    await tg_harness.idle()
    assert reply.text == words and len(tg.bot_messages(42)) == 1


async def test_when_the_message_can_no_longer_be_edited_the_final_text_arrives_as_a_new_message(
    tg: FakeTelegram, tg_harness, llm
):
    llm.script(Reply(text="the final words"))
    tg.fail_next(
        "editMessageText", status=400, description="Bad Request: message to edit not found", times=10
    )
    tg.user_message(42, "answer me")

    await tg.wait_for_bot_text(42, "the final words")
    await tg_harness.idle()
    assert [m.text for m in tg.bot_messages(42)] == ["…", "the final words"]
