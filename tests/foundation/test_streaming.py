"""SCENARIOS 11, 12, 14: one message edited in place, paced, rate limits honoured, long text split."""

from __future__ import annotations

import itertools

from channels.errors import ChannelError, EditFailed, RetryAfter
from channels.memory import MemoryChannel
from channels.splitter import split_text
from channels.types import ReplyLimits
from tests.fakes.openai_server import Reply
from tests.harness import Harness

LONG = "word " * 200


async def paced(settings, interval: float = 0.25, limit: int = 4000) -> Harness:  # type: ignore[no-untyped-def]
    chat = MemoryChannel("memory", limits=ReplyLimits(text_limit=limit, min_edit_interval=interval))
    return await Harness(settings, channels={"memory": chat}).start()


async def test_the_reply_is_one_message_edited_in_place_and_updates_are_coalesced(settings, llm):
    llm.script(Reply(text=LONG, chunk_size=5, delay=0.01))  # 200 chunks over ~2 s
    h = await paced(settings)
    try:
        await h.ask("stream please")
    finally:
        await h.stop()
    [message] = h.chat.in_chat("chat-1")
    assert message.text == LONG.strip() or message.text == LONG
    assert message.history[0] == "…"
    # Each version only grows: the user sees the answer being written, never jumping around.
    visible = [v for v in message.history[1:]]
    assert all(b.startswith(a.rstrip()) for a, b in itertools.pairwise(visible))
    assert len(message.history) < 200 / 4, "updates must be coalesced to the chat's budget"


async def test_a_rate_limited_update_is_dropped_and_later_updates_and_the_final_still_land(settings, llm):
    llm.script(Reply(text=LONG, chunk_size=5, delay=0.01))
    h = await paced(settings, interval=0.1)
    h.chat.fail_next("edit", RetryAfter(0.5))
    try:
        await h.ask("stream please")
    finally:
        await h.stop()
    [message] = h.chat.in_chat("chat-1")
    assert message.text.strip() == LONG.strip()
    assert len(message.history) > 2


async def test_when_the_final_edit_keeps_being_rate_limited_the_placeholder_still_becomes_the_answer(
    settings, llm
):
    llm.script(Reply(text="the final answer"))
    settings.bus.final_retry_seconds = 0.05  # the service's own back-off (1 s by default): the 0.05 s asked
    h = await paced(settings, interval=0.01)
    h.chat.fail_next("edit", RetryAfter(0.05), times=20)
    try:
        await h.ask("go")
    finally:
        await h.stop()
    # A rate limit is waited out, not answered with a second message that leaves the "…" behind.
    assert [m.text for m in h.chat.in_chat("chat-1")] == ["the final answer"]


async def test_a_final_edit_that_fails_now_and_then_is_tried_again_in_place_not_posted_anew(settings, llm):
    """An error the platform gives a time or two (neither a rate limit nor "this message cannot be
    edited") is tried again on the same message: posting the answer anew would leave the "…" behind.

    The answer comes in one piece and the chat allows an edit a second, so at most one live edit comes
    before the final one: the two failures reach the final edit at least once."""
    llm.script(Reply(text="the final answer", chunk_size=100))
    h = await paced(settings, interval=1.0)
    h.chat.fail_next("edit", ChannelError("the platform had a hiccup"), times=2)
    try:
        await h.ask("go")
    finally:
        await h.stop()
    assert [m.text for m in h.chat.in_chat("chat-1")] == ["the final answer"]


async def test_an_uneditable_reply_falls_back_to_a_new_message(settings, llm):
    llm.script(Reply(text="fresh copy"))
    h = await paced(settings, interval=0.01)
    h.chat.fail_next("edit", EditFailed("message deleted"), times=5)
    try:
        await h.ask("go")
    finally:
        await h.stop()
    assert [m.text for m in h.chat.in_chat("chat-1")][-1] == "fresh copy"


CODE_ANSWER = (
    "Here is the script:\n\n```python\n"
    + "\n".join(f"print({i})  # step {i}" for i in range(120))
    + "\n```\n\nRun it with python."
)


async def test_a_long_answer_is_split_on_line_boundaries_without_breaking_a_code_fence(settings, llm):
    llm.script(Reply(text=CODE_ANSWER, chunk_size=50))
    h = await paced(settings, interval=0.01, limit=800)
    try:
        await h.ask("write code")
    finally:
        await h.stop()
    parts = [m.text for m in h.chat.in_chat("chat-1")]
    assert len(parts) >= 3
    for part in parts:
        assert len(part) <= 800
        assert part.count("```") % 2 == 0, f"unbalanced fence in:\n{part}"
        assert not part.startswith("print") or part.startswith("```")
    lines = [ln for p in parts for ln in p.split("\n") if not ln.startswith("```")]
    original = [ln for ln in CODE_ANSWER.split("\n") if not ln.startswith("```")]
    assert [ln for ln in lines if ln] == [ln for ln in original if ln]


def test_the_splitter_keeps_every_chunk_under_the_limit_and_loses_nothing():
    text = ("para " * 50 + "\n\n") * 10 + "x" * 3000
    chunks = split_text(text, 700)
    assert all(len(c) <= 700 for c in chunks)
    assert "".join(chunks).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
