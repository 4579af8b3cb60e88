"""SCENARIO 56: goal continuations are durable work.

A step never runs in a thread started by ``/new`` or after ``/goal clear``; ``/goal`` and ``/status``
agree about a step's state; "Send /goal X to resume" keeps the count. Restarts (kill -9 and SIGTERM) run
the real ``switchboard chat`` process and check every step is answered exactly once, and that the goal's
task card (issue 36) is printed once, when it ends, with the last step's answer and the verdict: a piped
terminal prints a message when it is final, and a goal's steps stream into its one card.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.goals import EVALUATOR_MARKER
from tests.agent.helpers import agent_settings, everything_shown, system_text
from tests.agent.test_goals import continuations, goal_cards, goal_model
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply, last_user_text
from tests.harness import Harness
from tests.tasks.kit import card_body, card_status, is_card

STEP_1 = "▶️ Running — step 1 of 8"


def on_step(chat, status: str):  # type: ignore[no-untyped-def]
    """Wait until the goal's card shows ``status`` (a step queued or running)."""
    return chat.wait_for(lambda c: any(card_status(m.text) == status for m in goal_cards(c)), 20)


def slow_on(prefix: str, delay: float = 0.1, chunks: int = 30):  # type: ignore[no-untyped-def]
    """Work replies: echo, but slowly (``chunks`` × ``delay``) for the request starting with ``prefix``."""

    def work(body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        if text.startswith(prefix):
            return Reply(text=("working " * chunks).strip(), chunk_size=8, delay=delay)
        return echo_reply(body)

    return work


async def test_new_during_a_goal_runs_nothing_in_the_new_thread_and_closes_the_goal(tmp_path, llm):
    llm.default_reply = goal_model("continue", "more to do", work=slow_on("[Goal continuation 1/"))
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        old = await h.service.threads.get_or_create(
            h.chat.make_message("").conversation_key, "memory:-:user-1"
        )
        await h.chat.say("/goal sort the photos")
        await on_step(h.chat, STEP_1)
        await h.chat.wait_for(lambda c: any(card_body(t).startswith("working") for t in everything_shown(c)))
        await h.chat.say("/new")
        card = await h.chat.wait_for_text(
            "Goal closed: the conversation moved to a new thread (/new)", timeout=20
        )
        await h.idle(timeout=20)
        assert goal_cards(h.chat) == [card]
        assert card_status(card.text) == "⏹ Stopped"
        new = await h.service.threads.get(h.chat.make_message("").conversation_key)
        assert new is not None and new.thread_id != old.thread_id
        assert await h.service.agent.thread_messages(new.thread_id) == []  # type: ignore[union-attr]
        assert await h.ask("/goal") == "No goal is set. Start one with /goal OBJECTIVE."
        closed = await h.service.agent.goals.store.get(old.thread_id)  # type: ignore[union-attr]
    assert [c.split("]")[0] for c in continuations(llm)] == ["[Goal continuation 1/8"]
    assert closed is not None and closed.status == "closed"
    assert closed.last_reason == "the conversation moved to a new thread (/new)"


async def test_goal_clear_while_a_continuation_is_queued_means_it_never_runs(tmp_path, llm):
    def work(body: dict[str, Any]) -> Reply:
        if last_user_text(body).startswith("New goal:"):
            return Reply(text="started " * 10, chunk_size=4, delay=0.05)
        if last_user_text(body) == "meanwhile":
            return Reply(text="answering meanwhile " * 10, chunk_size=4, delay=0.05)
        return echo_reply(body)

    llm.default_reply = goal_model("continue", "keep going", work=work)
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        await h.chat.say("/goal file the taxes")
        await h.chat.wait_for(lambda c: any(t.startswith("started") for t in everything_shown(c)))
        await h.chat.say("meanwhile")  # queued behind the goal turn; the continuation queues behind it
        await on_step(h.chat, STEP_1)
        # Commands answer at once, while the lane is busy (h.ask would wait for everything to finish).
        await h.chat.say("/status", message_id="s1")
        await h.chat.wait_for_text(
            "Goal: file the taxes (working on it, continuation 1 queued; 1/8 continuations)"
        )
        await h.chat.say("/goal", message_id="g1")
        await h.chat.wait_for_text("Status: working on it, continuation 1 queued — 1/8 continuations used")
        await h.chat.say("/goal clear", message_id="g2")
        await h.chat.wait_for_text("🎯 Goal cleared.")
        card = await h.chat.wait_for_text("🎯 Not continuing the goal: the goal was cleared.", timeout=20)
        await h.idle(timeout=20)
        assert is_card(card.text) and card_status(card.text) == "⏹ Stopped"
    assert continuations(llm) == []
    assert not any("Goal continuation" in last_user_text(b) for b in llm.completions)


async def test_resending_a_paused_goal_resumes_it_with_its_count(tmp_path, llm):
    llm.default_reply = goal_model("continue", "keep going", work=lambda body: Reply(text="Same again."))
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        await h.chat.say("/goal write the release notes")
        await h.chat.wait_for_text("last two continuations added nothing new", timeout=30)
        await h.idle(timeout=20)
        assert "Goal: write the release notes (stopped (no progress))" in await h.ask(
            "/status", message_id="s"
        )
        assert "Status: stopped (no progress) — 2/8 continuations used" in await h.ask(
            "/goal", message_id="g"
        )
        llm.default_reply = goal_model("satisfied", "the notes are written")
        resumed = await h.ask("/goal write the release notes", message_id="r")
        assert resumed.startswith("🎯 Goal resumed: write the release notes (2/8 continuations used)")
        await h.chat.wait_for_text("🎯 Goal reached: the notes are written")
        await h.idle()
        # The resumed goal is a new run with its own card; the first one ended when it stopped.
        first, second = goal_cards(h.chat)
        assert card_status(first.text) == "⚠️ Failed"
        assert card_status(second.text) == "✅ Done" and "🎯 Goal reached" in second.text
        assert "Status: reached — 2/8 continuations used" in await h.ask("/goal", message_id="g2")


# --- restarts: the real `switchboard chat` process ---------------------------------------------------


def chat_config(tmp_path: Path, llm: FakeOpenAI) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: sk-fake, base_url: '{llm.base_url}', "
        "max_retries: 0}]\n"
        "memory: {enabled: false}\n"
        "bus: {drain_seconds: 20}\n"
    )
    return path


def chat_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "bot", "--log-level", "WARNING", "chat", "--config", str(config)]


def three_step_goal(slow_step: int):  # type: ignore[no-untyped-def]
    """Continue until step 3 has answered, then satisfied; step ``slow_step`` answers slowly."""

    def reply(body: dict[str, Any]) -> Reply:
        if EVALUATOR_MARKER in system_text(body):
            done = "[Goal continuation 3/8]" in last_user_text(body)
            return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": "next"}))
        text = last_user_text(body)
        if text.startswith(f"[Goal continuation {slow_step}/8]"):
            return Reply(text=f"step {slow_step} done " + "." * 40, chunk_size=2, delay=0.1)
        return echo_reply(body)

    return reply


def wait_for_request(llm: FakeOpenAI, prefix: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(last_user_text(b).startswith(prefix) for b in llm.completions):
            return
        time.sleep(0.05)
    raise AssertionError(f"the model was never asked {prefix!r}")


def step_requests(llm: FakeOpenAI) -> list[str]:
    return [c.split("]")[0] + "]" for c in continuations(llm)]


def answered_steps(tmp_path: Path) -> dict[int, tuple[str, str]]:
    """Each recorded goal step: number → (status, the answer it delivered)."""
    with sqlite3.connect(tmp_path / "data" / "sb.db") as db:
        rows = db.execute("SELECT number, status, reply_text FROM agent_goal_continuations").fetchall()
    return {number: (status, text or "") for number, status, text in rows}


def the_card(stdout: str) -> str:
    """The goal's card as the terminal printed it (once, when it ended)."""
    assert stdout.count("🗂 Goal ") == 1, stdout
    return stdout[stdout.index("🗂 Goal ") :]


@pytest.mark.slow
def test_a_goal_killed_mid_step_resumes_after_restart_and_each_step_is_answered_once(tmp_path, llm):
    llm.default_reply = three_step_goal(slow_step=2)
    command = chat_command(chat_config(tmp_path, llm))
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"/goal count to three\n")
        proc.stdin.flush()
        wait_for_request(llm, "[Goal continuation 2/8]")
        time.sleep(0.5)  # step 2 is streaming now
    finally:
        proc.kill()  # SIGKILL: no cleanup at all
        first_out = proc.communicate(timeout=10)[0].decode()
    assert answered_steps(tmp_path)[2][0] == "running"  # killed before step 2 was delivered
    again = subprocess.run(command, input="", capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    everything = first_out + again.stdout
    steps = answered_steps(tmp_path)
    assert {n: status for n, (status, _) in steps.items()} == {0: "done", 1: "done", 2: "done", 3: "done"}
    assert steps[1][1].startswith("echo: [Goal continuation 1/8]")
    assert steps[2][1].startswith("step 2 done")
    card = the_card(everything)
    assert card.startswith("🗂 Goal ") and "\n✅ Done\n" in card
    assert everything.count("echo: [Goal continuation 3/8]") == 1, "the final answer, once, in the card"
    assert "🎯 Goal reached: next" in card
    # Step 2 was asked twice (its first answer died with the process); nothing else repeated.
    assert step_requests(llm) == [
        "[Goal continuation 1/8]",
        "[Goal continuation 2/8]",
        "[Goal continuation 2/8]",
        "[Goal continuation 3/8]",
    ]


@pytest.mark.slow
def test_sigterm_mid_goal_finishes_the_running_step_starts_no_new_one_and_resumes_after_restart(
    tmp_path, llm
):
    llm.default_reply = three_step_goal(slow_step=2)
    command = chat_command(chat_config(tmp_path, llm))
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"/goal count to three\n")
        proc.stdin.flush()
        wait_for_request(llm, "[Goal continuation 2/8]")
        proc.send_signal(signal.SIGTERM)
        # communicate() closes stdin, which also ends the terminal's reader thread.
        first_out, first_err = (b.decode() for b in proc.communicate(timeout=60))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, first_err
    # The running step was allowed to finish and be delivered; the next one was not started.
    status, answer = answered_steps(tmp_path)[2]
    assert status in ("answered", "done") and answer.startswith("step 2 done")
    assert "🗂 Goal " not in first_out, "the card is printed when the goal ends, not before"
    assert step_requests(llm) == ["[Goal continuation 1/8]", "[Goal continuation 2/8]"]
    again = subprocess.run(command, input="", capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "step 2 done" not in again.stdout
    card = the_card(again.stdout)
    assert "\n✅ Done\n" in card
    assert again.stdout.count("echo: [Goal continuation 3/8]") == 1
    assert "🎯 Goal reached: next" in card
    assert step_requests(llm) == [
        "[Goal continuation 1/8]",
        "[Goal continuation 2/8]",
        "[Goal continuation 3/8]",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "reply_being_judged", ["echo: New goal: count to three", "echo: [Goal continuation 1/8]"]
)
def test_a_goal_killed_while_its_last_answer_is_being_judged_resumes_with_the_judgement(
    tmp_path, llm, reply_being_judged
):
    plain = three_step_goal(slow_step=0)
    judged_slowly: list[str] = []

    def reply(body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        if EVALUATOR_MARKER in system_text(body) and reply_being_judged in text and not judged_slowly:
            judged_slowly.append(text)
            return Reply(text=json.dumps({"decision": "continue", "reason": "next"}), chunk_size=1, delay=0.3)
        return plain(body)

    llm.default_reply = reply
    command = chat_command(chat_config(tmp_path, llm))
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"/goal count to three\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 90
        while not judged_slowly and time.monotonic() < deadline:
            time.sleep(0.05)
        assert judged_slowly, "the evaluation never started"
        time.sleep(0.5)  # the answer is delivered; its judgement is streaming
    finally:
        proc.kill()
        first_out = proc.communicate(timeout=10)[0].decode()
    again = subprocess.run(command, input="", capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    everything = first_out + again.stdout
    assert everything.count("echo: New goal: count to three") == 1  # the reply to /goal itself
    steps = answered_steps(tmp_path)
    for step in (1, 2, 3):
        assert steps[step][1].startswith(f"echo: [Goal continuation {step}/8]"), steps
    card = the_card(everything)
    assert everything.count("echo: [Goal continuation 3/8]") == 1, everything
    assert "\n✅ Done\n" in card and "🎯 Goal reached: next" in card
    assert step_requests(llm) == [f"[Goal continuation {n}/8]" for n in (1, 2, 3)]
