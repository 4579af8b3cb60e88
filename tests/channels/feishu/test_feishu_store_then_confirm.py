"""Store, then confirm: an event is answered 200 only once the inbox holds its message. Whatever Feishu did
not get a 200 for within its deadline comes back (the fake re-pushes like Feishu) and is answered once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.channels.feishu.conftest import ALICE, BOB, running_bot
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.slow  # waits out the fake's 3-second answer deadline


@pytest.fixture
def lark() -> Iterator[FakeLark]:
    # Feishu's own 3 s deadline; the re-push schedule shortened from 5 s / 5 min / 1 h / 6 h.
    with FakeLark(retry_delays=(0.5, 1.0, 2.0, 4.0)) as server:
        yield server  # type: ignore[misc]


async def test_an_event_answered_in_time_is_not_pushed_again(bot):
    event = bot.lark.send_message_event("oc_p2p_alice", "p2p", ALICE, "once")
    await bot.lark.wait_for_text("oc_p2p_alice", "echo: once")
    await bot.lark.wait_for(lambda f: not f.retrying, timeout=10)
    assert [a["code"] for a in bot.lark.acks_for(event)] == [200]
    assert bot.lark.pushes[event["header"]["event_id"]] == 1


async def test_a_stop_while_the_bus_is_full_loses_nothing_and_the_restart_answers_once(tmp_path, llm, lark):
    overrides = {"bus": {"queue_size": 1}}
    async with running_bot(tmp_path, llm, lark, settings_overrides=overrides) as bot:
        llm.script(Reply(text="the first answer", chunk_size=2, delay=0.1))
        bot.lark.send_message_event("oc_p2p_alice", "p2p", ALICE, "first")
        await bot.lark.wait_for(lambda f: f.chat("oc_p2p_alice"))
        pushed = bot.lark.send_message_event("oc_p2p_bob", "p2p", BOB, "sent during the crunch")
        await bot.lark.wait_for(lambda f: f.acks_for(pushed))
        assert all(a["code"] != 200 for a in bot.lark.acks_for(pushed))
    assert lark.chat("oc_p2p_bob") == []  # the service is gone; Feishu still owes us the event

    async with running_bot(tmp_path, llm, lark, settings_overrides=overrides) as again:
        await again.lark.wait_for_text("oc_p2p_bob", "echo: sent during the crunch", timeout=30)
        await again.lark.wait_for_text("oc_p2p_alice", "the first answer", timeout=30)
        await again.harness.idle(timeout=30)
        await again.lark.wait_for(lambda f: not f.retrying, timeout=20)

    assert [m.text for m in lark.chat("oc_p2p_bob")] == ["echo: sent during the crunch"]
    assert [m.text for m in lark.chat("oc_p2p_alice")] == ["the first answer"]
    assert [a["code"] for a in lark.acks_for(pushed)][-1] == 200
    assert lark.given_up == []
