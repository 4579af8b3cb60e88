"""Issue 36: a goal shows in its chat as one task card, edited in place, with a Stop button.

What a person notices on Telegram and Slack after ``/goal``: the reply to their message, then one card
that says which step of the goal runs (and which tool it runs), shows each step's answer as it streams,
says when a step waits for an approval, and ends once with the last answer and the verdict — never a
stream of "🎯 continuing…" messages, never a second card. ⏹ Stop on the card stops the goal; ``/tasks``
lists it. Real Telegram and Slack channels against the platforms' fakes, a real service, the fake model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.goals import EVALUATOR_MARKER
from tests.agent.helpers import system_text
from tests.agent.test_goals import continuations
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, last_user_text
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.harness import Harness
from tests.schedules.test_schedules import Clock
from tests.tasks import kit
from tests.tasks.kit import card_body, card_status, is_card
from tests.tasks.test_task_cards import CHAT, START, STOP, slack_bot, statuses, telegram_bot

pytestmark = pytest.mark.slow  # platform fakes and the fake model on real sockets

OBJECTIVE = "tidy the workspace"
FIRST = "I looked around: three loose files and two empty folders."
STEP_1 = "Moved the three loose files into archive/."
STEP_2 = "Deleted the two empty folders; the workspace is tidy."
REACHED = "🎯 Goal reached: the workspace is tidy"


def two_step_goal(*, tool_first: bool = False, step_1: Reply | None = None):  # type: ignore[no-untyped-def]
    """The model of a goal reached after two continuations; step 1 may call a tool before answering."""
    used_tool: list[bool] = []

    def reply(body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        if EVALUATOR_MARKER in system_text(body):
            done = STEP_2 in text  # the evaluator is shown the latest answer
            reason = "the workspace is tidy" if done else "the folders are left"
            return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": reason}))
        if text.startswith("[Goal continuation 1/8]"):
            if tool_first and not used_tool:
                used_tool.append(True)
                return Reply(tool_calls=[ToolCall("ls", {"path": "/mnt/user-data/workspace"})])
            return step_1 or Reply(text=STEP_1, chunk_size=4, delay=0.08)
        if text.startswith("[Goal continuation 2/8]"):
            return Reply(text=STEP_2, chunk_size=4, delay=0.08)
        return Reply(text=FIRST)

    return reply


def telegram_cards(tg: FakeTelegram) -> list[FakeMessage]:
    return kit.telegram_cards(tg, CHAT)


def goal_done(tg: FakeTelegram) -> bool:
    return any("✅ Done" in card_status(m.text) for m in telegram_cards(tg))


async def goal_to_its_end(h: Harness, tg: FakeTelegram) -> None:
    """Set the goal and wait until its card says it is done and the service has nothing left to do."""
    tg.user_message(CHAT, f"/goal {OBJECTIVE}", user_id=CHAT)
    await tg.wait_until(lambda: goal_done(tg), 60)
    await h.idle(timeout=30)


async def test_a_goal_runs_in_one_telegram_card_from_its_first_step_to_its_verdict(
    tmp_path, llm: FakeOpenAI
) -> None:
    llm.default_reply = two_step_goal(tool_first=True)
    async with telegram_bot(tmp_path, llm, Clock(START)) as (h, tg):
        await goal_to_its_end(h, tg)
        [card] = telegram_cards(tg)
        texts = [m.text for m in tg.bot_messages(CHAT)]
        posts = kit.telegram_card_posts(tg)
        with_stop = [
            c
            for c in tg.calls("editMessageText") + tg.calls("sendMessage")
            if str(c["params"].get("message_id", "")) == str(card.message_id) and STOP in str(c["params"])
        ]
        short = card.text.split(":")[0].split()[-1]
        tg.user_message(CHAT, "/tasks", user_id=CHAT)
        listing = await tg.wait_for_bot_text(CHAT, "Tasks in this chat")
    assert texts.index(FIRST) < texts.index(card.text), "the reply to /goal comes first, then the card"
    assert posts == 1, "one card, posted once and then edited"
    assert card.history[0].startswith(f"🗂 Goal {short}: {OBJECTIVE}")
    steps = [card_status(v) for v in card.history]
    assert "▶️ Running — step 1 of 8" in steps
    assert any(s.startswith("▶️ Running — step 1 of 8 · ") for s in steps), "the card names the step's tool"
    assert "▶️ Running — step 2 of 8" in steps
    assert any(card_body(v) == STEP_1 for v in card.history), "step 1's answer showed in the card"
    assert statuses(card.history)[-1] == "✅ Done"
    assert card_body(card.text) == f"{STEP_2}\n\n{REACHED}"
    assert sum(STEP_2 in t for t in texts) == 1, "the final answer arrived once"
    assert not any(t.startswith("🎯 continuing") or t.startswith("🎯 Goal reached") for t in texts)
    assert with_stop, "the running card carried a Stop button"
    assert card.buttons == [], "no Stop button on the finished card"
    assert f"{short} · Goal: {OBJECTIVE} · ✅ Done" in listing.text


async def test_stop_on_a_goal_card_stops_the_goal_and_its_running_step(tmp_path, llm: FakeOpenAI) -> None:
    long_step = Reply(text=" ".join(f"word{i}" for i in range(400)), chunk_size=8, delay=0.05)
    llm.default_reply = two_step_goal(step_1=long_step)
    async with telegram_bot(tmp_path, llm, Clock(START)) as (h, tg):
        tg.user_message(CHAT, f"/goal {OBJECTIVE}", user_id=CHAT)
        live = await tg.wait_until(
            lambda: next((m for m in telegram_cards(tg) if m.buttons == [STOP] and "word20" in m.text), None),
            60,
        )
        tg.press(CHAT, live.message_id, STOP, user_id=CHAT)
        await tg.wait_until(lambda: "⏹ Stopped" in card_status(live.text), 30)
        await h.idle(timeout=30)
        tg.user_message(CHAT, "/goal", user_id=CHAT)
        status = await tg.wait_for_bot_text(CHAT, "Status:")
        cards = telegram_cards(tg)
    assert cards == [live]
    assert card_status(live.text) == "⏹ Stopped"
    assert card_body(live.text).endswith(
        f"🎯 Goal paused: stopped with ⏹ Stop. Send /goal {OBJECTIVE} to resume."
    )
    assert "word399" not in live.text, "the running step was stopped"
    assert live.buttons == []
    assert [c.split("]")[0] for c in continuations(llm)] == ["[Goal continuation 1/8"], "no step after Stop"
    assert "Status: paused" in status.text


async def test_a_goal_card_says_waiting_for_approval_while_its_steps_risky_command_waits(
    tmp_path, llm: FakeOpenAI
) -> None:
    risky = "rm -rf /mnt/user-data/workspace/build"
    asked: list[bool] = []
    plain = two_step_goal()

    def reply(body: dict[str, Any]) -> Reply:
        if last_user_text(body).startswith("[Goal continuation 1/8]") and not asked:
            asked.append(True)
            return Reply(tool_calls=[ToolCall("bash", {"command": risky})])
        return plain(body)

    llm.default_reply = reply
    async with telegram_bot(tmp_path, llm, Clock(START), sandbox={"mode": "host"}) as (h, tg):
        tg.user_message(CHAT, f"/goal {OBJECTIVE}", user_id=CHAT)
        request = await tg.wait_for_bot_text(CHAT, "🔐 Approval needed", timeout=60)
        card = await tg.wait_until(
            lambda: next(
                (m for m in telegram_cards(tg) if "✋ Waiting for approval" in card_status(m.text)), None
            ),
            15,
        )
        waiting = card_status(card.text)
        tg.press(CHAT, request.message_id, "Approve", user_id=CHAT)
        await tg.wait_until(lambda: "✅ Done" in card.text, 60)
        await h.idle(timeout=30)
    assert waiting.startswith("✋ Waiting for approval — step 1 of 8 · ") and risky in waiting
    assert statuses(card.history) == ["▶️ Running", "✋ Waiting for approval", "▶️ Running", "✅ Done"]
    assert card_body(card.text) == f"{STEP_2}\n\n{REACHED}"


async def test_a_goal_runs_in_one_slack_card(tmp_path, llm: FakeOpenAI) -> None:
    llm.default_reply = two_step_goal()
    async with slack_bot(tmp_path, llm, Clock(START)) as (h, slack):
        slack.dm("U1", f"/goal {OBJECTIVE}")
        card = await slack.wait_for_text("✅ Done", "DU1", timeout=60)
        await h.idle(timeout=30)
        cards = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
        posts = [c for c in slack.calls_to("chat.postMessage") if is_card(str(c.args.get("text", "")))]
        updates = [c for c in slack.calls_to("chat.update") if c.args.get("ts") == card.ts]
        texts = [m.text for m in slack.channel_messages("DU1")]
    assert cards == [card]
    assert len(posts) == 1, "the card was posted once and then only updated"
    assert "▶️ Running — step 2 of 8" in [card_status(v) for v in card.history]
    assert any(card_body(v) == STEP_1 for v in card.history)
    assert any(STOP in str(u.args.get("blocks", "")) for u in updates), "the running card had a Stop button"
    assert card_body(card.text) == f"{STEP_2}\n\n{REACHED}"
    assert sum(STEP_2 in t for t in texts) == 1
    assert card.labels == []


async def test_a_question_asked_while_a_goal_runs_is_answered_apart_and_the_goal_keeps_one_card(
    tmp_path, llm: FakeOpenAI
) -> None:
    """The goal also judges the person's own turns on its thread; their answers are plain replies and
    any step they lead to runs in the goal's one card."""
    question = "what time is it"
    plain = two_step_goal(step_1=Reply(text=STEP_1, chunk_size=2, delay=0.15))

    def reply(body: dict[str, Any]) -> Reply:
        if last_user_text(body) == question and EVALUATOR_MARKER not in system_text(body):
            return Reply(text="It is eight o'clock.")
        return plain(body)

    llm.default_reply = reply
    async with telegram_bot(tmp_path, llm, Clock(START)) as (h, tg):
        tg.user_message(CHAT, f"/goal {OBJECTIVE}", user_id=CHAT)
        await tg.wait_until(lambda: any("Moved" in card_body(m.text) for m in telegram_cards(tg)), 60)
        tg.user_message(CHAT, question, user_id=CHAT)  # waits behind step 1, then is judged too
        await tg.wait_until(lambda: goal_done(tg), 60)
        await h.idle(timeout=30)
        cards = telegram_cards(tg)
        texts = [m.text for m in tg.bot_messages(CHAT)]
    assert len(cards) == 1, [c.text for c in cards]
    assert "It is eight o'clock." in texts, "the question got its own reply"
    assert card_body(cards[0].text) == f"{STEP_2}\n\n{REACHED}"


async def test_a_step_answer_longer_than_a_message_leaves_no_stale_message_behind(
    tmp_path, llm: FakeOpenAI
) -> None:
    """While the goal runs its card stays one message (a long step answer is cut with …), so the next,
    shorter step cannot leave the tail of the long one behind in a second message."""
    long_answer = " ".join(f"line{i}" for i in range(1200))  # about 11,000 characters
    llm.default_reply = two_step_goal(step_1=Reply(text=long_answer, chunk_size=600, delay=0.02))
    async with telegram_bot(tmp_path, llm, Clock(START)) as (h, tg):
        await goal_to_its_end(h, tg)
        [card] = telegram_cards(tg)
        texts = [m.text for m in tg.bot_messages(CHAT)]
    assert any(card_body(v).startswith("line0 line1") and v.endswith("…") for v in card.history)
    assert not any("line1199" in t for t in texts), "no message kept the long answer's tail"
    assert all(len(v) <= 4096 for v in card.history)
    assert card_body(card.text) == f"{STEP_2}\n\n{REACHED}"
