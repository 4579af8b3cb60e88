"""Access token lifecycle, the doctor check, and how messages are normalised."""

from __future__ import annotations

import asyncio

import pytest

from channels.dingtalk.channel import DingTalkChannel
from tests.channels.dingtalk.conftest import dingtalk_config


@pytest.mark.slow
async def test_the_access_token_is_cached_and_refreshed_before_it_expires(start_rig, fake_dingtalk):
    fake_dingtalk.token_ttl = 2  # seconds; the channel refreshes at half-life for short tokens
    rig = await start_rig("card")
    rig.fake.send_bot_message("1", "first", sender_id="alice")
    await rig.wait_text(rig.p2p("alice"), "echo: first")
    fetched = len(fake_dingtalk.calls("/v1.0/oauth2/accessToken"))
    assert len(fake_dingtalk.calls("/v1.0/card/")) > fetched, "the token was not reused across calls"

    await asyncio.sleep(2.2)  # let the token expire at the fake (time passing, not a speed assertion)
    rig.fake.send_bot_message("1", "second", sender_id="alice")
    await rig.wait_text(rig.p2p("alice"), "echo: second")

    assert len(fake_dingtalk.calls("/v1.0/oauth2/accessToken")) > fetched
    assert fake_dingtalk.rejected_tokens == [], "an expired token was used"


async def test_doctor_check_passes_with_good_credentials_and_names_the_problem_otherwise(fake_dingtalk):
    good = DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown"))
    assert await good.check() is None

    bad = DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown", client_secret="wrong-secret"))
    problem = await bad.check()
    assert problem is not None and "access token" in problem
    assert "wrong-secret" not in problem

    unreachable = DingTalkChannel(
        dingtalk_config(fake_dingtalk, "markdown", api_base_url="http://127.0.0.1:9")
    )
    assert "access token" in (await unreachable.check() or "")


@pytest.mark.slow
async def test_a_wrong_secret_leaves_the_channel_reconnecting_with_a_clear_status(fake_dingtalk):
    channel = DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown", client_secret="wrong-secret"))

    async def sink(message):  # never reached
        return True

    await asyncio.wait_for(channel.start(sink), 30)
    try:
        await fake_dingtalk.wait_for(lambda: channel.status.state == "reconnecting")
        assert "client_id/secret" in (channel.status.detail or "")
        assert "wrong-secret" not in (channel.status.detail or "")
    finally:
        await channel.stop()
    assert channel.status.state == "stopped"


@pytest.mark.slow
async def test_stop_ends_the_sdks_own_stream_loop_and_a_restart_connects_again(fake_dingtalk):
    # The SDK's start() treats a cancellation as a network error and retries; stop() must still end it,
    # or every restart would leave a second client on the gateway, answering (and ACKing) messages.
    channel = DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown"))

    async def sink(message):
        return True

    await channel.start(sink)
    await fake_dingtalk.wait_for(lambda: fake_dingtalk.connected and channel.status.state == "connected")
    thread = channel._thread
    await channel.stop()

    assert thread is not None and not thread.is_alive()
    await fake_dingtalk.wait_for(lambda: not fake_dingtalk.connected)
    await channel.start(sink)
    try:
        await fake_dingtalk.wait_for(lambda: fake_dingtalk.connected and channel.status.state == "connected")
        assert fake_dingtalk.connections_opened == 2 and fake_dingtalk.open_connections == 1
    finally:
        await channel.stop()


def test_missing_credentials_are_a_clear_error(fake_dingtalk):
    with pytest.raises(ValueError, match="client_id and client_secret"):
        DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown", client_secret=None))


def test_messages_are_normalised_into_conversations(fake_dingtalk):
    channel = DingTalkChannel(dingtalk_config(fake_dingtalk, "markdown"))
    p2p = channel.to_inbound(fake_dingtalk.build_message("1", "  hi  ", sender_id="alice", msg_id="m-1"))
    assert p2p is not None
    assert (p2p.workspace, p2p.chat, p2p.sender.id, p2p.text) == ("ding-corp-1", "alice", "alice", "hi")
    assert p2p.platform_message_id == "m-1" and p2p.is_private and not p2p.mentioned
    assert p2p.context["session_webhook"].startswith(fake_dingtalk.url)
    assert isinstance(p2p.context["session_webhook_expires_ms"], int)

    group = channel.to_inbound(
        fake_dingtalk.build_message("2", "/help", sender_id="bob", conversation_id="cid-x", at_bot=True)
    )
    assert group is not None
    assert (group.chat, group.text, group.mentioned, group.is_private) == ("cid-x", "/help", True, False)
    assert channel.to_inbound(fake_dingtalk.build_message("2", "chatter", conversation_id="cid-x")) is None
