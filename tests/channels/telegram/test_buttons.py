"""Buttons on Telegram: inline keyboards on replies, presses back as ``callback_query`` updates.

What a person in the chat notices: a streaming answer carries a Stop button that stops it ("⏹ Stopped.")
and is gone from the final message; somebody else's press in a group is refused politely and the answer
goes on; an approval request's Approve runs the command, Deny does not, and the model hears which; a
press Telegram delivers twice acts once; no button is left spinning (every query is answered). The fake
enforces the Bot API's rules: 64-byte ``callback_data``, answer each query once, and no
``callback_query`` at all unless the bot asked for that update kind.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from channels.telegram.channel import TelegramChannel
from channels.types import Action, InboundMessage, Sender
from tests.agent.helpers import agent_settings, all_tool_results, tool_results
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import BUTTON_DATA_INVALID, QUERY_INVALID, FakeMessage, FakeTelegram
from tests.harness import Harness

from .conftest import BOT_USERNAME, telegram_config
from .test_webhook_mode import webhook_service

STOP = "⏹ Stop"
GROUP = -100_500
RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")


def slow_answer(llm: FakeOpenAI, words: int = 200) -> None:
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def live_reply(tg: FakeTelegram, chat: int) -> FakeMessage:
    """The streaming answer, once it shows text and its Stop button."""
    return await tg.wait_until(
        lambda: next((m for m in tg.bot_messages(chat) if "word3" in m.text and m.buttons == [STOP]), None),
        timeout=20,
    )


def callback_data(message: FakeMessage) -> list[str]:
    return [str(b["callback_data"]) for row in message.keyboard or [] for b in row]


def answer_statuses(tg: FakeTelegram) -> list[int]:
    return [c["status"] for c in tg.calls("answerCallbackQuery")]


# --- Stop ------------------------------------------------------------------------------------------------
async def test_pressing_stop_stops_the_answer_and_the_button_goes_away(tg: FakeTelegram, tg_harness, llm):
    slow_answer(llm)
    tg.user_message(42, "tell me a long story")
    reply = await live_reply(tg, 42)
    [token] = callback_data(reply)
    assert re.fullmatch(r"/stop [0-9a-f]{1,32}", token), token

    tg.press(42, reply.message_id, STOP)
    await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
    await tg_harness.idle(timeout=20)
    assert "word199" not in reply.text
    assert reply.keyboard is None and "reply_markup" not in reply.payload, "the Stop button outlived it"
    await tg.wait_until(lambda: tg.unanswered() == [])
    assert answer_statuses(tg) == [200], "the press was answered once, so the spinner stopped"

    # The next question streams with a fresh button of its own.
    llm.script(Reply(text="short one"))
    tg.user_message(42, "and now?")
    await tg.wait_for_bot_text(42, "short one")
    await tg_harness.idle()
    assert tg.bot_messages(42)[-1].keyboard is None


async def test_somebody_elses_press_in_a_group_is_refused_and_the_answer_goes_on(
    tg: FakeTelegram, tg_harness, llm
):
    slow_answer(llm, words=60)
    tg.user_message(GROUP, f"@{BOT_USERNAME} a long story please", chat_type="supergroup")
    reply = await live_reply(tg, GROUP)
    tg.press(GROUP, reply.message_id, STOP, user_id=2002, username="mallory", first_name="Mallory")
    refusal = await tg.wait_for_bot_text(GROUP, "only the person who asked")
    assert refusal.reply_to == reply.message_id, "the refusal quotes the message whose button was pressed"
    await tg.wait_until(lambda: "word59" in reply.text and reply.keyboard is None, timeout=20)
    await tg_harness.idle(timeout=20)
    assert "Stopped" not in reply.text
    assert tg.unanswered() == [] and answer_statuses(tg) == [200]


async def test_an_admin_may_stop_anybodys_answer_by_numeric_user_id(tg: FakeTelegram, tg_settings, llm):
    channel = TelegramChannel(telegram_config(tg, admins=["2002"]), settings=tg_settings)
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        slow_answer(llm)
        tg.user_message(GROUP, f"@{BOT_USERNAME} a long story please", chat_type="supergroup")
        reply = await live_reply(tg, GROUP)
        tg.press(GROUP, reply.message_id, STOP, user_id=2002, username="lead", first_name="Lee")
        await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
        await harness.idle(timeout=20)
        assert reply.keyboard is None and tg.unanswered() == []


async def test_the_asker_stops_an_answer_in_a_forum_topic(tg: FakeTelegram, tg_harness, llm):
    """A press carries the topic of the message its button is on: the same conversation as the asker's."""
    slow_answer(llm)
    tg.user_message(GROUP, f"@{BOT_USERNAME} a long story", chat_type="supergroup", thread_id=77)
    reply = await live_reply(tg, GROUP)
    assert reply.thread_id == 77
    tg.press(GROUP, reply.message_id, STOP)
    await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
    await tg_harness.idle(timeout=20)
    assert reply.keyboard is None  # stopped: the press reached the topic's own conversation


async def test_a_press_on_a_message_telegram_no_longer_shows_the_bot_still_stops_it(
    tg: FakeTelegram, tg_harness, llm
):
    """The query then carries only chat and message id (InaccessibleMessage): enough in a private chat."""
    slow_answer(llm)
    tg.user_message(42, "tell me a long story")
    reply = await live_reply(tg, 42)
    tg.press(42, reply.message_id, STOP, inaccessible=True)
    await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
    await tg_harness.idle(timeout=20)
    assert tg.unanswered() == []


async def test_a_press_delivered_twice_acts_once_and_both_deliveries_are_answered(
    tg: FakeTelegram, tg_harness, llm
):
    slow_answer(llm)
    tg.user_message(42, "tell me a long story")
    reply = await live_reply(tg, 42)
    press = tg.press(42, reply.message_id, STOP)
    tg.redeliver_press(press)  # the same callback query again (an offset Telegram never got)
    await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
    await tg_harness.idle(timeout=20)
    await tg.wait_until(lambda: len(tg.calls("answerCallbackQuery")) == 2)
    notices = [m.text for m in tg.bot_messages(42) if m.text.startswith(("Stopping", "That reply"))]
    assert notices == [], "the second delivery was run again (it would say the reply had finished)"
    # The second answer is Telegram's "already answered": expected, logged, and intake goes on.
    assert answer_statuses(tg) == [200, 400] and tg.unanswered() == []
    llm.script(Reply(text="still listening"))
    tg.user_message(42, "hello?")
    await tg.wait_for_bot_text(42, "still listening")


async def test_a_press_stored_but_never_confirmed_is_redelivered_after_a_restart_and_acts_once(
    tg: FakeTelegram, tg_settings, llm
):
    before = TelegramChannel(telegram_config(tg), settings=tg_settings)
    first = Harness(tg_settings, channels={"telegram": before})  # type: ignore[dict-item]
    await first.start()
    try:
        slow_answer(llm)
        tg.user_message(42, "tell me a long story")
        reply = await live_reply(tg, 42)
        press = tg.press(42, reply.message_id, STOP)
        await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
        await first.idle(timeout=20)
    finally:
        await first.stop()
    # What a crash between storing and confirming leaves: Telegram still holds the very same update.
    tg.repeat_update(press)
    channel = TelegramChannel(telegram_config(tg), settings=tg_settings)
    async with Harness.running(tg_settings, channels={"telegram": channel}) as restarted:  # type: ignore[dict-item]
        await tg.wait_until(lambda: len(tg.calls("answerCallbackQuery")) == 2, timeout=20)
        await restarted.idle(timeout=20)
        await tg.wait_until(lambda: tg.pending_updates() == [], timeout=10)
    notices = [m.text for m in tg.bot_messages(42) if m.text.startswith(("Stopping", "That reply"))]
    assert notices == [], "the redelivered press was run again (it would say the reply had finished)"
    assert reply.text.endswith("⏹ Stopped.") and reply.keyboard is None
    assert answer_statuses(tg) == [200, 400] and tg.unanswered() == []


# --- Approve / Deny --------------------------------------------------------------------------------------
async def start_risky_turn(tg: FakeTelegram, h: Harness, llm: FakeOpenAI) -> tuple[FakeMessage, str, Path]:
    """The model wants RISKY in a workspace with a build/ directory: (request message, id, workspace)."""
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text="done with the build directory"),
    )
    tg.user_message(42, "clean up the build")
    request = await tg.wait_for_bot_text(42, "🔐 Approval needed", timeout=30)
    match = ASKED.search(request.text)
    assert match is not None and RISKY in request.text, request.text
    approval_id = match.group(1)
    assert request.buttons == ["Approve", "Allow until /new", "Deny"]
    assert callback_data(request) == [
        f"/approve {approval_id}",
        f"/approve {approval_id} session",
        f"/deny {approval_id}",
    ]
    [workspace] = Path(h.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    assert (workspace / "build" / "out").exists()
    return request, approval_id, workspace


@pytest.fixture
async def approvals(tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI) -> Any:
    settings = agent_settings(tmp_path, llm, sandbox={"mode": "host"})
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        yield harness


async def test_approve_runs_the_command_and_the_request_says_who_approved(
    tg: FakeTelegram, approvals: Harness, llm: FakeOpenAI
):
    request, _, workspace = await start_risky_turn(tg, approvals, llm)
    tg.press(42, request.message_id, "Approve")
    await tg.wait_for_bot_text(42, "done with the build directory", timeout=30)
    await approvals.idle(timeout=20)
    assert not (workspace / "build").exists()
    assert request.text.endswith("✅ Approved by Alice — running it."), request.text
    assert request.keyboard is None, "the buttons outlived the decision"
    assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")
    assert tg.unanswered() == []


async def test_deny_keeps_the_files_and_the_model_is_told(
    tg: FakeTelegram, approvals: Harness, llm: FakeOpenAI
):
    request, _, workspace = await start_risky_turn(tg, approvals, llm)
    tg.press(42, request.message_id, "Deny")
    await tg.wait_for_bot_text(42, "done with the build directory", timeout=30)
    await approvals.idle(timeout=20)
    assert (workspace / "build" / "out").exists()
    assert request.text.endswith("🚫 Denied by Alice; it did not run."), request.text
    assert request.keyboard is None
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))
    assert tg.unanswered() == []


# --- webhook mode ----------------------------------------------------------------------------------------
async def test_in_webhook_mode_a_press_is_stored_answered_and_a_repeated_update_acts_once(
    tmp_path: Path, llm: FakeOpenAI
):
    with FakeTelegram(bot_username=BOT_USERNAME, local_mode=True, webhook_retry_seconds=0.2) as tg:
        async with webhook_service(tmp_path, llm, tg) as sb:
            slow_answer(llm)
            tg.user_message(42, "tell me a long story")
            reply = await live_reply(tg, 42)
            press = tg.press(42, reply.message_id, STOP)
            await tg.wait_until(lambda: reply.text.endswith("⏹ Stopped."), timeout=20)
            await sb.idle()
            assert tg.webhook_statuses(press["update_id"]) == [200]
            tg.repeat_update(press)  # Telegram never saw our 200 and posts the very same update again
            await tg.wait_until(lambda: len(tg.webhook_statuses(press["update_id"])) == 2)
            await sb.idle()
            assert tg.webhook_statuses(press["update_id"]) == [200, 200]
            notices = [m.text for m in tg.bot_messages(42) if m.text.startswith(("Stopping", "That reply"))]
            assert notices == [], "the repeated update was run again"
            assert reply.text.endswith("⏹ Stopped.") and reply.keyboard is None and tg.unanswered() == []


# --- the transport and the fake --------------------------------------------------------------------------
async def test_a_command_too_long_for_callback_data_is_left_off_and_the_rest_is_sent(
    tg: FakeTelegram, tg_channel: TelegramChannel, caplog: pytest.LogCaptureFixture
):
    async def sink(message: InboundMessage) -> bool:
        return True

    await tg_channel.start(sink)
    tg.open_chat(42)
    try:
        message = InboundMessage(
            provider="telegram", workspace="", chat="42", sender=Sender("1001", "Alice"), text="hi",
            platform_message_id="1", is_private=True,
        )  # fmt: skip
        transport = tg_channel.reply_transport(message)
        too_long = Action("/approve " + "é" * 28, "Long")  # 9 + 56 = 65 bytes
        with caplog.at_level(logging.WARNING, logger="channels.telegram.transport"):
            ref = await transport.send("pick one", actions=[too_long, Action("/stop ab12", STOP, "danger")])
        [sent] = tg.bot_messages(42)
        assert str(sent.message_id) == ref and sent.buttons == [STOP]
        assert sent.keyboard is not None and sent.keyboard[0][0]["style"] == "danger"
        assert any("65 bytes" in r.getMessage() for r in caplog.records)
        await transport.edit(ref, "picked")
        assert sent.text == "picked" and sent.keyboard is None, "an edit without actions removes the keyboard"
    finally:
        await tg_channel.stop()


async def test_the_fake_enforces_the_bot_api_rules_for_inline_keyboards_and_callback_queries(
    tg: FakeTelegram,
):
    def markup(data: str) -> str:
        return f'{{"inline_keyboard": [[{{"text": "Go", "callback_data": "{data}"}}]]}}'

    tg.open_chat(42)

    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        fits = await client.post(
            "/sendMessage", data={"chat_id": 42, "text": "a", "reply_markup": markup("é" * 32)}
        )
        too_long = await client.post(
            "/sendMessage", data={"chat_id": 42, "text": "b", "reply_markup": markup("é" * 32 + "x")}
        )
        label_only = await client.post(
            "/sendMessage",
            data={"chat_id": 42, "text": "c", "reply_markup": '{"inline_keyboard": [[{"text": "x"}]]}'},
        )
        assert fits.json()["ok"] is True
        assert too_long.json() == {"ok": False, "error_code": 400, "description": BUTTON_DATA_INVALID}
        assert label_only.json()["error_code"] == 400
        message_id = fits.json()["result"]["message_id"]
        assert fits.json()["result"]["reply_markup"]["inline_keyboard"][0][0]["text"] == "Go"

        # A press before the bot asked for callback queries is never created (allowed_updates).
        await client.post("/getUpdates", data={"allowed_updates": '["message"]', "timeout": 0})
        tg.press(42, message_id, "Go")
        assert tg.pending_updates() == []
        await client.post(
            "/getUpdates", data={"allowed_updates": '["message", "callback_query"]', "timeout": 0}
        )
        update = tg.press(42, message_id, "Go")
        assert tg.pending_updates() == [update["update_id"]]
        query = update["callback_query"]
        assert query["data"] == "é" * 32 and query["message"]["message_id"] == message_id
        assert query["from"]["id"] == 1001 and query["chat_instance"]

        first = await client.post("/answerCallbackQuery", data={"callback_query_id": query["id"]})
        again = await client.post("/answerCallbackQuery", data={"callback_query_id": query["id"]})
        unknown = await client.post("/answerCallbackQuery", data={"callback_query_id": "123"})
        assert first.json() == {"ok": True, "result": True}
        assert again.json()["description"] == unknown.json()["description"] == QUERY_INVALID
        assert tg.call_count("answerCallbackQuery") == 3

        # Same text and same keyboard is "not modified"; leaving reply_markup out removes the keyboard.
        same = await client.post(
            "/editMessageText",
            data={"chat_id": 42, "message_id": message_id, "text": "a", "reply_markup": markup("é" * 32)},
        )
        assert "message is not modified" in same.json()["description"]
        removed = await client.post(
            "/editMessageText", data={"chat_id": 42, "message_id": message_id, "text": "a"}
        )
        assert removed.json()["ok"] is True and "reply_markup" not in removed.json()["result"]
    with pytest.raises(LookupError):
        tg.press(42, message_id, "Go")  # the button is gone
