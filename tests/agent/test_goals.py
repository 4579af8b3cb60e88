"""SCENARIOS 18, 21, 50: goals that keep the agent working, and stop at the cap or when stuck.

Issue 36: the chat sees a goal as one task card — each step streams into it, its status line names the
step, and it ends with the verdict and the last step's answer — not as a stream of 🎯 notices."""

from __future__ import annotations

import json
from typing import Any

from agent.goals import EVALUATOR_MARKER
from tests.agent.helpers import agent_settings, everything_shown, system_text
from tests.fakes.openai_server import Reply, ToolCall, echo_reply, last_user_text
from tests.harness import Harness
from tests.tasks.kit import card_body, card_status, is_card


def goal_model(decision: str, reason: str, work=echo_reply):  # type: ignore[no-untyped-def]
    """The fake model: the evaluator always says ``decision``; other requests get ``work(body)``."""

    def reply(body: dict[str, Any]) -> Reply:
        if EVALUATOR_MARKER in system_text(body):
            return Reply(text=json.dumps({"decision": decision, "reason": reason}))
        return work(body)

    return reply


def goal_cards(chat) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The task cards in the chat (a goal has one)."""
    return [m for m in chat.messages.values() if is_card(m.text)]


def continuations(llm) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        last_user_text(b)
        for b in llm.completions
        if EVALUATOR_MARKER not in system_text(b) and last_user_text(b).startswith("[Goal continuation")
    ]


async def test_a_goal_continues_at_most_eight_times_then_pauses(harness, llm):
    llm.default_reply = goal_model("continue", "more files to tidy")
    await harness.chat.say("/goal tidy the workspace")
    await harness.chat.wait_for_text("Goal paused after 8 continuations", timeout=60)
    await harness.idle(timeout=30)
    assert [c.split("]")[0] for c in continuations(llm)] == [f"[Goal continuation {n}/8" for n in range(1, 9)]
    shown = everything_shown(harness.chat)
    assert "🎯 Goal set: tidy the workspace" in shown
    [card] = goal_cards(harness.chat)
    steps = [card_status(text) for text in card.history]
    assert "▶️ Running — step 1 of 8" in steps
    assert "▶️ Running — step 8 of 8" in steps
    assert not any(text.startswith("🎯 continuing") for text in shown), "no notice beside the card"
    # The continuation prompts are hidden: only the assistant's answers appear, in the card.
    assert any(card_body(text).startswith("echo: [Goal continuation 1/8]") for text in card.history)
    assert card_status(card.text) == "⏹ Stopped"
    assert card_body(card.text).startswith("echo: [Goal continuation 8/8]")
    assert card.text.endswith("Last evaluation: more files to tidy"), "the verdict ends the card"
    assert card.actions == (), "no Stop button on the finished card"
    status = await harness.ask("/goal")
    assert "paused at the continuation limit — 8/8 continuations used" in status
    assert "Last evaluation: continue: more files to tidy" in status


async def test_a_goal_stops_when_two_continuations_add_nothing_new(harness, llm):
    llm.default_reply = goal_model(
        "continue", "keep going", work=lambda body: Reply(text="Still working on it.")
    )
    await harness.chat.say("/goal write the release notes")
    await harness.chat.wait_for_text("last two continuations added nothing new", timeout=30)
    await harness.idle(timeout=30)
    assert len(continuations(llm)) == 2
    [card] = goal_cards(harness.chat)
    assert card_status(card.text) == "⚠️ Failed"
    assert card_body(card.text) == (
        "Still working on it.\n\n🎯 Goal stopped: the last two continuations added nothing new."
    )
    assert "stopped (no progress)" in await harness.ask("/goal")


async def test_goal_shows_the_goal_and_its_last_evaluation_and_clear_clears_it(harness, llm):
    llm.default_reply = goal_model("stand_down", "it needs the user's credentials")
    await harness.chat.say("/goal deploy the app")
    await harness.chat.wait_for_text("Standing down from the goal: it needs the user's credentials")
    await harness.idle()
    assert continuations(llm) == []
    [card] = goal_cards(harness.chat)  # the first answer is the reply to /goal; the card has the verdict
    assert card_status(card.text) == "⚠️ Failed"
    assert card_body(card.text) == "🎯 Standing down from the goal: it needs the user's credentials"
    shown = await harness.ask("/goal")
    assert shown.startswith("🎯 Goal: deploy the app\nStatus: stood down")
    assert "Last evaluation: stand down: it needs the user's credentials" in shown
    assert "Goal: deploy the app (stood down)" in await harness.ask("/status")
    assert await harness.ask("/goal clear") == "🎯 Goal cleared."
    assert await harness.ask("/goal") == "No goal is set. Start one with /goal OBJECTIVE."
    assert "Goal: none" in await harness.ask("/status")


async def test_a_satisfied_goal_ends_with_its_card_done(tmp_path, llm):
    llm.default_reply = goal_model("satisfied", "the tests pass")
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        await h.chat.say("/goal make the tests pass")
        card = await h.chat.wait_for_text("🎯 Goal reached: the tests pass")
        await h.idle()
        assert card_status(card.text) == "✅ Done"
        assert goal_cards(h.chat) == [card]
        assert "reached" in await h.ask("/goal")


async def test_stop_during_a_goal_turn_pauses_the_goal(harness, llm):
    llm.default_reply = goal_model("continue", "keep going")
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "sleep 30"})]))
    await harness.chat.say("/goal index the repository")
    await harness.chat.wait_for_text("⏳ running `sleep 30`…")
    await harness.chat.say("/stop")
    card = await harness.chat.wait_for_text("🎯 Goal paused: stopped with /stop")
    await harness.idle()
    assert continuations(llm) == []
    assert card_status(card.text) == "⏹ Stopped"
    assert "Status: paused" in await harness.ask("/goal")


async def test_stop_during_a_goal_step_ends_its_card_paused(harness, llm):
    started: list[bool] = []

    def work(body):  # type: ignore[no-untyped-def]
        if last_user_text(body).startswith("[Goal continuation 1/") and not started:
            started.append(True)
            return Reply(tool_calls=[ToolCall("bash", {"command": "sleep 30"})])
        return echo_reply(body)

    llm.default_reply = goal_model("continue", "keep going", work=work)
    await harness.chat.say("/goal index the repository")
    await harness.chat.wait_for(
        lambda c: any("step 1 of 8 · running `sleep 30`" in card_status(m.text) for m in goal_cards(c)), 30
    )
    await harness.chat.say("/stop")
    card = await harness.chat.wait_for_text("🎯 Goal paused: stopped with /stop", timeout=30)
    await harness.idle()
    assert goal_cards(harness.chat) == [card]
    assert card_status(card.text) == "⏹ Stopped"
    assert [c.split("]")[0] for c in continuations(llm)] == ["[Goal continuation 1/8"], "no step after /stop"
    assert "Status: paused" in await harness.ask("/goal")
