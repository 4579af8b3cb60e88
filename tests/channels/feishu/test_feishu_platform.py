"""The platform edge: tokens, acks and back-pressure, fragments, the SDK thread and the service's loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from channels.feishu.channel import FeishuChannel
from channels.memory import MemoryChannel
from config.channels.feishu import FeishuConfig
from tests.channels.feishu.conftest import ALICE, feishu_section, running_bot
from tests.conftest import make_settings
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import Reply

P2P = "oc_p2p_alice"


def api_calls(lark: FakeLark) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in lark.requests if r["path"].startswith("/open-apis/im/")]


@pytest.mark.slow
async def test_the_tenant_token_is_refreshed_before_it_expires(tmp_path, llm):
    # expire=601 s: the SDK keeps a token until 10 minutes before expiry, i.e. for about one second.
    with FakeLark(token_expire=601) as lark:
        async with running_bot(tmp_path, llm, lark) as bot:
            bot.lark.send_message_event(P2P, "p2p", ALICE, "before the refresh")
            await bot.lark.wait_for_text(P2P, "echo: before the refresh")
            await bot.harness.idle()
            early = {r["authorization"] for r in api_calls(lark)}
            issued = lark.token_requests
            await asyncio.sleep(1.5)  # let the cached token pass its refresh point
            bot.lark.send_message_event(P2P, "p2p", ALICE, "after the refresh")
            await bot.lark.wait_for_text(P2P, "echo: after the refresh")
            await bot.harness.idle()
            assert lark.token_requests > issued
            late = {r["authorization"] for r in api_calls(lark)} - early
            assert late, "later calls should carry a new token"
            for request in api_calls(lark):
                token = request["authorization"].removeprefix("Bearer ")
                assert request["at"] <= lark.tokens[token], "a call went out with an expired token"


@pytest.mark.slow
async def test_a_revoked_tenant_token_is_replaced_and_the_reply_still_lands(bot):
    bot.lark.send_message_event(P2P, "p2p", ALICE, "warm up")
    await bot.lark.wait_for_text(P2P, "echo: warm up")
    await bot.harness.idle()
    bot.lark.tokens.clear()  # the platform revokes every token it issued
    bot.lark.send_message_event(P2P, "p2p", ALICE, "still there?")
    await bot.lark.wait_for_text(P2P, "echo: still there?")


@pytest.mark.slow
async def test_when_the_inbox_is_full_the_event_is_not_acked_and_its_redelivery_is_answered(tmp_path, llm):
    with FakeLark(retry_delays=(0.5, 1.0, 2.0)) as lark:
        overrides = {"bus": {"queue_size": 1}}
        async with running_bot(tmp_path, llm, lark, settings_overrides=overrides) as bot:
            llm.script(Reply(text="a slow answer", chunk_size=2, delay=0.2))
            bot.lark.send_message_event("oc_first", "p2p", ALICE, "occupy the inbox")
            await bot.lark.wait_for(lambda f: f.chat("oc_first"))
            refused = bot.lark.message_event(P2P, "p2p", ALICE, "no room for me")
            bot.lark.push_event(refused)
            await bot.lark.wait_for(lambda f: f.acks_for(refused))
            assert bot.lark.acks_for(refused)[0]["code"] == 500
            # Feishu pushes what was not answered with 200 again; one of those finds room.
            await bot.lark.wait_for_text(P2P, "echo: no room for me", timeout=30)
            codes = [a["code"] for a in bot.lark.acks_for(refused)]
            assert codes[-1] == 200 and set(codes[:-1]) == {500}


@pytest.mark.slow
async def test_an_event_split_over_several_frames_is_reassembled(bot):
    bot.lark.send_message_event(P2P, "p2p", ALICE, "split " + "long " * 60 + "end", fragments=3)
    card = await bot.lark.wait_for_text(P2P, "long end")
    assert card.text == "echo: split " + "long " * 60 + "end"


@pytest.mark.slow
async def test_the_service_loop_keeps_answering_other_chats_while_feishu_token_calls_hang(
    tmp_path, llm, lark
):
    memory = MemoryChannel("memory")
    async with running_bot(tmp_path, llm, lark, channels={"memory": memory}) as bot:
        bot.channel.api.forget_token()
        lark.hold("tenant_access_token")
        try:
            bot.lark.send_message_event(P2P, "p2p", ALICE, "feishu question")
            await lark.wait_for(lambda f: f.held >= 1)
            await memory.say("memory question")
            await memory.wait_for_text("echo: memory question", timeout=20)
            health = await bot.service.health()
            assert health["channels"]["feishu"]["state"] == "connected"
            assert bot.lark.chat(P2P) == []  # Feishu's reply is still waiting for its token
        finally:
            lark.release()
        await bot.lark.wait_for_text(P2P, "echo: feishu question")


@pytest.mark.slow
async def test_the_long_connection_pings_and_shows_as_connected_then_closes_on_stop(tmp_path, llm, lark):
    async with running_bot(tmp_path, llm, lark) as bot:
        await lark.wait_for(lambda f: f.pings >= 1)
        health = await bot.service.health()
        assert health["channels"]["feishu"] == {
            "state": "connected",
            "detail": lark.bot_name,
            "intake": "receiving",
        }
        channel = bot.channel
    await lark.wait_for(lambda f: not f.connected)
    assert channel.status.state == "stopped"
    assert not [t for t in threading.enumerate() if t.name == "feishu-ws"]


@pytest.mark.slow
async def test_doctor_check_reports_rejected_credentials_clearly(lark):
    good = FeishuChannel(FeishuConfig(**feishu_section(lark)))
    assert await good.check() is None
    bad = FeishuChannel(FeishuConfig(**feishu_section(lark, app_secret="wrong-secret")))
    problem = await bad.check()
    assert problem is not None and "credentials" in problem
    assert "wrong-secret" not in problem


@pytest.mark.slow
async def test_wrong_credentials_put_the_channel_in_error_without_stopping_the_service(tmp_path, llm, lark):
    memory = MemoryChannel("memory")
    async with running_bot(
        tmp_path, llm, lark, channels={"memory": memory}, wait=False, app_secret="nope"
    ) as bot:
        assert bot.channel.status.state == "error"
        await memory.say("still alive?")
        await memory.wait_for_text("echo: still alive?")


def test_a_domain_with_a_path_is_refused_with_a_clear_message(tmp_path):
    with pytest.raises(Exception, match="domain must be an origin"):
        make_settings(tmp_path, channels={"feishu": {"domain": "https://open.feishu.cn/open-apis"}})
    settings = make_settings(tmp_path, channels={"feishu": {"domain": "https://open.larksuite.com/"}})
    assert settings.channels.feishu.domain == "https://open.larksuite.com"
