"""Store, then confirm: a robot message is ACKed 200 only once the inbox holds it. What DingTalk got no
successful ACK for is pushed again (the fake redelivers) and answered exactly once — also after a stop."""

from __future__ import annotations

import pytest
from dingtalk_stream import AckMessage

from tests.channels.dingtalk.conftest import _rig
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.slow  # whole services and the fake's ACK deadline


async def test_a_callback_acked_in_time_is_not_pushed_again(markdown_rig):
    fake = markdown_rig.fake
    pushed = fake.send_bot_message("1", "once", sender_id="alice")
    await markdown_rig.wait_text(markdown_rig.p2p("alice"), "echo: once")
    await fake.wait_for(lambda: not fake.retrying, timeout=15)
    assert fake.ack_code(pushed) == AckMessage.STATUS_OK
    assert fake.pushes[pushed] == 1


async def test_a_stop_while_the_bus_is_full_loses_nothing_and_the_restart_answers_once(
    tmp_path, llm, fake_dingtalk
):
    fake = fake_dingtalk
    fake.retry_delays = (0.5, 1.0, 2.0, 4.0)  # DingTalk's retry pauses, shortened
    overrides = {"bus": {"queue_size": 1}}
    # No "working on it" notice: this test counts the answers, and a turn held up by the full bus and
    # the restart takes longer than the default 5 s on a slow machine.
    quiet = {"progress_notice_after_seconds": None}
    rig = await _rig(tmp_path, llm, fake, "markdown", overrides, **quiet)
    try:
        llm.script(Reply(text="the first answer", chunk_size=1, delay=0.1))
        fake.send_bot_message("1", "first", sender_id="alice")
        await fake.wait_for(lambda: llm.completions)
        pushed = fake.push_callback(fake.build_message("1", "during the crunch", sender_id="bob"))
        assert await fake.wait_ack(pushed) == AckMessage.STATUS_SYSTEM_EXCEPTION
    finally:
        await rig.harness.stop()
    assert rig.final_texts(rig.p2p("bob")) == []  # the service is gone; DingTalk still holds the callback

    again = await _rig(tmp_path, llm, fake, "markdown", overrides, **quiet)
    try:
        await again.wait_text(again.p2p("bob"), "echo: during the crunch", timeout=30)
        await again.wait_text(again.p2p("alice"), "the first answer", timeout=30)
        await again.harness.idle(timeout=30)
        await fake.wait_for(lambda: not fake.retrying, timeout=20)
    finally:
        await again.harness.stop()

    assert again.final_texts(again.p2p("bob")) == ["echo: during the crunch"]
    assert again.final_texts(again.p2p("alice")) == ["the first answer"]
    assert fake.ack_code(pushed) == AckMessage.STATUS_OK
    assert fake.given_up == []
