"""Issue 19: after-turn hooks off the hot path.

A message sent right after a reply must start at once, not read "⏳ Queued" behind a turn that has
already answered; and goals, now answered from an in-memory index, must still be seen and continue.
"""

from __future__ import annotations

import asyncio

from bot.manager import FollowUp, TurnOutcome
from tests.agent.helpers import agent_settings
from tests.agent.test_goals import goal_model
from tests.harness import Harness

QUEUED = "⏳ Queued"


async def test_a_closed_loop_of_quick_messages_never_reads_queued(tmp_path, llm):
    # Memory and goals on (memory with its default debounce, as shipped), plus a slow after-turn
    # hook: bookkeeping after the reply must not keep the thread looking busy.
    settings = agent_settings(tmp_path, llm, memory={"enabled": True})
    async with Harness.running(settings) as h:

        async def slow_hook(outcome: TurnOutcome) -> FollowUp | None:
            await asyncio.sleep(0.05)
            return None

        h.manager.after_turn_hooks.append(slow_hook)
        chats, messages = 4, 12

        async def one_chat(index: int) -> None:
            chat = f"chat-{index}"
            for n in range(messages):
                message_id = f"{index}-{n}"
                await h.chat.say(f"quick {message_id}", chat=chat, message_id=message_id)
                # The next message goes the moment this reply is finished, as a quick user would.
                await h.chat.wait_for(lambda c, i=message_id: i in c.finished, timeout=30)

        await asyncio.gather(*(one_chat(i) for i in range(chats)))
        await h.idle(timeout=30)
        queued = [m.history for m in h.chat.messages.values() if any(QUEUED in v for v in m.history)]
        assert queued == []
        answers = [m for m in h.chat.messages.values() if m.text.startswith("echo: quick")]
        assert len(answers) == chats * messages


async def test_a_goal_set_after_the_index_is_loaded_still_continues(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, agent={"max_goal_continuations": 2})
    async with Harness.running(settings) as h:
        assert (await h.ask("hello")).startswith("echo: hello")  # the goal hook has loaded its index
        llm.default_reply = goal_model("continue", "more to do")
        await h.chat.say("/goal tidy the workspace")
        await h.chat.wait_for_text("Goal paused after 2 continuations", timeout=60)
        await h.idle(timeout=30)
        shown = [v for m in h.chat.messages.values() for v in m.history]
        assert any("▶️ Running — step 2 of 2" in v for v in shown), "the goal's card reached step 2"
        # Cleared: the index forgets it, and a plain turn afterwards does not evaluate anything.
        assert await h.ask("/goal clear") == "🎯 Goal cleared."
        evaluations = len(llm.completions)
        assert (await h.ask("bye")).startswith("echo:")
        assert len(llm.completions) == evaluations + 1
