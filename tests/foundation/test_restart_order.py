"""Restart and group-commit edge cases, each written against a mutant that survived (docs/testing.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bot.identity import Identity
from channels.errors import NetworkError, RetryAfter
from channels.memory import MemoryChannel
from channels.types import InboundMessage
from config.schema import Settings
from tests.agent.helpers import wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.harness import Harness


async def test_the_same_message_twice_in_one_group_commit_runs_once(harness, llm):
    message = harness.chat.make_message("only once please", message_id="twin")
    results = await asyncio.gather(harness.chat.deliver(message), harness.chat.deliver(message))
    await harness.idle()
    assert sorted(results) == [False, True]
    assert [last_user_text(b) for b in llm.completions] == ["only once please"]
    assert [m.text for m in harness.chat.in_chat("chat-1")] == ["echo: only once please"]


async def stop_with_pending_then_restart(
    settings: Settings,
    llm: FakeOpenAI,
    chat: MemoryChannel,
    send: Callable[[], Awaitable[object]],
    pending: int,
) -> list[str]:
    """Start, ``send`` while a slow first answer holds the chat (the rest queue behind it), stop at once
    — mid-answer: the model was asked and is still streaming — with ``pending`` messages left; start
    again until idle. Returns what the model was asked after the restart, in order."""
    llm.script(Reply(text="a slow first answer", chunk_size=1, delay=0.2))
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    asked_before = len(llm.completions)
    await send()
    await chat.wait_for_text("Queued")
    await wait_until(lambda: len(llm.completions) > asked_before)  # the slow answer is on its way
    await first.stop(grace=0)
    assert await first.service.inbox.counts() == {"pending": pending}

    before = len(llm.completions)
    second = Harness(settings, channels={"memory": chat})
    await second.start()
    try:
        await second.idle(timeout=30)
    finally:
        await second.stop()
    return [last_user_text(b) for b in llm.completions[before:]]


async def test_unfinished_messages_of_one_chat_resume_in_arrival_order_after_a_restart(settings_on, llm):
    chat = MemoryChannel("memory")

    async def send() -> None:
        for text in ("one", "two", "three"):  # separate commits: three distinct arrival times
            await chat.say(text)

    asked = await stop_with_pending_then_restart(settings_on(), llm, chat, send, pending=3)
    assert asked == ["one", "two", "three"]


async def test_messages_of_one_chat_accepted_in_one_group_commit_resume_in_arrival_order(settings_on, llm):
    """A burst lands in one group commit, at one ``now``: the stored order must still be arrival order
    (entry ids are random, and a restart — or another instance — reads ``ORDER BY created_at, id``)."""
    chat = MemoryChannel("memory")
    texts = [f"burst {n}" for n in range(20)]

    async def send() -> None:
        await asyncio.gather(*(chat.say(text) for text in texts))  # accepted together

    asked = await stop_with_pending_then_restart(settings_on(), llm, chat, send, pending=20)
    assert asked == texts
    answers = [m.text for m in chat.in_chat("chat-1")]
    # The first message's answer was cut short by the stop; after the restart it is answered anew, in the
    # same message, and the rest follow in arrival order.
    assert answers == [f"echo: {text}" for text in texts]


class FailsOnce:
    """An identity resolver (the manager's public hook) whose first lookup fails."""

    def __init__(self) -> None:
        self.failed = False

    async def resolve(self, message: InboundMessage) -> Identity:
        if not self.failed:
            self.failed = True
            raise RuntimeError("directory service unavailable")
        return Identity("someone", bound=False)


async def test_a_message_that_failed_once_is_retried_at_the_next_start(settings_on, llm):
    settings = settings_on()  # max_attempts 3: one failure is not the end
    chat = MemoryChannel("memory")
    async with Harness.running(settings, channels={"memory": chat}) as first:
        first.manager.identity = FailsOnce()
        await chat.say("are you there?")
        for _ in range(500):  # failed, and stopped before its in-process retry (due after 1 s)
            if await first.service.inbox.counts() == {"failed": 1}:
                break
            await asyncio.sleep(0.01)
        assert await first.service.inbox.counts() == {"failed": 1}
    async with Harness.running(settings, channels={"memory": chat}) as second:
        await second.idle()
        assert await second.service.inbox.counts() == {"done": 1}
    assert chat.in_chat("chat-1")[-1].text == "echo: are you there?"


async def test_a_rate_limited_final_edit_is_retried_in_place_not_posted_twice(settings_on, llm):
    """The resend path (an answer kept while the platform was down) has no streaming, so its first edit
    is the final one: a single RetryAfter there must be waited out, not turned into a second message."""
    settings = settings_on()
    chat = MemoryChannel("memory")
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    try:
        chat.fail_next("send", NetworkError("platform down"), times=10_000)
        await chat.say("important question")
        for _ in range(600):  # the answer is kept with its entry while delivery keeps failing
            if any(e.reply_text for e in await first.service.inbox.entries()):
                break
            await asyncio.sleep(0.05)
    finally:
        await first.stop(grace=0)
    assert any(e.reply_text for e in await first.service.inbox.entries())
    chat.recover()
    chat.fail_next("edit", RetryAfter(0.05))
    async with Harness.running(settings, channels={"memory": chat}) as second:
        await second.idle()
    assert [m.text for m in chat.in_chat("chat-1")] == ["echo: important question"]
    assert len(llm.completions) == 1
