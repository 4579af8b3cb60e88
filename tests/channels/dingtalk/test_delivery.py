"""Rate limits, broken cards, long answers and back-pressure: the final answer always arrives."""

from __future__ import annotations

import logging

import pytest
from dingtalk_stream import AckMessage

from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test

LONG_ANSWER = "The answer streams in many small pieces so the card is updated several times."


async def test_a_rate_limited_card_update_is_dropped_and_later_updates_and_the_final_text_land(card_rig, llm):
    card_rig.fake.fail_next("/v1.0/card/streaming", status=429, retry_after=0.2)
    llm.script(Reply(text=LONG_ANSWER, chunk_size=3, delay=0.03))
    card_rig.fake.send_bot_message("1", "stream please", sender_id="alice")

    card = await card_rig.wait_text(card_rig.p2p("alice"), LONG_ANSWER)

    assert card_rig.fake.injected == [{"path": "/v1.0/card/streaming", "status": 429, "errcode": None}]
    assert card.text == LONG_ANSWER and card.finalized
    assert [b.kind for b in card_rig.visible(card_rig.p2p("alice"))] == ["card"], "no fallback was needed"


async def test_send_too_fast_on_the_session_webhook_is_retried_and_delivered_once(markdown_rig):
    markdown_rig.fake.fail_next("/robot/sendBySession", errcode=130101, retry_after=0.2)
    markdown_rig.fake.send_bot_message("1", "hello?", sender_id="alice")

    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: hello?")
    await markdown_rig.harness.idle()

    assert markdown_rig.final_texts(markdown_rig.p2p("alice")) == ["echo: hello?"]
    assert len(markdown_rig.fake.calls("/robot/sendBySession")) == 2
    assert markdown_rig.fake.injected[0]["errcode"] == 130101


async def test_when_card_updates_fail_the_answer_falls_back_to_a_markdown_message(card_rig, llm):
    card_rig.fake.fail_next("/v1.0/card/streaming", status=400, times=1000)
    llm.script(Reply(text=LONG_ANSWER, chunk_size=8, delay=0.02))
    card_rig.fake.send_bot_message("1", "stream please", sender_id="alice")

    fallback = await card_rig.wait_text(card_rig.p2p("alice"), LONG_ANSWER)
    await card_rig.harness.idle()

    assert fallback.kind == "markdown"
    kinds = [b.kind for b in card_rig.visible(card_rig.p2p("alice"))]
    assert kinds == ["card", "markdown"]  # the placeholder card, then the answer as markdown


async def test_when_the_card_cannot_be_created_the_answer_arrives_as_markdown(card_rig):
    card_rig.fake.fail_next("/v1.0/card/instances", status=403, times=1000)
    card_rig.fake.send_bot_message("1", "anyone there?", sender_id="alice")

    answer = await card_rig.wait_text(card_rig.p2p("alice"), "echo: anyone there?")
    await card_rig.harness.idle()

    assert answer.kind == "markdown"
    assert card_rig.final_texts(card_rig.p2p("alice")) == ["echo: anyone there?"]


def _fence_balanced(text: str) -> bool:
    return sum(1 for line in text.splitlines() if line.strip().startswith("```")) % 2 == 0


async def test_a_card_that_reaches_nobody_falls_back_to_markdown_and_says_so_in_the_log(
    card_rig, llm, caplog
):
    # The robot was removed from the group: DingTalk creates the card, answers the deliver call with
    # HTTP 200 and reports the failure only in result[].success — the answer must not vanish with it.
    card_rig.fake.groups_without_robot.add("cid-team")
    llm.script(Reply(text="the whole answer", chunk_size=4, delay=0.05))
    with caplog.at_level(logging.WARNING, logger="channels.dingtalk.reply"):
        card_rig.fake.send_bot_message(
            "2", "status?", sender_id="bob", conversation_id="cid-team", at_bot=True
        )
        await card_rig.wait_text("cid-team", "the whole answer")
        await card_rig.harness.idle()

    assert [(b.kind, b.text) for b in card_rig.visible("cid-team")] == [("markdown", "the whole answer")]
    assert any("was not delivered" in r.getMessage() and "cid-team" in r.getMessage() for r in caplog.records)
    # One card was tried; the streamed updates did not create a new unseen card each.
    assert len(card_rig.fake.calls("/v1.0/card/instances/deliver")) == 1


async def test_a_long_answer_is_split_into_several_messages_without_breaking_code(rig, llm):
    paragraphs = [f"Paragraph {i}: " + "words " * 60 for i in range(20)]
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(150)) + "\n```"
    text = "\n\n".join([*paragraphs[:10], code, *paragraphs[10:]])
    assert len(text) > 9000
    llm.script(Reply(text=text, chunk_size=500))
    rig.fake.send_bot_message("1", "write a lot", sender_id="alice")

    await rig.wait_text(rig.p2p("alice"), "Paragraph 19:")
    await rig.harness.idle()

    parts = rig.final_texts(rig.p2p("alice"))
    assert len(parts) >= 3
    assert all(len(p) <= 5000 for p in parts)
    assert all(_fence_balanced(p) for p in parts)
    shown = "\n".join(parts)
    positions = [shown.index(f"Paragraph {i}:") for i in range(20)]
    assert positions == sorted(positions)
    assert all(f"print({i})" in shown for i in range(150))
    if rig.mode == "card":
        assert all(b.kind == "card" and b.finalized for b in rig.visible(rig.p2p("alice")))


async def test_a_full_inbox_makes_dingtalk_redeliver_instead_of_dropping_the_message(start_rig, llm):
    # One unfinished message at a time: the first one holds the only slot while it runs.
    rig = await start_rig("markdown", {"bus": {"queue_size": 1}})
    rig.fake.retry_delays = (0.5, 1.0, 2.0)  # DingTalk's retry pauses, shortened
    llm.script(Reply(text="slow answer", chunk_size=1, delay=0.1))
    rig.fake.send_bot_message("1", "first", sender_id="alice")
    await rig.fake.wait_for(lambda: llm.completions)

    data = rig.fake.build_message("1", "second", sender_id="bob", msg_id="msg-second")
    refused = rig.fake.push_callback(data)
    assert await rig.fake.wait_ack(refused) == AckMessage.STATUS_SYSTEM_EXCEPTION

    # The fake pushes the refused callback again, as DingTalk does after a failed ACK; one finds room.
    await rig.wait_text(rig.p2p("bob"), "echo: second", timeout=30)
    await rig.fake.wait_for(lambda: rig.fake.ack_code(refused) == AckMessage.STATUS_OK)
    assert rig.fake.pushes[refused] >= 2
    assert rig.final_texts(rig.p2p("bob")) == ["echo: second"]


async def test_an_answer_after_the_session_webhook_expired_is_sent_through_the_robot_api(markdown_rig):
    # DingTalk session webhooks live about 1.5 hours; this one is already past its expiry.
    data = markdown_rig.fake.build_message("1", "late answer please", sender_id="alice", webhook_ttl=-1)
    markdown_rig.fake.push_callback(data)

    answer = await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: late answer please")

    assert answer.kind == "markdown"
    assert not markdown_rig.fake.calls("/robot/sendBySession")
    [sent] = markdown_rig.fake.calls("/v1.0/robot/oToMessages/batchSend")
    assert sent["body"]["userIds"] == ["alice"] and sent["body"]["msgKey"] == "sampleMarkdown"


async def test_the_stream_answers_gateway_pings_and_reconnects_after_a_drop(markdown_rig):
    ping = markdown_rig.fake.ping()
    assert await markdown_rig.fake.wait_ack(ping) == AckMessage.STATUS_OK

    markdown_rig.fake.disconnect_clients()
    await markdown_rig.fake.wait_for(
        lambda: markdown_rig.fake.connections_opened == 2 and markdown_rig.fake.connected
    )
    await markdown_rig.fake.wait_for(lambda: markdown_rig.channel.status.state == "connected")

    markdown_rig.fake.send_bot_message("1", "still there?", sender_id="alice")
    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: still there?")


async def test_after_a_gateway_error_health_says_reconnecting_until_the_stream_is_back(markdown_rig):
    # After an error close the SDK waits 10 s before it opens again; /health must not say "connected"
    # for that time (the SDK itself would only notice at its next ping, up to a minute later).
    markdown_rig.fake.disconnect_clients(code=1011)

    await markdown_rig.fake.wait_for(lambda: markdown_rig.channel.status.state == "reconnecting", 5)
    assert "closed" in (markdown_rig.channel.status.detail or "")
    await markdown_rig.fake.wait_for(
        lambda: (
            markdown_rig.fake.connections_opened == 2 and markdown_rig.channel.status.state == "connected"
        ),
        30,
    )
    markdown_rig.fake.send_bot_message("1", "back?", sender_id="alice")
    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: back?")


async def test_tables_and_line_breaks_are_adapted_to_what_dingtalk_renders(markdown_rig, llm):
    llm.script(
        Reply(
            text="**Status**\nbuild ok\ntests ok\n\n| name | state |\n|---|---|\n| api | up |\n| db | down |"
        )
    )
    markdown_rig.fake.send_bot_message("1", "status table", sender_id="alice")

    message = await markdown_rig.wait_text(markdown_rig.p2p("alice"), "api · up")

    assert message.text == "**Status**  \nbuild ok  \ntests ok\n\nname · state  \napi · up  \ndb · down"
    assert message.title == "Status"
