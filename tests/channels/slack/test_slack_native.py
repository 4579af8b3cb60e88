"""Slack's native streaming (chat.startStream / appendStream / stopStream) and the assistant status."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from bot.manager import STOPPED_NOTE
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack import TEAM_ID, FakeSlack

from .conftest import running_bot

WORDS = " ".join(f"word{i}" for i in range(40))


def stream_methods(slack: FakeSlack) -> list[str]:
    return [c.method for c in slack.calls if c.method.startswith("chat.")]


async def test_a_thread_answer_streams_natively_and_is_stopped_with_the_final_text(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        mention = slack.mention("C1", "U1", "talk")
        await slack.wait_for_text("word39", "C1")
        await bot.harness.idle(timeout=30)

    [start] = slack.calls_to("chat.startStream")
    assert start.error is None
    assert start.args["thread_ts"] == mention["event"]["ts"], "the thread under the mention"
    assert start.args["recipient_user_id"] == "U1" and start.args["recipient_team_id"] == TEAM_ID
    assert len(slack.calls_to("chat.appendStream")) >= 1
    [stop] = slack.calls_to("chat.stopStream")
    assert stop.error is None
    assert slack.calls_to("chat.update") == [] and slack.calls_to("chat.postMessage") == []
    [message] = slack.channel_messages("C1")
    assert message.text == WORDS and message.stream == "stopped"
    assert all(not text.startswith("…") for text in message.history), "no placeholder was appended"


async def test_a_top_level_dm_keeps_chat_update_because_a_stream_needs_a_thread(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text="A plain DM answer.", chunk_size=4, delay=0.02))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        slack.dm("U1", "hi")
        await slack.wait_for_text("A plain DM answer.", "DU1")
        await bot.harness.idle(timeout=30)
    assert slack.calls_to("chat.startStream") == []
    assert len(slack.calls_to("chat.postMessage")) == 1


async def test_a_dm_thread_streams_without_recipient_fields(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text="In the DM thread.", chunk_size=4, delay=0.02))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        first = slack.dm("U1", "root")
        root_ts = first["event"]["ts"]
        await bot.harness.idle(timeout=30)
        llm.script(Reply(text="In the DM thread.", chunk_size=4, delay=0.02))
        slack.dm("U1", "follow-up", thread_ts=root_ts)
        await slack.wait_for_text("In the DM thread.", "DU1", thread_ts=root_ts)
        await bot.harness.idle(timeout=30)
    [start] = slack.calls_to("chat.startStream")
    assert start.error is None and "recipient_user_id" not in start.args
    assert [m.text for m in slack.channel_messages("DU1", root_ts)] == ["In the DM thread."]


async def test_when_slack_refuses_the_stream_the_answer_is_posted_and_updated(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03))
    slack.fail_next("chat.startStream", "not_in_channel")
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        slack.mention("C1", "U1", "talk")
        await slack.wait_for_text("word39", "C1")
        await bot.harness.idle(timeout=30)
    [start] = slack.calls_to("chat.startStream")
    assert start.error == "not_in_channel"
    assert len(slack.calls_to("chat.postMessage")) == 1 and slack.calls_to("chat.update")
    assert [m.text for m in slack.channel_messages("C1")] == [WORDS]


async def test_a_model_error_mid_answer_still_stops_the_stream_with_the_error_sentence(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03, abort_after_chunks=3))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        slack.mention("C1", "U1", "talk")
        await slack.wait_for(lambda: slack.calls_to("chat.stopStream"), 30, "stopStream")
        await bot.harness.idle(timeout=30)
    [stop] = slack.calls_to("chat.stopStream")
    assert stop.error is None
    [message] = slack.channel_messages("C1")
    assert message.stream == "stopped" and "⚠️" in message.text


async def test_is_thinking_status_is_set_while_nothing_visible_changes(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text="Thought it over.", chunk_size=100, delay=1.0))
    async with running_bot(tmp_path, llm, slack, native_streaming=True, status_interval_seconds=0.1) as bot:
        slack.mention("C1", "U1", "think")
        await slack.wait_for_text("Thought it over.", "C1")
        await bot.harness.idle(timeout=30)
        seen = len(slack.statuses)
        await asyncio.sleep(0.5)
    assert seen >= 1 and len(slack.statuses) == seen, "set while thinking, not after the answer"
    [(channel, thread_ts, status)] = set(slack.statuses)
    assert channel == "C1" and status == "is thinking…"
    assert thread_ts == slack.calls_to("chat.startStream")[0].args["thread_ts"]


async def test_the_fake_checks_stream_arguments_like_slack(slack: FakeSlack):
    root_ts = "1700000099.000001"
    slack.user_messages.add(("DU1", root_ts))  # a message the user wrote in the DM
    headers = {"Authorization": f"Bearer {slack.bot_token}"}
    async with httpx.AsyncClient(base_url=slack.api_url, headers=headers) as client:

        async def call(method: str, **args: object) -> dict:
            return (await client.post(method, json=args)).json()

        assert (await call("chat.startStream", channel="DU1"))["error"] == "invalid_thread_ts"
        assert (await call("chat.startStream", channel="C9", thread_ts=root_ts))[
            "error"
        ] == "invalid_thread_ts"
        started = await call("chat.startStream", channel="DU1", thread_ts=root_ts)
        assert started["ok"] is True
        assert (await call("chat.appendStream", channel="DU1", ts=started["ts"]))[
            "error"
        ] == "invalid_arguments"
        assert (await call("chat.stopStream", channel="DU1", ts=started["ts"], markdown_text="done"))["ok"]
        late = await call("chat.appendStream", channel="DU1", ts=started["ts"], markdown_text="more")
        assert late["error"] == "message_not_in_streaming_state"


async def test_stop_ends_the_stream_with_the_partial_answer_and_the_stopped_note(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(Reply(text=" ".join(f"slow{i}" for i in range(200)), chunk_size=4, delay=0.1))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        mention = slack.mention("C1", "U1", "talk for long")
        root = mention["event"]["ts"]
        await slack.wait_for(lambda: slack.calls_to("chat.appendStream"), 30, "the stream started")
        slack.mention("C1", "U1", "/stop", thread_ts=root)
        await slack.wait_for(lambda: slack.calls_to("chat.stopStream"), 30, "stopStream")
        await bot.harness.idle(timeout=30)
    [stop] = slack.calls_to("chat.stopStream")
    assert stop.error is None
    streamed = [m for m in slack.channel_messages("C1", root) if m.stream is not None]
    [message] = streamed
    assert message.stream == "stopped" and message.text.startswith("slow")
    assert STOPPED_NOTE in message.text and "slow199" not in message.text


async def test_past_the_split_limit_the_stream_is_stopped_and_the_rest_goes_on_the_edit_path(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    lines = [" ".join(f"l{n}w{i}" for i in range(12)) for n in range(120)]  # about 7,000 characters
    answer = "\n".join(lines)
    llm.script(Reply(text=answer, chunk_size=200, delay=0.02))
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        slack.mention("C1", "U1", "a long one")
        await slack.wait_for_text(lines[-1], "C1")
        await bot.harness.idle(timeout=30)
    [stop] = slack.calls_to("chat.stopStream")
    assert stop.error is None
    messages = slack.channel_messages("C1")
    assert len(messages) >= 2 and messages[0].stream == "stopped"
    assert "\n".join(m.text for m in messages).split() == answer.split(), "every word, once, in order"
    assert all(len(m.text) <= 3500 for m in messages)


async def test_a_queued_notice_in_a_thread_is_a_plain_message_that_becomes_the_answer(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    llm.script(
        Reply(text=" ".join(f"first{i}" for i in range(30)), chunk_size=6, delay=0.05),
        Reply(text="The second answer.", chunk_size=6, delay=0.01),
    )
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        root = slack.mention("C1", "U1", "first")["event"]["ts"]
        await slack.wait_for(lambda: slack.calls_to("chat.startStream"), 30, "the first stream")
        slack.mention("C1", "U1", "second", thread_ts=root)
        notice = await slack.wait_for_text("⏳ Queued", "C1", thread_ts=root)
        await slack.wait_for_text("The second answer.", "C1", thread_ts=root)
        await bot.harness.idle(timeout=30)
    assert notice.history[0].startswith("⏳ Queued") and notice.text == "The second answer."
    assert len(slack.calls_to("chat.startStream")) == 1, "only the first answer streamed"
