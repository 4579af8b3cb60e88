"""One budget per chat: a 429 on any call to a chat (placeholder, queued notice, edit, final) holds the chat."""

from __future__ import annotations

from typing import Any

from tests.fakes.openai_server import Reply
from tests.fakes.telegram import FakeTelegram

REPLY_METHODS = ("sendMessage", "editMessageText")


def chat_calls(tg: FakeTelegram, chat_id: int) -> list[dict[str, Any]]:
    """Every reply call to ``chat_id``, in the order the fake received them."""
    return [
        c
        for c in tg.calls()
        if c["method"] in REPLY_METHODS and int(c["params"].get("chat_id") or 0) == chat_id
    ]


async def test_a_429_on_the_placeholder_makes_the_next_call_to_that_chat_wait_retry_after(
    tg: FakeTelegram, tg_harness, llm
):
    llm.script(Reply(text="a quick answer"))
    tg.fail_next("sendMessage", status=429, retry_after=1)
    tg.user_message(42, "hello")

    await tg.wait_for_bot_text(42, "a quick answer")
    await tg_harness.idle()

    calls = chat_calls(tg, 42)
    assert calls[0]["method"] == "sendMessage" and calls[0]["status"] == 429, "the placeholder was refused"
    assert calls[1]["at"] - calls[0]["at"] >= 0.95, "the chat was held for retry_after"
    assert tg.bot_texts(42) == ["a quick answer"]


async def test_a_429_on_a_queued_notice_holds_the_chat_that_is_still_streaming(
    tg: FakeTelegram, tg_harness, llm
):
    words = " ".join(f"w{i}" for i in range(120))
    llm.script(Reply(text=words, chunk_size=6, delay=0.04), Reply(text="second answer"))
    tg.user_message(42, "a long one")
    await tg.wait_until(lambda: len(tg.bot_messages(42)) == 1)  # the first answer's placeholder

    tg.fail_next("sendMessage", status=429, retry_after=1)
    tg.user_message(42, "and another")  # arrives while the first streams: its "Queued" notice is refused
    await tg.wait_for_bot_text(42, "second answer", timeout=30)
    await tg_harness.idle()

    calls = chat_calls(tg, 42)
    refused = next(i for i, c in enumerate(calls) if c["status"] == 429)
    assert calls[refused]["method"] == "sendMessage"
    assert calls[refused + 1]["at"] - calls[refused]["at"] >= 0.95, "streaming edits waited retry_after"
    assert sorted(tg.bot_texts(42)) == sorted([words, "second answer"])
