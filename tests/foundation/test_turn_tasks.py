"""Issue 32, item 1: a message is one task, and ``/stop`` still stops only the running turn.

A message used to cost three tasks: its routing, its lane's worker, and the part of its turn ``/stop``
may cancel (the agent's stream). The routing task now goes on to run the lane it starts
(``LaneScheduler.carry``), and the agent's stream runs in the lane's task (``bot/lanes.py``,
``stoppable``): a stop is a cancellation of that task which is counted and taken back when the stream
ends, so the rest of the turn — delivering what was written, marking the entry done, the hooks — and
the next turn in the same lane run as if nothing had been cancelled.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Generator
from pathlib import Path
from typing import Any

from agent.events import TurnRequest
from bot.commands import Command, CommandContext, CommandRegistry
from bot.identity import Identity
from bot.logs import trace_id_var
from bot.manager import FollowUp, TurnOutcome
from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.foundation.instant_agent import InstantAgent
from tests.harness import Harness


async def test_a_message_is_one_task(tmp_path: Path) -> None:
    async with Harness.running(make_settings(tmp_path), agent=InstantAgent()) as h:
        assert (await h.ask("warm up", chat="warm")).startswith("ok: warm up")
        created: Counter[str] = Counter()
        loop = asyncio.get_running_loop()

        def factory(
            loop: asyncio.AbstractEventLoop,
            coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
            **kwargs: Any,
        ) -> asyncio.Task[Any]:
            frame = getattr(coro, "cr_frame", None)
            module = frame.f_globals.get("__name__", "?") if frame is not None else "?"
            created[f"{module}:{getattr(coro, '__qualname__', '?')}"] += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)
        try:
            messages = 20
            for n in range(messages):
                await h.chat.say(f"hello {n}", chat=f"chat-{n}", message_id=f"m-{n}")
            await h.idle()
        finally:
            loop.set_task_factory(None)
        answers = [m.text for m in h.chat.messages.values() if m.text.startswith("ok: hello")]
        assert len(answers) == messages
        # One task routes the message and then runs its lane; the agent's stream has no task of its own.
        assert created["bot.lanes:LaneScheduler.carry"] == messages
        turn_path = ("bot.router", "bot.lanes", "bot.turn_runner", "bot.manager")
        ours = sum(
            n for name, n in created.items() if name.split(":")[0] in turn_path and "wait_idle" not in name
        )
        assert ours == messages, created


async def test_a_stop_is_taken_back_before_the_turn_delivers_and_the_next_turn_runs_clean(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    llm.script(Reply(text="this will take a very long time " * 20, chunk_size=1, delay=0.05))
    async with Harness.running(make_settings(tmp_path, llm=llm)) as h:
        seen: list[tuple[str, bool, int]] = []

        async def hook(outcome: TurnOutcome) -> FollowUp | None:
            # Runs in the lane's task, after the reply is delivered: no cancellation may be left on it.
            task = asyncio.current_task()
            assert task is not None
            seen.append((outcome.text, outcome.stopped, task.cancelling()))
            return None

        h.manager.after_turn_hooks.append(hook)
        await h.chat.say("write an essay", message_id="essay")
        await h.chat.wait_for(lambda ch: any(m.text.startswith("this") for m in ch.messages.values()))
        await h.chat.say("and then this", message_id="second")  # queued behind it, in the same lane
        await h.chat.wait_for_text("Queued")
        await h.chat.say("/stop")
        await h.chat.wait_for_text("⏹ Stopped.")
        await h.idle(timeout=20)
        assert [(stopped, cancelling) for _text, stopped, cancelling in seen] == [(True, 0), (False, 0)]
        assert seen[1][0] == "echo: and then this"
        texts = [m.text for m in h.chat.in_chat("chat-1")]
        assert texts[0].endswith("⏹ Stopped.") and "echo: and then this" in texts


async def test_a_shutdown_after_routing_queued_the_turn_leaves_it_for_the_next_start(tmp_path: Path) -> None:
    """The routing task that queued an idle conversation's turn is that lane's worker (``carry``) before
    it has started it. Built-in commands queue their turn last, but a command may go on after queuing —
    here it says something more. A shutdown landing there cancels the routing task with the lane taken:
    the turn must not run in the stopping service, the stopped service must not show the conversation as
    busy (``/status``, the console), and the next start must answer the message exactly once."""
    queued, say_more = asyncio.Event(), asyncio.Event()

    async def later(ctx: CommandContext) -> None:
        await ctx.start_turn("the work")
        queued.set()
        await say_more.wait()  # still answering the command when the service stops
        await ctx.reply("I'll get to it.")

    def harness(chat: MemoryChannel) -> Harness:
        h = Harness(make_settings(tmp_path), channels={"memory": chat}, agent=InstantAgent())
        h.service.commands = CommandRegistry(
            [*h.service.commands.commands, Command("later", "queue work", later)]
        )
        return h

    chat = MemoryChannel("memory")
    first = harness(chat)
    await first.start()
    message = await chat.say("/later", message_id="later")
    await asyncio.wait_for(queued.wait(), 10)
    thread = (await first.manager.conversation_for(message, Identity(owner="local", bound=False))).thread_id
    await asyncio.wait_for(first.stop(grace=0.1), 10)
    assert [m.text for m in chat.in_chat()] == []  # neither the turn nor the command's reply ran
    assert first.manager.lane_state(thread) == "idle"  # what /status and the console would say
    await asyncio.wait_for(first.manager.wait_idle(), 2)
    assert await first.service.inbox.counts() == {"pending": 1}

    say_more.set()
    second = harness(chat)
    await second.start()
    try:
        await second.idle(timeout=20)
    finally:
        await second.stop()
    texts = [m.text for m in chat.in_chat()]
    assert texts.count("ok: the work") == 1 and texts.count("I'll get to it.") == 1, texts


#: State a runtime library might keep for "the current run" and never reset (as an agent framework's
#: tracing or config variables can): set during one turn's agent stream, in the lane's task.
_run_state: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_run_state", default=None)


class StickyAgent(InstantAgent):
    """An agent that notes what context it starts in, then leaves a context variable of its own set."""

    def __init__(self) -> None:
        super().__init__(wait=True)
        self.starts: list[tuple[str, asyncio.Task[Any] | None, str | None, str | None]] = []

    async def run(self, request: TurnRequest) -> AsyncIterator[Any]:
        self.starts.append((request.text, asyncio.current_task(), _run_state.get(), trace_id_var.get()))
        _run_state.set(f"run of {request.text!r}")
        async for event in super().run(request):
            yield event


async def test_a_turn_starts_with_none_of_the_previous_turns_context_in_the_same_task(tmp_path: Path) -> None:
    """The task that routes a message runs its lane, and with it every turn queued there meanwhile —
    another person's, in a group. Context variables one turn set (its trace id, whatever the agent's
    runtime keeps in one) must not be what the next turn run by that task starts with: its log lines
    would carry the other message's trace id, a library would read the other run's state."""
    agent = StickyAgent()
    async with Harness.running(make_settings(tmp_path), agent=agent) as h:
        for n, sender in enumerate(("alice", "bob")):
            await h.chat.say(f"@bot question {n}", chat="group", sender=sender, private=False, mentioned=True)
        await h.chat.wait_for_text("Queued", chat="group")  # bob's turn waits in alice's turn's lane
        agent.release.set()
        await h.idle()
    (_first, task, state, first_trace), (_second, same_task, left_over, second_trace) = agent.starts
    assert same_task is task  # one task ran both: the routing task of the first message (carry)
    assert state is None and left_over is None, left_over
    assert first_trace is not None and second_trace is not None and second_trace != first_trace
