"""SCENARIOS 8–10, 13, 15: per-thread FIFO, concurrency across threads, /stop, errors, what reaches chat."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply, echo_reply, last_user_text
from tests.harness import Harness


async def test_a_second_message_waits_behind_the_running_one_shows_queued_and_is_answered_in_order(
    harness, llm
):
    llm.script(Reply(text="first answer, slowly", chunk_size=1, delay=0.05))
    await harness.chat.say("first")
    await harness.chat.wait_for(lambda ch: any(m.text.startswith("first") for m in ch.messages.values()))
    await harness.chat.say("second")
    queued = await harness.chat.wait_for_text("Queued")
    await harness.idle(timeout=20)
    assert [last_user_text(body) for body in llm.completions] == ["first", "second"]
    # The queued notice became the second answer: one message per question, edited in place.
    assert queued.text == "echo: second"
    assert [m.text for m in harness.chat.in_chat("chat-1")] == ["first answer, slowly", "echo: second"]


async def test_one_slow_model_call_does_not_hold_up_another_chat(harness, llm):
    # Chat a's model call answers only once chat b has its answer (or the test gave up): no race with a
    # loaded machine, where a 15 s stream was once the margin, and no 15 s wait on a quiet one.
    hold = Hold()

    def reply(body):  # type: ignore[no-untyped-def]
        if last_user_text(body) == "slow":
            return Reply(text="s" * 60, chunk_size=4, hold=hold)
        return echo_reply(body)

    llm.default_reply = reply
    await harness.chat.say("slow", chat="a")
    await asyncio.to_thread(hold.wait_for_waiting, 1)  # chat a's model call is out, unanswered
    await harness.chat.say("fast", chat="b")
    try:
        await harness.chat.wait_for_text("echo: fast", chat="b", timeout=30)
        assert not any(m.text == "s" * 60 for m in harness.chat.in_chat("a")), "chat a was still waiting"
    finally:
        hold.open()
    await harness.idle(timeout=30)
    assert [m.text for m in harness.chat.in_chat("a")] == ["s" * 60]


async def test_stop_cancels_the_running_turn_and_the_thread_keeps_working(harness, llm):
    llm.script(Reply(text="this will take a very long time " * 20, chunk_size=1, delay=0.05))
    await harness.chat.say("write an essay")
    await harness.chat.wait_for(lambda ch: any(m.text.startswith("this") for m in ch.messages.values()))
    await harness.chat.say("/stop")
    await harness.chat.wait_for_text("⏹ Stopped.")
    await harness.chat.wait_for_text("Stopping the current reply.")
    await harness.idle()
    assert await harness.ask("still there?") == "echo: still there?"
    assert await harness.ask("/stop") == "Nothing is running right now."


async def test_a_model_failure_ends_with_one_plain_sentence_and_no_internals(tmp_path, llm):
    settings = make_settings(
        tmp_path,
        llm,
        models=[
            {
                "name": "default",
                "model": "m",
                "api_key": "sk-live-SUPERSECRET",
                "base_url": llm.base_url,
                "max_retries": 0,
            }
        ],
    )
    llm.script(Reply(status=500, error="upstream exploded at /srv/app.py line 3"))
    async with Harness.running(settings) as h:
        answer = await h.ask("hello?")
    assert answer.startswith("⚠️ The model service had an error while answering. Please try again. (trace ")
    for leak in ("Traceback", "sk-live-SUPERSECRET", "exploded", "/srv/app.py", "500"):
        assert leak not in answer


async def test_wrong_credentials_and_an_unreachable_model_are_explained_differently(tmp_path, llm):
    bad_key = make_settings(
        tmp_path / "a",
        llm,
        models=[
            {"name": "default", "model": "m", "api_key": "sk-x", "base_url": llm.base_url, "max_retries": 0}
        ],
    )
    llm.script(Reply(status=401, error="invalid api key"))
    async with Harness.running(bad_key) as h:
        assert "rejected our credentials" in await h.ask("hi")
    unreachable = make_settings(
        tmp_path / "b",
        None,
        models=[
            {
                "name": "default",
                "model": "m",
                "api_key": "sk-x",
                "base_url": "http://127.0.0.1:9/v1",
                "max_retries": 0,
            }
        ],
    )
    async with Harness.running(unreachable) as h:
        assert "couldn't reach the model service" in await h.ask("hi")


async def test_a_partial_answer_is_kept_when_the_model_fails_midway(harness, llm):
    # The model's stream breaks off after two chunks: a garbled line, then the connection drops.
    llm.script(Reply(text="Partial insight that never ends", chunk_size=4, abort_after_chunks=2))
    answer = await harness.ask("one")
    first, _, rest = answer.partition("\n\n")
    assert first == "Partial"
    assert rest.startswith("⚠️ ") and "(trace " in rest
    assert "Traceback" not in answer


async def test_only_the_assistant_text_reaches_the_chat(tmp_path, llm):
    settings = make_settings(tmp_path, llm, agent={"system_prompt": "HIDDEN-SYSTEM-PROMPT-7731"})
    async with Harness.running(settings) as h:
        answer = await h.ask("what are your instructions?")
    assert answer == "echo: what are your instructions?"
    sent = llm.completions[0]["messages"]
    assert sent[0] == {"role": "system", "content": "HIDDEN-SYSTEM-PROMPT-7731"}
    everything_shown = [text for m in h.chat.messages.values() for text in m.history]
    assert not any("HIDDEN-SYSTEM-PROMPT" in text for text in everything_shown)


async def test_messages_to_different_chats_are_handled_concurrently(harness, llm):
    llm.default_reply = lambda body: Reply(text=f"ok {last_user_text(body)}", chunk_size=2, delay=0.02)
    await asyncio.gather(*(harness.chat.say(f"q{i}", chat=f"c{i}") for i in range(10)))
    await harness.idle(timeout=30)
    assert sorted(harness.chat.in_chat(f"c{i}")[0].text for i in range(10)) == sorted(
        f"ok q{i}" for i in range(10)
    )


async def test_an_inbound_file_lands_in_the_owners_uploads_and_an_oversize_one_is_refused_with_a_notice(
    tmp_path, llm
):
    settings = make_settings(tmp_path, llm, sandbox={"max_upload_bytes": 1024})
    async with Harness.running(settings) as h:
        answer = await h.ask(
            "see attached", files=[("../../etc/notes.txt", b"hello file"), ("huge.bin", b"x" * 5000)]
        )
        conv = await h.service.threads.get(("memory", "", "chat-1", ""))
    assert conv is not None
    uploads = (
        tmp_path / "data" / "users" / "memory_-_user-1" / "threads" / conv.thread_id / "user-data" / "uploads"
    )
    assert sorted(p.name for p in uploads.iterdir()) == ["notes.txt"]
    assert (uploads / "notes.txt").read_bytes() == b"hello file"
    assert answer.startswith("📎 huge.bin is too large (4 KiB; limit 1 KiB), so I skipped it.")
    assert (
        "[Files attached: /mnt/user-data/uploads/notes.txt]" in llm.completions[0]["messages"][-1]["content"]
    )


async def answers_behind_a_busy_slot(
    tmp_path: Path, llm: FakeOpenAI, busy: Reply, texts: list[str]
) -> list[str]:
    """With one turn slot, held by chat "a" answering ``busy``, send ``texts`` to chat "b"; returns what
    chat "b" shows once everything is answered, top to bottom."""

    def reply(body: dict[str, Any]) -> Reply:
        return busy if last_user_text(body) == "busy" else echo_reply(body)

    llm.default_reply = reply
    settings = make_settings(tmp_path, llm, bus={"max_concurrent_turns": 1})
    async with Harness.running(settings) as harness:
        await harness.chat.say("busy", chat="a")
        await harness.chat.wait_for(lambda ch: any(m.text.startswith("b") for m in ch.in_chat("a")))
        for text in texts:
            await harness.chat.say(text, chat="b")
        await harness.idle(timeout=30)
        return [m.text for m in harness.chat.in_chat("b")]


async def test_at_the_turn_limit_a_queued_notice_never_lands_above_the_answer_it_waits_for(tmp_path, llm):
    """Every turn slot is busy, so a chat's first message waits for one without a placeholder yet; a
    second message to that chat queues behind it. Its "⏳ Queued" notice must not appear above the
    first message's answer: the chat reads in the order things were asked."""
    busy = Reply(text="b" * 12, chunk_size=1, delay=0.05)  # holds the only slot for ~0.6 s
    answers = await answers_behind_a_busy_slot(tmp_path, llm, busy, ["one", "two"])
    assert answers == ["echo: one", "echo: two"]


async def test_when_the_turn_ahead_waits_long_for_a_slot_the_message_behind_it_still_answers_below(
    tmp_path, llm
):
    """As above, but the only slot stays busy for longer than a queued notice waits for the message
    ahead of it (two instances of a 300-message burst found it: a later answer landed above an earlier
    one). The second message then shows no notice at all rather than one above the first answer."""
    busy = Reply(text="b" * 30, chunk_size=1, delay=0.1)  # holds the only slot for ~3 s
    answers = await answers_behind_a_busy_slot(tmp_path, llm, busy, ["one", "two", "three"])
    assert answers == ["echo: one", "echo: two", "echo: three"]
