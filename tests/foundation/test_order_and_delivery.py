"""Ordering and delivery guarantees, each written to fail on a specific plausible bug (see
docs/testing.md, "Mutants"): LIFO lanes, a missing arrival lock, done-before-delivered, a private-only
identity gate."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from bot.identity import Identity, unbound_owner
from channels.memory import MemoryChannel, MemoryTransport
from channels.reply import ReplyTransport
from channels.types import Action, InboundMessage
from tests.conftest import make_settings
from tests.connections.conftest import running_app
from tests.fakes.openai_server import Reply, last_user_text
from tests.harness import Harness


async def test_three_queued_messages_are_answered_first_in_first_out(harness, llm):
    llm.script(Reply(text="first answer, slowly", chunk_size=1, delay=0.05))
    await harness.chat.say("first")
    await harness.chat.wait_for(lambda ch: any(m.text.startswith("first") for m in ch.messages.values()))
    for text in ("second", "third", "fourth"):
        await harness.chat.say(text)
    await harness.idle(timeout=30)
    assert [last_user_text(body) for body in llm.completions] == ["first", "second", "third", "fourth"]
    assert [m.text for m in harness.chat.in_chat("chat-1")] == [
        "first answer, slowly",
        "echo: second",
        "echo: third",
        "echo: fourth",
    ]


class SlowerForEarlierMessages:
    """An identity resolver (the manager's public hook) whose latency varies per message, as a directory
    service's does: the earlier a message arrived, the longer its lookup takes."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def resolve(self, message: InboundMessage) -> Identity:
        index = int(message.text.split()[-1])
        await asyncio.sleep((self.count - index) * 0.02)
        return Identity(unbound_owner(message), bound=False)


async def test_a_burst_in_one_conversation_runs_in_arrival_order_even_when_lookups_finish_out_of_order(
    harness, llm
):
    count = 5
    harness.manager.identity = SlowerForEarlierMessages(count)
    for index in range(count):  # each publish returns once stored: this is the arrival order
        await harness.chat.say(f"message {index}")
    await harness.idle(timeout=30)
    assert [last_user_text(body) for body in llm.completions] == [f"message {i}" for i in range(count)]


async def test_the_identity_gate_applies_in_group_chats_too(tmp_path, llm):
    settings = make_settings(tmp_path, llm, connections={"require_bound_identity": True})
    async with running_app(settings) as app:
        hint = await app.say("@bot drop the prod tables", chat="group-1", private=False, mentioned=True)
    assert "/connect CODE" in hint
    assert llm.completions == [], "an unbound sender in a group reached the model"


class CrashingTransport(MemoryTransport):
    """Delivering the final answer never completes: the process dies while sending it."""

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if isinstance(self.channel, CrashOnFinal) and self.channel.crash and text.startswith("echo:"):
            await asyncio.Event().wait()
        return await super().send(text, fallback=fallback, actions=actions)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if isinstance(self.channel, CrashOnFinal) and self.channel.crash and text.startswith("echo:"):
            await asyncio.Event().wait()
        await super().edit(ref, text, actions=actions)

    async def send_files(self, files: Sequence[Path]) -> None:
        await super().send_files(files)


class CrashOnFinal(MemoryChannel):
    def __init__(self) -> None:
        super().__init__("memory")
        self.crash = True

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return CrashingTransport(self, message)


async def test_a_crash_while_delivering_the_final_reply_leaves_the_message_to_be_answered_after_restart(
    settings_on, llm
):
    settings = settings_on()
    chat = CrashOnFinal()
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    await chat.say("are you there?", message_id="m-final")
    await chat.wait_for(lambda ch: bool(ch.messages))  # the placeholder: the turn is running
    while not llm.completions:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # the answer is in hand; its delivery hangs
    assert await first.service.inbox.counts() == {"pending": 1}, "marked done before it was delivered"
    await first.stop(grace=0)  # the kill between delivering and marking done

    chat.crash = False
    second = Harness(settings, channels={"memory": chat})
    await second.start()
    try:
        await second.idle(timeout=20)
        assert await second.service.inbox.counts() == {"done": 1}
        assert chat.in_chat("chat-1")[-1].text == "echo: are you there?"
    finally:
        await second.stop()
