"""One-to-one and group conversations through the real dingtalk-stream client, in both reply modes."""

from __future__ import annotations

import httpx
import pytest
from dingtalk_stream import AckMessage

from channels.dingtalk.channel import DingTalkChannel
from tests.channels.dingtalk.conftest import dingtalk_config
from tests.conftest import make_settings
from tests.connections.conftest import LOCAL_URL
from tests.fakes.openai_server import Reply, last_user_text

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test

ANSWER = "Sure — the deploy finished and all checks are green."


def runs_for(llm, text: str) -> int:
    return sum(1 for body in llm.completions if text in last_user_text(body))


async def test_a_direct_message_is_answered_in_one_ai_card_streamed_in_place(card_rig, llm):
    llm.script(Reply(text=ANSWER, chunk_size=4, delay=0.02))
    frame_id = card_rig.fake.send_bot_message("1", "how is the deploy?", sender_id="alice")

    card = await card_rig.wait_text(card_rig.p2p("alice"), ANSWER)

    assert card.kind == "card" and card.template == "ai-card-template.schema"
    assert card.history[0] == "…"
    assert card.text == ANSWER and card.finalized
    assert len(set(card.history)) > 2, "the card was not updated while the answer streamed"
    assert [b.kind for b in card_rig.visible(card_rig.p2p("alice"))] == ["card"]
    assert await card_rig.fake.wait_ack(frame_id) == AckMessage.STATUS_OK
    # Every streaming update replaced the whole content and named the template's content key.
    updates = [c["body"] for c in card_rig.fake.calls("/v1.0/card/streaming")]
    assert updates and all(u["isFull"] and u["key"] == "content" for u in updates)
    assert updates[-1]["isFinalize"] is True


async def test_a_direct_message_gets_one_final_markdown_reply_without_a_placeholder(markdown_rig, llm):
    llm.script(Reply(text=ANSWER, chunk_size=4, delay=0.01))
    markdown_rig.fake.send_bot_message("1", "how is the deploy?", sender_id="alice")

    await markdown_rig.wait_text(markdown_rig.p2p("alice"), ANSWER)
    await markdown_rig.harness.idle()

    [message] = markdown_rig.visible(markdown_rig.p2p("alice"))
    assert message.kind == "markdown" and message.text == ANSWER
    assert message.title and message.title in ANSWER
    assert not markdown_rig.fake.calls("/v1.0/card/")


async def test_a_group_message_is_answered_only_when_the_robot_is_mentioned(rig, llm):
    ignored = rig.fake.send_bot_message("2", "lunch anyone?", sender_id="bob", conversation_id="cid-team")
    assert await rig.fake.wait_ack(ignored) == AckMessage.STATUS_OK

    rig.fake.send_bot_message("2", "what is 2+2?", sender_id="bob", conversation_id="cid-team", at_bot=True)
    await rig.wait_text("cid-team", "echo: what is 2+2?")
    await rig.harness.idle()

    assert rig.final_texts("cid-team") == ["echo: what is 2+2?"]
    assert runs_for(llm, "lunch anyone?") == 0


async def test_group_members_share_one_conversation_and_commands_work_after_a_mention(rig):
    rig.fake.send_bot_message("2", "/status", sender_id="bob", conversation_id="cid-team", at_bot=True)
    status = await rig.wait_text("cid-team", "Thread:")
    rig.fake.send_bot_message("2", "/status", sender_id="carol", conversation_id="cid-team", at_bot=True)
    await rig.fake.wait_for(lambda: len(rig.final_texts("cid-team")) == 2)
    first, second = rig.final_texts("cid-team")
    assert first.splitlines()[0] == second.splitlines()[0] == status.text.splitlines()[0]


async def test_the_same_message_delivered_twice_is_answered_once(rig, llm):
    first = rig.fake.send_bot_message("1", "only once please", sender_id="alice", msg_id="msg-dup-1")
    second = rig.fake.send_bot_message("1", "only once please", sender_id="alice", msg_id="msg-dup-1")
    await rig.wait_text(rig.p2p("alice"), "echo: only once please")
    await rig.harness.idle()
    third = rig.fake.send_bot_message("1", "only once please", sender_id="alice", msg_id="msg-dup-1")

    for frame in (first, second, third):  # every copy is acknowledged, so DingTalk stops redelivering
        assert await rig.fake.wait_ack(frame) == AckMessage.STATUS_OK
    await rig.harness.idle()
    assert rig.final_texts(rig.p2p("alice")) == ["echo: only once please"]
    assert runs_for(llm, "only once please") == 1


async def test_help_status_and_new_answer_in_the_conversation(rig, llm):
    alice = rig.p2p("alice")
    rig.fake.send_bot_message("1", "/help", sender_id="alice")
    help_text = (await rig.wait_text(alice, "Commands:")).text
    assert "/new" in help_text and "/status" in help_text

    rig.fake.send_bot_message("1", "remember the word pineapple", sender_id="alice")
    await rig.wait_text(alice, "echo: remember the word pineapple")
    rig.fake.send_bot_message("1", "/status", sender_id="alice")
    status = (await rig.wait_text(alice, "Thread:")).text
    assert "Model: default" in status and "State:" in status

    rig.fake.send_bot_message("1", "/new", sender_id="alice")
    await rig.wait_text(alice, "Started a new conversation")
    rig.fake.send_bot_message("1", "what word?", sender_id="alice")
    await rig.wait_text(alice, "echo: what word?")
    last = next(b for b in reversed(llm.completions) if "what word?" in last_user_text(b))
    assert "pineapple" not in str(last["messages"]), "the new thread still remembers the old one"


async def test_an_unknown_connect_code_is_rejected_in_the_chat(rig):
    rig.fake.send_bot_message("1", "/connect NOT-A-REAL-CODE", sender_id="alice")
    await rig.wait_text(rig.p2p("alice"), "invalid or expired")


async def test_a_connect_code_from_the_web_binds_the_dingtalk_sender_even_when_not_allowed(
    tmp_path, llm, fake_dingtalk
):
    from bot.app import create_app

    overrides = {
        "connections": {"require_bound_identity": True},
        "channels": {"dingtalk": dingtalk_config(fake_dingtalk, "markdown").model_dump()},
    }
    settings = make_settings(tmp_path, llm, **overrides)
    channel = DingTalkChannel(settings.channels.dingtalk, settings=settings)
    app = create_app(settings, channels={"dingtalk": channel})
    async with app.router.lifespan_context(app):
        await fake_dingtalk.wait_for(lambda: channel.status.state == "connected")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL) as client:
            response = await client.post("/api/channels/dingtalk/connect")
            assert response.status_code == 200, response.text
            code = response.json()["code"]
            alice = fake_dingtalk.p2p_conversation("alice")

            fake_dingtalk.send_bot_message("1", "hello before connecting", sender_id="alice")
            await fake_dingtalk.wait_for(
                lambda: any("/connect CODE" in t for t in fake_dingtalk.markdown_texts(alice))
            )

            fake_dingtalk.send_bot_message("1", f"/connect {code}", sender_id="alice")
            await fake_dingtalk.wait_for(
                lambda: any(
                    "Connected: this DingTalk account" in t for t in fake_dingtalk.markdown_texts(alice)
                )
            )
            fake_dingtalk.send_bot_message("1", "hello after connecting", sender_id="alice")
            await fake_dingtalk.wait_for(
                lambda: any("echo: hello after connecting" in t for t in fake_dingtalk.markdown_texts(alice))
            )
            [connection] = (await client.get("/api/channels/connections")).json()
            assert connection["provider"] == "dingtalk"
