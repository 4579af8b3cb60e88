"""SCENARIO 55: a thread longer than the model's context keeps answering; ``/compact`` forces it.

The fake model has a small context window and refuses bigger requests with the real OpenAI error
(400, ``context_length_exceeded``), counting tokens its own way — not with the runtime's estimate.
"""

from __future__ import annotations

from typing import Any

from agent.context import SUMMARY_MARKER
from tests.agent.helpers import agent_settings, everything_shown, system_text
from tests.fakes.openai_server import Reply, ToolCall, accepted, echo_reply, last_user_text, request_tokens
from tests.harness import Harness

LIMIT = 3000


def small_model_settings(tmp_path, llm, context_tokens: int = LIMIT):  # type: ignore[no-untyped-def]
    models = [
        {
            "name": "small",
            "model": "fake-small",
            "api_key": "sk-test",
            "base_url": llm.base_url,
            "context_tokens": context_tokens,
            "max_retries": 0,
        }
    ]
    return agent_settings(tmp_path, llm, models=models)


def summarising(body: dict[str, Any]) -> Reply:
    """Summariser requests get a summary naming the earliest turn they saw; the rest are echoed."""
    if SUMMARY_MARKER in system_text(body):
        seen = [line for line in last_user_text(body).splitlines() if line.startswith("User: turn ")]
        first = seen[0].split(":")[1].strip().split(" ")[1] if seen else "?"
        return Reply(text=f"SUMMARY-NOTE: the user has been sending numbered turns since turn {first}.")
    return echo_reply(body)


def chat_bodies(llm) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return [b for b in accepted(llm) if SUMMARY_MARKER not in system_text(b)]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


async def test_a_forty_turn_conversation_keeps_answering_within_a_small_context(tmp_path, llm):
    llm.context_limit = LIMIT
    llm.default_reply = summarising
    padding = ("lorem ipsum dolor sit amet " * 12).strip()
    async with Harness.running(small_model_settings(tmp_path, llm)) as h:
        for n in range(1, 41):
            answer = await h.ask(f"turn {n} {padding}", message_id=f"t{n}")
            assert answer == f"echo: turn {n} {padding}", f"turn {n}: {answer}"
        state = await h.service.agent.thread_messages(  # type: ignore[union-attr]
            (await h.service.threads.get(h.chat.make_message("").conversation_key)).thread_id  # type: ignore[union-attr]
        )
    last = chat_bodies(llm)[-1]
    # The model got the summary plus the latest turns, inside its window.
    assert request_tokens(last) <= LIMIT
    assert "SUMMARY-NOTE: the user has been sending numbered turns" in system_text(last)
    assert user_texts(last)[-1].startswith("turn 40 ")
    assert next(m["role"] for m in last["messages"] if m["role"] != "system") == "user"
    assert not any(t.startswith("turn 1 ") for t in user_texts(last))
    # The checkpoint holds the recent turns only, not all 80 messages.
    assert 2 <= len(state) < 30
    # The summariser's words never reach the chat.
    assert not any("SUMMARY-NOTE" in text for text in everything_shown(h.chat))


async def test_compact_summarises_older_turns_and_the_next_answer_uses_the_summary(tmp_path, llm):
    llm.default_reply = summarising
    async with Harness.running(small_model_settings(tmp_path, llm, context_tokens=100_000)) as h:
        for n in range(1, 4):
            await h.ask(f"turn {n} about kiwis", message_id=f"c{n}")
        assert not [b for b in llm.completions if SUMMARY_MARKER in system_text(b)]  # nothing forced it yet
        reply = await h.ask("/compact", message_id="c-compact")
        assert reply.startswith("🗜 Compacted: 4 earlier message(s) are now a summary")
        await h.ask("and now?", message_id="c-next")
        again = await h.ask("/compact", message_id="c-again")
    body = chat_bodies(llm)[-1]
    assert "SUMMARY-NOTE: the user has been sending numbered turns since turn 1." in system_text(body)
    # Kept: the last turn (user + answer) and the new question.
    assert user_texts(body) == ["turn 3 about kiwis", "and now?"]
    assert again.startswith("🗜 Compacted: 2 earlier message(s)")


async def test_compact_on_a_short_conversation_says_there_is_nothing_to_do(harness):
    assert await harness.ask("/compact") == "Nothing to compact yet: this conversation is already short."
    assert "/compact — summarise the older part" in await harness.ask("/help")


async def test_an_overflow_the_estimate_missed_is_compacted_and_retried_once(tmp_path, llm):
    llm.default_reply = summarising
    async with Harness.running(small_model_settings(tmp_path, llm, context_tokens=100_000)) as h:
        for n in range(1, 5):
            await h.ask(f"turn {n} about plums " + "and more plums " * 20, message_id=f"o{n}")
        # The provider's real window turns out smaller than configured: the next request is refused.
        llm.context_limit = request_tokens(chat_bodies(llm)[-1]) - 50
        answer = await h.ask("what now?", message_id="o5")
    assert answer == "echo: what now?"
    assert len(llm.rejected) == 1
    retried = chat_bodies(llm)[-1]
    assert request_tokens(retried) <= llm.context_limit
    assert "SUMMARY-NOTE" in system_text(retried)
    assert user_texts(retried)[-1] == "what now?"


async def test_when_even_a_compacted_thread_is_too_long_the_user_is_told_what_to_do(tmp_path, llm):
    llm.default_reply = summarising
    async with Harness.running(small_model_settings(tmp_path, llm, context_tokens=100_000)) as h:
        await h.ask("turn 1 about figs", message_id="f1")
        llm.context_limit = 600  # smaller than the system prompt and tools alone
        answer = await h.ask("turn 2 about figs", message_id="f2")
        assert answer.startswith("⚠️ This conversation is too long for model small — send /new or /compact.")
        # The first try and exactly one retry after compacting (the summariser's request fitted).
        assert [SUMMARY_MARKER in system_text(b) for b in llm.rejected] == [False, False]
        assert "SUMMARY-NOTE" in system_text(llm.rejected[-1])


async def test_a_tool_call_is_never_separated_from_its_result_when_compacting(tmp_path, llm):
    llm.default_reply = summarising
    async with Harness.running(small_model_settings(tmp_path, llm, context_tokens=100_000)) as h:
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "echo one"})]),
            Reply(tool_calls=[ToolCall("bash", {"command": "echo two"})]),
            Reply(text="ran both"),
        )
        await h.ask("run two things", message_id="tc1")
        llm.context_limit = request_tokens(chat_bodies(llm)[-1]) - 20
        await h.ask("turn 2 and more", message_id="tc2")
    body = chat_bodies(llm)[-1]
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    calls = {c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"}
    assert calls == results  # every call sent has its result, and no result lacks its call
    assert roles[0] != "tool"
    assert "SUMMARY-NOTE" in system_text(body)  # something was compacted


def test_the_kept_part_starts_at_a_user_message_and_never_splits_a_tool_call_from_its_result():
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from agent.context import messages_tokens, split_for_budget

    call = {"name": "bash", "args": {"command": "ls " + "x" * 200}, "id": "c1"}
    thread = [
        HumanMessage("first question " * 20, id="h1"),
        AIMessage("", tool_calls=[call], id="a1"),
        ToolMessage("result " * 50, tool_call_id="c1", id="t1"),
        AIMessage("first answer", id="a2"),
        HumanMessage("second question", id="h2"),
        AIMessage("second answer", id="a3"),
    ]
    # Room for the tool call, its result and everything after it, but not the first question.
    budget = messages_tokens(thread[1:]) + 5
    split = split_for_budget(thread, budget)
    assert [m.id for m in split.recent] == ["h2", "a3"]  # not a history opening with the assistant
    assert [m.id for m in split.old] == ["h1", "a1", "t1", "a2"]
    # Room for the tool result but not its call: the result goes with the call, into the summary.
    tight = split_for_budget(thread, messages_tokens(thread[2:]))
    assert [m.id for m in tight.old] == ["h1", "a1", "t1", "a2"]
