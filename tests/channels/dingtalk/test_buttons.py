"""Buttons on DingTalk: Stop and Approve/Deny on AI cards, pressed through card callbacks on the stream.

What a DingTalk user notices: while an answer streams into its AI card, the card shows a Stop button;
pressing it stops the answer ("⏹ Stopped.") and the button is gone from the finished card; somebody
else's press is refused politely and the answer goes on; an approval request card has Approve and Deny,
Approve runs the command, Deny doesn't and the model is told, and the card is edited with the outcome
(buttons gone); a press DingTalk delivers twice acts once. Without a card template (markdown replies)
nothing can carry a button, and the typed ``/approve ID`` does the same job.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from channels.dingtalk.channel import DingTalkChannel
from tests.agent.helpers import all_tool_results, tool_results
from tests.channels.dingtalk.conftest import Rig, _rig, dingtalk_config
from tests.fakes.dingtalk import Bubble
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test

STOP = "⏹ Stop"
FINISHED = "3"
RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")
HOST = {"sandbox": {"mode": "host"}}


def slow_answer(llm: FakeOpenAI, words: int = 200) -> None:
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def buttons_rig(start_rig, cfg: dict[str, object] | None = None, **settings: object) -> Rig:  # type: ignore[no-untyped-def]
    return await start_rig("card", dict(settings), card_actions_key="actions", **(cfg or {}))  # type: ignore[no-any-return]


async def live_card(rig: Rig, conversation: str) -> Bubble:
    """The streaming answer's card, once it shows text and its Stop button."""

    def found() -> Bubble | None:
        for card in rig.fake.card_bubbles(conversation):
            if "word3" in card.text and STOP in card.button_labels:
                return card
        return None

    return await rig.fake.wait_for(found)


async def alice_presses_stop(start_rig: Any, llm: FakeOpenAI) -> tuple[Rig, Bubble, str]:
    """Alice asks for a long story in her private chat and presses ⏹ Stop on its card while it streams;
    the press is acknowledged. Returns the rig, the card and the press's message id."""
    rig = await buttons_rig(start_rig)
    slow_answer(llm)
    rig.fake.send_bot_message("1", "tell me a long story", sender_id="alice")
    card = await live_card(rig, rig.p2p("alice"))
    press = rig.fake.press_button(card, STOP, user_id="alice")
    assert await rig.fake.wait_ack(press) == 200
    return rig, card, press


async def test_pressing_stop_stops_the_answer_and_the_button_goes_away(start_rig, llm):
    rig, card, _press = await alice_presses_stop(start_rig, llm)
    await rig.harness.idle(timeout=20)

    assert card.params["content"].endswith("⏹ Stopped."), card.params["content"]
    assert "word199" not in card.params["content"]
    assert card.buttons == [], "the Stop button outlived its answer"
    assert card.flow[-1] == FINISHED
    assert rig.final_texts(rig.p2p("alice"))[1:] == [], "a press needs no message of its own"


async def test_somebody_elses_press_is_refused_and_the_answer_goes_on(start_rig, llm):
    rig = await buttons_rig(start_rig)
    slow_answer(llm, words=60)
    rig.fake.send_bot_message(
        "2", "a long story please", sender_id="bob", conversation_id="cid-ops", at_bot=True
    )
    card = await live_card(rig, "cid-ops")

    press = rig.fake.press_button(card, STOP, user_id="carol")
    assert await rig.fake.wait_ack(press) == 200
    await rig.wait_text("cid-ops", "only the person who asked")
    await rig.harness.idle(timeout=20)

    assert "word59" in card.params["content"] and "Stopped" not in card.params["content"]
    assert card.buttons == [] and card.flow[-1] == FINISHED


async def test_a_press_delivered_twice_acts_once(start_rig, llm):
    rig, card, press = await alice_presses_stop(start_rig, llm)
    rig.fake.push_again(press)  # the gateway missed the ACK and pushes the same callback again
    await rig.fake.wait_for(lambda: [code for mid, code in rig.fake.ack_log if mid == press] == [200, 200])
    await rig.harness.idle(timeout=20)

    assert card.params["content"].endswith("⏹ Stopped.")
    # Acted on once: the redelivery got no "That reply has already finished." of its own.
    assert rig.final_texts(rig.p2p("alice"))[1:] == []


async def start_risky_turn(rig: Rig, llm: FakeOpenAI, *, scripted: bool = False) -> tuple[Bubble, str, Path]:
    """The model wants to run RISKY in a workspace that has a build/ directory (``scripted``: the test
    scripted the model itself).

    Returns the approval request's card, the approval id, and the workspace.
    """
    if not scripted:
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
            Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
            Reply(text="done with the build directory"),
        )
    rig.fake.send_bot_message("1", "clean up the build", sender_id="alice")

    def request() -> Bubble | None:
        for card in rig.fake.card_bubbles(rig.p2p("alice")):
            if card.text.startswith("🔐 Approval needed") and card.flow[-1:] == [FINISHED]:
                return card
        return None

    card = await rig.fake.wait_for(request, timeout=30)
    assert RISKY in card.text
    match = ASKED.search(card.text)
    assert match is not None, card.text
    [workspace] = Path(rig.harness.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    return card, match.group(1), workspace


async def test_approve_runs_the_command_and_the_request_card_says_so(start_rig, llm):
    rig = await buttons_rig(start_rig, **HOST)
    card, approval_id, workspace = await start_risky_turn(rig, llm)
    assert [(b["label"], b["command"]) for b in card.buttons] == [
        ("Approve", f"/approve {approval_id}"),
        ("Allow until /new", f"/approve {approval_id} session"),
        ("Deny", f"/deny {approval_id}"),
    ]
    assert (workspace / "build" / "out").exists()  # waiting: nothing ran yet

    press = rig.fake.press_button(card, "Approve", user_id="alice")
    assert await rig.fake.wait_ack(press) == 200
    await rig.wait_text(rig.p2p("alice"), "done with the build directory", timeout=30)
    await rig.harness.idle()

    assert not (workspace / "build").exists()
    # The card callback carries only alice's staff id; her name comes from her own message's senderNick.
    assert card.params["content"].endswith("✅ Approved by Alice — running it."), card.params["content"]
    assert card.buttons == [], "the buttons outlived the decision"
    assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")


async def test_deny_keeps_the_files_and_the_model_is_told(start_rig, llm):
    rig = await buttons_rig(start_rig, **HOST)
    card, _, workspace = await start_risky_turn(rig, llm)

    press = rig.fake.press_button(card, "Deny", user_id="alice")
    assert await rig.fake.wait_ack(press) == 200
    await rig.wait_text(rig.p2p("alice"), "done with the build directory", timeout=30)
    await rig.harness.idle()

    assert (workspace / "build" / "out").exists()
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))
    assert card.params["content"].endswith("🚫 Denied by Alice; it did not run.")
    assert card.buttons == []


async def test_without_a_card_template_the_typed_command_approves(start_rig, llm):
    rig = await start_rig("markdown", HOST)
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text="done with the build directory"),
    )
    rig.fake.send_bot_message("1", "clean up the build", sender_id="alice")
    request = await rig.wait_text(rig.p2p("alice"), "🔐 Approval needed", timeout=30)
    match = ASKED.search(request.text)
    assert match is not None, request.text
    [workspace] = Path(rig.harness.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")

    rig.fake.send_bot_message("1", f"/approve {match.group(1)}", sender_id="alice")
    await rig.wait_text(rig.p2p("alice"), "done with the build directory", timeout=30)
    await rig.harness.idle()

    assert not (workspace / "build").exists()
    assert request.kind == "markdown"
    # Markdown messages carry no buttons: nothing tried to put any on a card.
    assert not rig.fake.calls("/v1.0/card/")


async def test_after_a_restart_the_old_cards_are_edited_in_place_and_the_new_request_works(
    tmp_path, llm, fake_dingtalk
):
    first = await _rig(tmp_path, llm, fake_dingtalk, "card", HOST, card_actions_key="actions")
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
    )
    try:
        old_request, old_id, workspace = await start_risky_turn(first, llm, scripted=True)
    finally:
        await first.harness.stop(grace=0.5)  # the turn is cut off while it waits for the decision
    assert "withdrawn" in old_request.params["content"] and old_request.buttons == []

    # A new process knows none of the cards: the resumed turn continues its answer card and asks anew.
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]), Reply(text="second try done"))
    second = await _rig(tmp_path, llm, fake_dingtalk, "card", HOST, card_actions_key="actions")
    try:
        conversation = second.p2p("alice")

        def new_request() -> Bubble | None:
            for card in second.fake.card_bubbles(conversation):
                if card.text.startswith("🔐 Approval needed") and old_id not in card.text and card.buttons:
                    return card
            return None

        request = await second.fake.wait_for(new_request, timeout=30)
        press = second.fake.press_button(request, "Approve", user_id="alice")
        assert await second.fake.wait_ack(press) == 200
        await second.wait_text(conversation, "second try done", timeout=30)
        await second.harness.idle()
    finally:
        await second.harness.stop()

    assert not (workspace / "build").exists()
    answer = second.fake.card_bubbles(conversation)[0]
    assert "second try done" in answer.params["content"], answer.params
    assert answer.flow[-1] == FINISHED and answer.buttons == [], "the resumed answer kept its Stop button"
    assert all(card.flow[-1] == FINISHED for card in second.fake.card_bubbles(conversation))


@pytest.mark.parametrize(
    ("kind", "space", "conversation_id"),
    [("1", "dtv1.card//IM_ROBOT.bob", None), ("2", "dtv1.card//IM_GROUP.cid-ops", "cid-ops")],
)
async def test_a_press_on_a_card_the_process_never_sent_is_in_that_chats_conversation(
    fake_dingtalk, kind, space, conversation_id
):
    """After a restart the channel knows no card: the press is placed by the callback's delivery space,
    and must land in exactly the conversation (key and privacy) of that chat's robot messages."""
    fake = fake_dingtalk
    async with httpx.AsyncClient(base_url=fake.url) as client:
        token = await client.post(
            "/v1.0/oauth2/accessToken", json={"appKey": fake.client_id, "appSecret": fake.client_secret}
        )
        client.headers["x-acs-dingtalk-access-token"] = token.json()["accessToken"]
        buttons = '[{"label": "Approve", "command": "/approve K7PX2M", "color": "blue"}]'
        await client.post(
            "/v1.0/card/instances",
            json={
                "cardTemplateId": "t.schema",
                "outTrackId": "sb-old",
                "cardData": {"cardParamMap": {"content": "🔐 Approval needed", "actions": buttons}},
                "callbackType": "STREAM",
            },
        )
        await client.post(
            "/v1.0/card/instances/deliver",
            json={"outTrackId": "sb-old", "openSpaceId": space, "userIdType": 1},
        )
    channel = DingTalkChannel(dingtalk_config(fake, "card", card_actions_key="actions"))
    message = channel.to_inbound(fake.build_message(kind, "hi", "bob", conversation_id, at_bot=kind == "2"))
    press = channel.press_to_inbound(fake.button_callback(fake.cards["sb-old"], "Approve", "bob"), "frame-1")

    assert message is not None and press is not None
    assert press.conversation_key == message.conversation_key
    assert press.is_private == message.is_private == (kind == "1")
    assert (press.text, press.pressed, press.sender.id) == ("/approve K7PX2M", "card:sb-old", "bob")


async def test_an_answer_that_spills_into_a_second_card_keeps_stop_on_the_newest_card(start_rig, llm):
    rig = await buttons_rig(start_rig, {"edit_interval_seconds": None})  # DingTalk's own card pacing
    # About 6,000 characters, streamed slowly: past the 4,000-character card limit the answer goes on
    # in a second card, and Stop must move there (the first card is settled text now).
    llm.script(Reply(text=" ".join(f"word{i:04d}" for i in range(700)), chunk_size=40, delay=0.05))
    rig.fake.send_bot_message("1", "tell me a very long story", sender_id="alice")
    conversation = rig.p2p("alice")

    def second_card_live() -> list[Bubble] | None:
        cards = rig.fake.card_bubbles(conversation)
        return cards if len(cards) == 2 and "word05" in cards[1].text else None

    first, second = await rig.fake.wait_for(second_card_live, timeout=30)
    assert STOP in second.button_labels, second.params
    assert STOP not in first.button_labels

    press = rig.fake.press_button(second, STOP, user_id="alice")
    assert await rig.fake.wait_ack(press) == 200
    await rig.harness.idle(timeout=20)
    assert "word0699" not in second.params["content"] and second.params["content"].endswith("⏹ Stopped.")
    assert first.buttons == [] and second.buttons == []


@pytest.mark.parametrize("permitted", [True, False], ids=["name", "refused"])
async def test_an_admin_who_never_wrote_is_named_on_the_decided_card(start_rig, llm, caplog, permitted):
    # Carol is an admin who never wrote to the robot: the press carries only her staff id, so her name
    # comes from DingTalk's "query user details" API (permission qyapi_get_member); without that
    # permission the id is shown, and the log says which permission is missing.
    rig = await buttons_rig(start_rig, {"admins": ["carol"]}, **HOST)
    rig.fake.users["carol"] = "Carol Chen"
    rig.fake.contact_permission = permitted
    card, _, _ = await start_risky_turn(rig, llm)

    with caplog.at_level(logging.INFO, logger="channels.dingtalk.names"):
        press = rig.fake.press_button(card, "Approve", user_id="carol")
        assert await rig.fake.wait_ack(press) == 200
        await rig.wait_text(rig.p2p("alice"), "done with the build directory", timeout=30)
        await rig.harness.idle()

    who = "Carol Chen" if permitted else "carol"
    assert card.params["content"].endswith(f"✅ Approved by {who} — running it."), card.params["content"]
    [lookup] = rig.fake.calls("/topapi/v2/user/get")
    assert lookup["body"] == {"userid": "carol"}
    refusals = [r for r in caplog.records if "qyapi_get_member" in r.getMessage()]
    assert len(refusals) == (0 if permitted else 1)
