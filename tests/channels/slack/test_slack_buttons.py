"""Buttons on Slack (issue 16): Block Kit ``actions`` on the bot's messages, presses over Socket Mode.

What a person in Slack notices: a streaming answer carries a Stop button that stops it and is gone from
the final message; somebody else's press is refused in a message only they see, and the answer goes
on; an approval request has Approve / Deny buttons that decide it (the command runs, or it does not
and the model is told); a press Slack delivers twice acts once. The fake checks the blocks as Slack
does and presses a button the way Slack reports a click (a ``block_actions`` interactive envelope).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.manager import STOPPED_NOTE
from channels.slack.api import BUTTON_TEXT_LIMIT, SlackTransport
from channels.types import Action
from tests.agent.helpers import all_tool_results, tool_results
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.slack import FakeMessage, FakeSlack

from .conftest import running_bot

STOP = "⏹ Stop"
RISKY = "rm -rf /mnt/user-data/workspace/build"
HOST_SANDBOX: dict[str, Any] = {"sandbox": {"mode": "host"}}


def slow_answer(llm: FakeOpenAI, words: int = 200) -> None:
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def live_answer(slack: FakeSlack, channel: str, thread_ts: str | None = None) -> FakeMessage:
    """The streaming answer, once it shows some words and its buttons."""

    def find() -> FakeMessage | None:
        return next(
            (m for m in slack.channel_messages(channel, thread_ts) if "word3" in m.text and m.labels), None
        )

    return await slack.wait_for(find, 30, "the answer streaming with its Stop button")  # type: ignore[no-any-return]


def posted(slack: FakeSlack, channel: str, needle: str) -> list[FakeMessage]:
    return [m for m in slack.channel_messages(channel) if needle in m.text]


async def test_the_stop_button_stops_the_answer_and_is_gone_from_the_final_message(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, slack) as bot:
        root = slack.mention("C1", "U1", "tell me a long story")["event"]["ts"]
        live = await live_answer(slack, "C1", root)
        [button] = live.buttons
        assert live.labels == [STOP] and button["style"] == "danger"
        assert button["value"].startswith("/stop "), "the button carries the command it means"
        assert "word3" in live.blocks[0]["text"]["text"], "the text is shown above the button"
        press = slack.press("C1", live.ts, STOP, user="U1")
        await slack.wait_for(lambda: slack.acked(press["envelope_id"]), 10, "the press acknowledged")
        await bot.harness.idle(timeout=30)
    assert live.text.endswith(STOPPED_NOTE) and "word199" not in live.text
    assert live.blocks == [] and live.labels == [], "the Stop button outlived its answer"
    # Stopped, so the press reached the thread's own conversation; it needed no message of its own.
    assert posted(slack, "C1", "Stopping the current reply.") == []


async def test_somebody_elses_press_is_refused_privately_and_the_answer_goes_on(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    slow_answer(llm, words=60)
    async with running_bot(tmp_path, llm, slack) as bot:
        root = slack.mention("C1", "U1", "a long story please")["event"]["ts"]
        live = await live_answer(slack, "C1", root)
        press = slack.press("C1", live.ts, STOP, user="U2")
        await slack.wait_for(lambda: slack.ephemerals_for("U2", "C1"), 30, "the refusal")
        await bot.harness.idle(timeout=30)
    [refusal] = slack.ephemerals_for("U2", "C1")
    assert "only the person who asked" in refusal.text
    assert refusal.via == "response_url" and refusal.thread_ts == root
    assert slack.acked(press["envelope_id"])
    assert "word59" in live.text and "Stopped" not in live.text and live.labels == []
    assert not posted(slack, "C1", "Sorry"), "the refusal was shown to everybody"


def risky_turn(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text="done with the build directory"),
    )


async def approval_request(slack: FakeSlack, channel: str) -> FakeMessage:
    request = await slack.wait_for_text("Approval needed", channel, timeout=30)
    await slack.wait_for(lambda: request.labels, 10, "the approval buttons")
    assert RISKY in request.text
    return request


def workspace_of(bot: Any) -> Path:
    [workspace] = Path(bot.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    return workspace


async def test_approve_runs_the_command_and_the_request_shows_the_outcome_without_buttons(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    risky_turn(llm)
    # A channel (a group): the requester may approve only because this workspace says so.
    async with running_bot(
        tmp_path, llm, slack, settings_overrides=HOST_SANDBOX, approvers="requester"
    ) as bot:
        root = slack.mention("C1", "U1", "clean up the build")["event"]["ts"]
        request = await approval_request(slack, "C1")
        assert request.thread_ts == root and request.labels == ["Approve", "Allow until /new", "Deny"]
        assert [b.get("style") for b in request.buttons] == ["primary", None, "danger"]
        assert (workspace_of(bot) / "build" / "out").exists(), "nothing runs before the decision"
        slack.press("C1", request.ts, "Approve", user="U2")  # somebody else in the channel
        await slack.wait_for(lambda: slack.ephemerals_for("U2", "C1"), 30, "the refusal")
        assert "Sorry, only" in slack.ephemerals_for("U2", "C1")[0].text
        assert (
            request.labels == ["Approve", "Allow until /new", "Deny"]
            and (workspace_of(bot) / "build" / "out").exists()
        )
        slack.press("C1", request.ts, "Approve", user="U1")
        await slack.wait_for_text("done with the build directory", "C1", thread_ts=root, timeout=30)
        await bot.harness.idle(timeout=30)
        assert not (workspace_of(bot) / "build").exists()
    assert "✅ Approved by" in request.text and request.labels == []
    assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")


async def test_deny_keeps_the_files_and_the_model_is_told(tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack):
    risky_turn(llm)
    async with running_bot(tmp_path, llm, slack, settings_overrides=HOST_SANDBOX) as bot:
        slack.dm("U1", "clean up the build")  # a top-level DM: its own conversation key (no topic)
        request = await approval_request(slack, "DU1")
        slack.press("DU1", request.ts, "Deny", user="U1")
        await slack.wait_for_text("done with the build directory", "DU1", timeout=30)
        await bot.harness.idle(timeout=30)
        assert (workspace_of(bot) / "build" / "out").exists()
    assert "🚫 Denied by" in request.text and request.labels == []
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))


async def test_an_admin_may_stop_somebody_elses_answer(tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, slack, admins=["UBOSS"]) as bot:
        root = slack.mention("C1", "U1", "a long story please")["event"]["ts"]
        live = await live_answer(slack, "C1", root)
        slack.press("C1", live.ts, STOP, user="UBOSS")
        await slack.wait_for(lambda: live.text.endswith(STOPPED_NOTE), 30, "the admin's stop")
        await bot.harness.idle(timeout=30)
    assert live.labels == [] and slack.ephemerals == []


async def test_a_press_slack_delivers_twice_acts_once(tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.dm("U1", "a long story")
        live = await live_answer(slack, "DU1")
        press = slack.press("DU1", live.ts, STOP, user="U1")
        await slack.wait_for(lambda: slack.acked(press["envelope_id"]), 10, "the first delivery acked")
        again = slack.redeliver_press(press)  # the ack was lost: Slack sends the same payload again
        await slack.wait_for(lambda: slack.acked(again), 10, "the redelivery acked")
        await bot.harness.idle(timeout=30)
    assert len(slack.press_deliveries(press)) == 2
    assert live.text.endswith(STOPPED_NOTE)
    notices = [m.text for m in slack.channel_messages("DU1") if m.text.startswith(("Stopping", "That reply"))]
    assert notices == [], "the second delivery acted again (it would say the reply had finished)"


async def test_with_native_streaming_chosen_thread_answers_stream_natively_without_a_stop_button(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
):
    slow_answer(llm, words=40)
    async with running_bot(tmp_path, llm, slack, native_streaming=True) as bot:
        slack.mention("C1", "U1", "talk")
        await slack.wait_for_text("word39", "C1")
        await bot.harness.idle(timeout=30)
    assert len(slack.calls_to("chat.startStream")) == 1, "the operator chose Slack's own stream"
    assert slack.calls_to("chat.update") == [], "the answer also went the chat.update way"


async def test_buttons_are_blocks_slack_accepts_and_an_edit_without_them_removes_them(slack: FakeSlack):
    slack.user_messages.add(("C1", "1700000099.000001"))
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    transport = SlackTransport(client, "C1", "1700000099.000001")
    long_label = "Approve " + "x" * 100
    ref = await transport.send("*hi* & <there>", actions=[Action("/approve K7PX2M", long_label, "primary")])
    [message] = slack.channel_messages("C1")
    assert message.ts == ref and len(message.labels[0]) <= BUTTON_TEXT_LIMIT
    assert message.buttons[0]["value"] == "/approve K7PX2M"
    assert message.text == "_hi_ &amp; &lt;there&gt;", "the text fallback stays"
    await transport.edit(ref, "done")
    assert message.blocks == [] and message.text == "done"
    # The fake refuses what Slack refuses.
    headers = {"Authorization": f"Bearer {slack.bot_token}"}
    async with httpx.AsyncClient(base_url=slack.api_url, headers=headers) as http:
        too_long = [
            {
                "type": "actions",
                "elements": [{"type": "button", "text": {"type": "plain_text", "text": "x" * 76}}],
            }
        ]
        answer = (
            await http.post("chat.postMessage", json={"channel": "C1", "text": "t", "blocks": too_long})
        ).json()
        assert answer["error"] == "invalid_blocks"
        answer = (
            await http.post("chat.update", json={"channel": "C1", "ts": ref, "text": "x" * 40_001})
        ).json()
        assert answer["error"] == "msg_too_long"


@pytest.mark.slow  # waits for the fake's 3-second ack timeout
async def test_a_press_the_bus_cannot_store_is_not_acked_and_slacks_redelivery_stops_the_answer(
    tmp_path: Path, llm: FakeOpenAI
):
    settings = {"bus": {"queue_size": 2}, "sandbox": {"mode": "host", "approval_timeout_seconds": 2}}
    with FakeSlack(retry_delays=(0.0, 0.5, 1.0)) as slack:
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
            Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
            Reply(text=" ".join(f"word{i}" for i in range(400)), chunk_size=8, delay=0.05),
            Reply(text="done with the build directory"),
        )
        async with running_bot(tmp_path, llm, slack, settings_overrides=settings) as bot:
            # Two unfinished messages fill the bus: U2's turn waiting for an approval (it expires
            # after 2 s and then finishes), and U1's long answer.
            slack.dm("U2", "clean up the build")
            await approval_request(slack, "DU2")
            slack.dm("U1", "a very long story")
            live = await live_answer(slack, "DU1")
            press = slack.press("DU1", live.ts, STOP, user="U1")
            await slack.wait_for(lambda: bot.service.bus.refused >= 1, 10, "the bus to refuse the press")
            await slack.wait_for(lambda: live.text.endswith(STOPPED_NOTE), 30, "the redelivered press")
            await bot.harness.idle(timeout=30)
            await slack.wait_for(lambda: not slack.retrying, 15, "retries to settle")
        deliveries = slack.press_deliveries(press)
    assert len(deliveries) >= 2, "the refused press must have been delivered again"
    assert not slack.acked(deliveries[0]["envelope_id"]), "acked before it was stored"
    assert slack.acked(deliveries[-1]["envelope_id"])
    assert "word399" not in live.text and live.labels == []
