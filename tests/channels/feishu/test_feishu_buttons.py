"""Buttons on Feishu cards: the Stop button on a streaming answer, Approve / Deny on approval requests.

The chain is the real one (FakeLark ↔ lark-oapi's HTTP client and long connection ↔ FeishuChannel ↔
Service/manager ↔ FakeOpenAI). A press is what Feishu sends when a user clicks a card button: a
``card.action.trigger`` callback over the long connection, which must be answered within 3 s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.agent.helpers import all_tool_results, tool_results
from tests.channels.feishu.conftest import ALICE, BOB, FeishuBot, running_bot
from tests.fakes.feishu import FakeLark, LarkMessage
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

pytestmark = pytest.mark.slow

P2P = "oc_p2p_alice"
GROUP = "oc_group_team"
STOP = "⏹ Stop"
RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")


def slow_answer(llm: FakeOpenAI, words: int = 200) -> None:
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def live_card(lark: FakeLark, chat: str) -> LarkMessage:
    """The streaming answer, once it shows some text and its Stop button."""
    await lark.wait_for(lambda f: any("word3" in m.text and m.buttons for m in f.chat(chat)), 30)
    return next(m for m in lark.chat(chat) if "word3" in m.text)


def answered_in_time(lark: FakeLark, press: dict) -> bool:  # type: ignore[type-arg]
    return [a["code"] for a in lark.acks_for(press)] == [200] and not lark.press_errors


async def test_the_stop_button_stops_the_answer_and_is_gone_from_the_final_card(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "tell me a long story")
        card = await live_card(lark, P2P)
        assert card.buttons == [STOP] and card.streaming, "the Stop button rides on the streaming card"
        press = lark.press(card, STOP, ALICE)
        await bot.harness.idle(timeout=30)
        await lark.wait_for(lambda f: f.acks_for(press))

    assert card.text.endswith("⏹ Stopped."), card.text
    assert "word199" not in card.text
    assert card.buttons == [], "the Stop button outlived its answer"
    assert not card.streaming
    assert answered_in_time(lark, press), "the user saw an error instead of a quiet answer"
    [ack] = lark.acks_for(press)
    assert ack["data"] == {}, "no toast, no card replacement: the card itself shows what happened"
    # The button carried the command; the card still is the CardKit entity (its button was deleted).
    assert lark.calls("DELETE", f"/cards/{card.card_id}/elements/")
    assert lark.calls("PATCH", f"/open-apis/im/v1/messages/{card.message_id}") == []


async def test_stop_while_the_press_still_holds_the_card_closes_it_on_cardkit(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    """Feishu refuses card calls while a press is being answered (200810, "wait and update again").
    The close after Stop meets it on every step: it waits, and still ends on the CardKit card."""
    slow_answer(llm)
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "tell me a long story")
        card = await live_card(lark, P2P)
        for path, method in (("/elements/action_0", "DELETE"), ("/settings", "PATCH")):
            lark.fail_next(path, method=method, status=400, code=200810, times=2)
        lark.press(card, STOP, ALICE)
        await lark.wait_for(lambda f: not card.streaming, timeout=30)
        await bot.harness.idle(timeout=30)

    assert card.text.endswith("⏹ Stopped.") and "word199" not in card.text
    assert card.buttons == [] and not card.streaming, "streaming off, Stop removed"
    assert lark.calls("PATCH", "/open-apis/im/v1/messages/") == [], "the reply stayed on CardKit"


async def test_a_long_answer_keeps_stop_on_the_newest_card_and_stop_there_ends_it(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    """Past 6,000 characters the answer continues in a new CardKit card: the full one is closed (its
    Stop goes), the new one streams with Stop, and pressing it stops the answer."""
    lines = [" ".join(f"l{n}w{i}" for i in range(12)) for n in range(400)]  # about 24,000 characters
    llm.script(Reply(text="\n".join(lines), chunk_size=150, delay=0.03))
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "the whole saga")
        await lark.wait_for(
            lambda f: (
                len(f.chat(P2P)) == 2 and f.chat(P2P)[1].buttons == [STOP] and "l" in f.chat(P2P)[1].text
            ),
            timeout=30,
        )
        first, second = lark.chat(P2P)
        assert first.buttons == [] and not first.streaming, "the full card is closed, its Stop gone"
        assert second.streaming and second.card_id is not None, "the rest streams into a new card"
        assert 5000 < len(first.text) <= 6000 and first.text.startswith("l0w0")
        lark.press(second, STOP, ALICE)
        await lark.wait_for(lambda f: f.chat(P2P)[-1].text.endswith("⏹ Stopped."), timeout=30)
        await bot.harness.idle(timeout=30)

    cards = lark.chat(P2P)
    assert "l399w11" not in cards[-1].text, "it stopped"
    assert all(c.buttons == [] and not c.streaming for c in cards)
    words = " ".join(c.text.removesuffix("⏹ Stopped.") for c in cards).split()
    expected = "\n".join(lines).split()[: len(words)]
    # Every word once, in order; the stop may have cut the last one short.
    assert words[:-1] == expected[:-1] and expected[-1].startswith(words[-1])
    assert lark.calls("PATCH", "/open-apis/im/v1/messages/") == []


async def test_the_stop_button_works_on_patched_cards_and_when_feishu_sends_a_card_frame(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    """Without CardKit the card is patched with and then without its button. The press comes in a
    ``type=card`` frame, which lark-oapi 1.7.x would drop unanswered (the user sees an error)."""
    slow_answer(llm)
    async with running_bot(tmp_path, llm, lark, native_streaming=False) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "tell me a long story")
        card = await live_card(lark, P2P)
        press = lark.press(card, STOP, ALICE, frame_type="card")
        await bot.harness.idle(timeout=30)
        await lark.wait_for(lambda f: f.acks_for(press))

    assert answered_in_time(lark, press)
    assert card.text.endswith("⏹ Stopped.") and "word199" not in card.text
    assert card.buttons == []
    final = json.loads(card.contents[-1])
    assert [e["tag"] for e in final["body"]["elements"]] == ["markdown"]


async def test_somebody_elses_press_is_refused_politely_and_the_answer_goes_on(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    slow_answer(llm, words=60)
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(GROUP, "group", ALICE, "a long story please", mentions_bot=True)
        card = await live_card(lark, GROUP)
        press = lark.press(card, STOP, BOB)
        refusal = await lark.wait_for_text(GROUP, "only the person who asked", timeout=30)
        await bot.harness.idle(timeout=30)

    assert "word59" in card.text and "Stopped" not in card.text
    assert card.buttons == []
    # The refusal answers in the same conversation: a reply in the chain of Alice's question.
    assert refusal.reply_to == card.message_id
    assert answered_in_time(lark, press)


async def test_a_press_in_a_topic_thread_stops_that_threads_answer_and_is_answered_there(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(
            GROUP, "group", ALICE, "a story", mentions_bot=True, root_id="om_root1", thread_id="omt_1"
        )
        card = await live_card(lark, GROUP)
        assert card.reply_in_thread
        lark.press(card, STOP, ALICE)
        await lark.wait_for(lambda f: card.text.endswith("⏹ Stopped."), timeout=30)
        await bot.harness.idle(timeout=30)

    # Stopped: the press was keyed to the topic's own conversation (another key would have found no
    # running answer and said "That reply has already finished." instead).
    assert card.buttons == []
    assert not [m for m in lark.chat(GROUP) if m.text.startswith("That reply")]


async def test_a_press_delivered_twice_acts_once(tmp_path: Path, llm: FakeOpenAI, lark: FakeLark):
    slow_answer(llm)
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "tell me a long story")
        card = await live_card(lark, P2P)
        press = lark.press(card, STOP, ALICE)
        await lark.wait_for(lambda f: f.acks_for(press))
        lark.push_event(press)  # Feishu pushes the same callback again (same event_id)
        await lark.wait_for(lambda f: len(f.acks_for(press)) == 2)
        await bot.harness.idle(timeout=30)

    assert [a["code"] for a in lark.acks_for(press)] == [200, 200]
    notices = [m.text for m in lark.chat(P2P) if m.text.startswith(("Stopping", "That reply"))]
    assert notices == [], "the pushed-again press was run again (it would say the reply had finished)"
    assert card.text.endswith("⏹ Stopped.")


async def start_risky_turn(bot: FeishuBot, llm: FakeOpenAI) -> tuple[LarkMessage, str, Path]:
    """The model wants to run RISKY where build/ exists; returns (request card, approval id, workspace)."""
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text="done with the build directory"),
    )
    bot.lark.send_message_event(P2P, "p2p", ALICE, "clean up the build")
    request = await bot.lark.wait_for_text(P2P, "🔐 Approval needed", timeout=30)
    match = ASKED.search(request.text)
    assert match is not None and RISKY in request.text, request.text
    [workspace] = Path(bot.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    assert (workspace / "build" / "out").exists()
    return request, match.group(1), workspace


HOST_SANDBOX = {"sandbox": {"mode": "host"}}


async def test_approve_runs_the_command_and_the_request_card_says_so_by_name(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    lark.add_user(ALICE, "Alice Zhang")
    async with running_bot(tmp_path, llm, lark, settings_overrides=HOST_SANDBOX) as bot:
        request, _, workspace = await start_risky_turn(bot, llm)
        assert request.buttons == ["Approve", "Allow until /new", "Deny"]
        press = lark.press(request, "Approve", ALICE)
        await lark.wait_for_text(P2P, "done with the build directory", timeout=30)
        await bot.harness.idle(timeout=30)

    assert not (workspace / "build").exists()
    assert request.text.endswith("✅ Approved by Alice Zhang — running it."), request.text
    assert request.buttons == [], "the buttons outlived the decision"
    # One contact lookup served both Alice's message and her press (names are cached).
    assert len(lark.calls("GET", f"/contact/v3/users/{ALICE}")) == 1
    assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")
    assert answered_in_time(lark, press)


async def test_deny_keeps_the_files_and_the_model_is_told(tmp_path: Path, llm: FakeOpenAI, lark: FakeLark):
    async with running_bot(tmp_path, llm, lark, settings_overrides=HOST_SANDBOX) as bot:
        request, _, workspace = await start_risky_turn(bot, llm)
        lark.press(request, "Deny", ALICE)
        await lark.wait_for_text(P2P, "done with the build directory", timeout=30)
        await bot.harness.idle(timeout=30)

    assert (workspace / "build" / "out").exists()
    assert "🚫 Denied by" in request.text and request.buttons == []
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))
    with pytest.raises(LookupError):
        lark.press(request, "Approve", ALICE)  # nothing left to press


async def test_when_feishu_refuses_the_contact_lookup_the_open_id_stands_in_for_the_name(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    """No name without the contact scope (or outside the contact range): the id is all there is."""
    lark.add_user(ALICE, "Alice Zhang")
    lark.contact_scope = False
    async with running_bot(tmp_path, llm, lark, settings_overrides=HOST_SANDBOX) as bot:
        request, _, _ = await start_risky_turn(bot, llm)
        lark.press(request, "Deny", ALICE)
        await lark.wait_for_text(P2P, "done with the build directory", timeout=30)
        await bot.harness.idle(timeout=30)

    assert request.text.endswith(f"🚫 Denied by {ALICE}; it did not run."), request.text
    assert len(lark.calls("GET", "/contact/v3/users/")) == 1, "a refused scope is not asked again"


async def test_the_fake_refuses_malformed_buttons_like_feishu(lark: FakeLark):
    """A button without a label, or of a type Feishu does not list, makes the whole card unusable."""
    from channels.errors import ChannelError
    from channels.feishu.api import LarkApi

    api = LarkApi(lark.app_id, lark.app_secret, lark.url)
    lark.user_messages["om_user1"] = P2P
    body = {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": []}}
    bad = {"tag": "button", "text": {"tag": "plain_text", "content": ""}, "behaviors": []}
    body["body"]["elements"] = [bad]
    with pytest.raises(ChannelError, match="230099"):
        await api.reply("om_user1", "interactive", json.dumps(body))
    bad = {"tag": "button", "text": {"tag": "plain_text", "content": "Go"}, "type": "red"}
    body["body"]["elements"] = [bad]
    with pytest.raises(ChannelError, match="200220"):
        await api.create_card(json.dumps(body))


async def test_a_typed_stop_stops_every_time_at_once(tmp_path: Path, llm: FakeOpenAI, lark: FakeLark):
    """Three /stop in a row, each while the model still streams for seconds: each takes effect at once.

    One cancellation could be lost (asyncio.wait_for in langchain-openai's chunk loop, Python 3.11): the
    turn then ran until the model's stream ended, ~20 s here, in about 5 of 8 tries before the manager
    cancelled again until the turn ends.
    """
    async with running_bot(tmp_path, llm, lark) as bot:
        for round_ in range(3):
            llm.script(Reply(text=" ".join(f"w{round_}x{i}" for i in range(400)), chunk_size=4, delay=0.05))
            lark.send_message_event(P2P, "p2p", ALICE, f"story {round_}")
            await lark.wait_for(lambda f, r=round_: any(f"w{r}x10 " in m.text for m in f.chat(P2P)), 30)
            lark.send_message_event(P2P, "p2p", ALICE, "/stop")
            # The kept text is right-stripped: a stop that lands just after "w{r}x10 " ends it "w{r}x10".
            await lark.wait_for(
                lambda f, r=round_: any(
                    f"w{r}x10" in m.text and m.text.endswith("⏹ Stopped.") for m in f.chat(P2P)
                ),
                8,
            )
            await bot.harness.idle(timeout=30)
