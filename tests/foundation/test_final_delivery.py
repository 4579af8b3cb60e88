"""A final reply that the platform rate-limits or fails with a 5xx still lands, in place, once
(bot/redelivery.py). The Telegram version under load, through a real ``serve`` process, is
tests/channels/telegram/test_final_delivery.py."""

from __future__ import annotations

import asyncio

from bot.inbox import InboxEntry
from channels.errors import BadRequest, NetworkError, RetryAfter
from channels.memory import MemoryChannel
from channels.types import ReplyLimits
from tests.fakes.openai_server import Reply, last_user_text
from tests.harness import Harness

#: The service's own back-off between tries of a final reply, 1 s by default and doubling: short here,
#: so a run of failures is tried again within the test's time (the path is the same).
QUICK_RETRY = {"final_retry_seconds": 0.1}


def paced_chat() -> MemoryChannel:
    """A platform paced at 10 ms whose own retries of a failed final also start at 0.1 s, not 0.5 s."""
    limits = ReplyLimits(text_limit=4000, min_edit_interval=0.01, final_retry_backoff=0.1)
    return MemoryChannel("memory", limits=limits)


async def saved_answer(harness: Harness, seconds: float = 30) -> InboxEntry:
    """The inbox entry once its answer is kept for a later delivery."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        entries = [e for e in await harness.service.inbox.entries() if e.reply_text]
        if entries:
            return entries[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the answer was never saved with its entry")


async def test_a_final_rate_limited_longer_than_the_replys_own_tries_lands_in_its_placeholder(
    settings_on, llm
):
    chat = paced_chat()
    async with Harness.running(settings_on(bus=QUICK_RETRY), channels={"memory": chat}) as h:
        chat.fail_next("edit", RetryAfter(0.1), times=10)  # the reply itself tries 3 times
        await chat.say("how are you?")
        await h.idle(timeout=30)
        [entry] = await h.service.inbox.entries()
    assert [m.text for m in chat.in_chat("chat-1")] == ["echo: how are you?"], "no '…' left behind"
    assert (entry.status, entry.attempts) == ("done", 0), "a rate limit is not a failed attempt"


async def test_a_run_of_5xx_on_final_replies_turns_the_queued_notice_into_its_answer(settings_on, llm):
    def answer(request):  # type: ignore[no-untyped-def]
        text = last_user_text(request)
        return Reply(text=f"echo: {text}", chunk_size=2, delay=0.05 if text == "first" else 0.0)

    llm.default_reply = answer
    chat = paced_chat()
    async with Harness.running(settings_on(bus=QUICK_RETRY), channels={"memory": chat}) as h:
        await chat.say("first")
        await chat.say("second")
        await chat.wait_for_text("⏳ Queued")
        chat.fail_next("edit", NetworkError("502 Bad Gateway"), times=12)
        await h.idle(timeout=60)
        counts = await h.service.inbox.counts()
    assert [m.text for m in chat.in_chat("chat-1")] == ["echo: first", "echo: second"]
    assert counts == {"done": 2}


async def test_an_answer_waiting_for_the_platform_is_delivered_once_by_the_next_start(settings_on, llm):
    """The service stops while the platform still fails the final edit: the answer is kept with the
    inbox entry, and the next start edits the same message into it without asking the model again."""
    settings = settings_on()
    chat = paced_chat()
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    try:
        await chat.say("remember me")
        await chat.wait_for_text("…")
        chat.fail_next("edit", NetworkError("503 Service Unavailable"), times=10_000)
        entry = await saved_answer(first)
    finally:
        await first.stop(grace=0)
    assert entry.reply_text == "echo: remember me"
    assert [m.text for m in chat.in_chat("chat-1")] == ["…"]

    chat.recover()
    async with Harness.running(settings, channels={"memory": chat}) as second:
        await second.idle(timeout=30)
        counts = await second.service.inbox.counts()
    assert [m.text for m in chat.in_chat("chat-1")] == ["echo: remember me"], "the same message, once"
    assert len(llm.completions) == 1, "the saved answer was delivered, not asked for again"
    assert counts == {"done": 1}


async def test_an_answer_the_platform_refused_is_kept_and_the_retry_delivers_it_without_the_model(
    settings_on, llm
):
    """A refusal that is not a rate limit (the platform answered 400 to the final) counts as a failed
    attempt, but the answer is kept with the entry: the next start delivers it, and the model is not asked
    again (which would cost tokens and could answer differently)."""
    settings = settings_on()
    chat = paced_chat()
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    try:
        chat.fail_next("edit", BadRequest("Bad Request: can't parse entities"), times=50)
        chat.fail_next("send", BadRequest("Bad Request: can't parse entities"), times=50)
        await chat.say("tell me once")
        await first.idle(timeout=30)
        [entry] = await first.service.inbox.entries()
        assert (entry.status, entry.reply_text) == ("failed", "echo: tell me once")
    finally:
        await first.stop()
    asked = len(llm.completions)
    chat.recover()
    second = Harness(settings, channels={"memory": chat})
    await second.start()
    try:
        await chat.wait_for_text("echo: tell me once")
        await second.idle(timeout=30)
    finally:
        await second.stop()
    assert len(llm.completions) == asked, "the kept answer was delivered; the model was not asked again"
