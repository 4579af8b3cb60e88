"""The channel's connection to Telegram: start-up, a competing poller, back-pressure, doctor, /start CODE."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bot.app import create_app
from channels.telegram.channel import TelegramChannel
from tests.conftest import make_settings
from tests.connections.conftest import LOCAL_URL
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

from .conftest import BOT_USERNAME, telegram_config


async def test_the_channel_connects_and_reports_its_bot_in_health(tg: FakeTelegram, tg_harness):
    health = await tg_harness.service.health()
    assert health["channels"]["telegram"] == {
        "state": "connected",
        "detail": f"@{BOT_USERNAME}, long polling",
        "intake": "receiving",
    }
    assert [c["method"] for c in tg.calls()][:2] == ["getMe", "deleteWebhook"]


async def test_a_second_poller_on_the_same_token_shows_as_a_conflict_without_a_hot_loop(
    tg: FakeTelegram, tg_harness
):
    channel = tg_harness.channels["telegram"]
    tg.conflict_on_getupdates = True

    await tg.wait_until(lambda: channel.status.state == "error", timeout=20)
    health = await tg_harness.service.health()
    assert health["status"] == "degraded"
    detail = health["channels"]["telegram"]["detail"]
    assert "409 Conflict" in detail and "another process is polling" in detail and "paused" in detail

    polls = len(tg.calls("getUpdates"))
    await asyncio.sleep(1.5)
    assert len(tg.calls("getUpdates")) <= polls + 1, "polling paused instead of retrying at once"


async def test_a_wrong_token_fails_start_up_with_a_clear_error(tg: FakeTelegram, tg_settings):
    channel = TelegramChannel(telegram_config(tg, bot_token="999:wrong"), settings=tg_settings)
    async with Harness.running(tg_settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        health = await harness.service.health()
    state = health["channels"]["telegram"]
    assert state["state"] == "error"
    assert "rejected bot_token" in state["detail"] and "999:wrong" not in state["detail"]


async def test_doctor_check_accepts_the_token_and_explains_a_wrong_one(tg: FakeTelegram, tg_settings):
    good = TelegramChannel(telegram_config(tg), settings=tg_settings)
    wrong_token = TelegramChannel(telegram_config(tg, bot_token="1:nope"), settings=tg_settings)
    wrong_name = TelegramChannel(telegram_config(tg, bot_username="someone_else_bot"), settings=tg_settings)
    unreachable = TelegramChannel(
        telegram_config(tg, api_base_url="http://127.0.0.1:9"), settings=tg_settings
    )

    assert await good.check() is None
    assert "rejected bot_token" in (await wrong_token.check() or "")
    assert "belongs to @switchboard_bot" in (await wrong_name.check() or "")
    assert "cannot reach the Bot API" in (await unreachable.check() or "")


@pytest.mark.slow
async def test_when_the_service_is_full_updates_wait_and_are_all_answered(tg: FakeTelegram, tmp_path, llm):
    from tests.fakes.openai_server import Reply

    settings = make_settings(tmp_path, llm, bus={"queue_size": 1})
    llm.script(Reply(text="slow answer one", chunk_size=4, delay=0.05))
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        for chat in (51, 52, 53):
            tg.user_message(chat, f"hello {chat}", user_id=chat)
        await tg.wait_for_bot_text(51, "slow answer one", timeout=30)
        await tg.wait_for_bot_text(52, "echo: hello 52", timeout=30)
        await tg.wait_for_bot_text(53, "echo: hello 53", timeout=30)
        await harness.idle()
        assert harness.service.bus.refused >= 1, "the service pushed back at least once"
    assert len(llm.completions) == 3


def component_up(metrics_text: str, component: str) -> float | None:
    for line in metrics_text.splitlines():
        if line.startswith(f'switchboard_component_up{{component="{component}"}}'):
            return float(line.split()[-1])
    return None


async def test_health_and_metrics_say_not_receiving_while_polls_fail_and_receiving_once_they_succeed(
    tg: FakeTelegram, tmp_path, llm
):
    """A Bot API that answers getUpdates with 502 for a while: the channel stays "connected" for replies
    but /health's intake and switchboard_component_up say it receives nothing, with Telegram's answer as
    the reason; once polls succeed again both say so, and what was sent meanwhile is answered."""
    settings = make_settings(tmp_path, llm, channels={"telegram": telegram_config(tg).model_dump()})
    channel = TelegramChannel(settings.channels.telegram, settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        app = create_app(settings, service=harness.service)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sb") as client:

            async def intake() -> str:
                return str((await client.get("/health")).json()["channels"]["telegram"]["intake"])

            async def up() -> float | None:
                return component_up((await client.get("/metrics")).text, "channel:telegram")

            assert await intake() == "receiving"
            assert await up() == 1
            tg.fail_next("getUpdates", 502, description="Bad Gateway", times=3)
            failing = ""
            while not failing.startswith("not receiving"):
                failing = await intake()
                await asyncio.sleep(0.05)
            assert failing == "not receiving (polls failing: getUpdates failed: Bad Gateway)", failing
            assert await up() == 0
            tg.user_message(61, "sent while polls fail")
            await tg.wait_for_bot_text(61, "echo: sent while polls fail", timeout=30)
            assert await intake() == "receiving"
            assert await up() == 1


async def test_start_with_a_connect_code_binds_the_telegram_account(tg: FakeTelegram, tmp_path, llm):
    # No bot_username in the config: the deep link carries the name getMe answered.
    config = telegram_config(tg).model_dump()
    config["bot_username"] = None
    settings = make_settings(tmp_path, llm, channels={"telegram": config})
    channel = TelegramChannel(settings.channels.telegram, settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        app = create_app(settings, service=harness.service)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL_URL) as client:
            response = await client.post("/api/channels/telegram/connect")
            assert response.status_code == 200, response.text
            issued = response.json()
        assert issued["url"] == f"https://t.me/{BOT_USERNAME}?start={issued['code']}"

        tg.user_message(42, f"/start {issued['code']}", user_id=4242)
        answer = await tg.wait_for_bot_text(42, "Connected")
        tg.user_message(42, f"/start {issued['code']}", user_id=4242)
        await tg.wait_until(lambda: len(tg.bot_texts(42)) == 2)
        await harness.idle()

    assert "this Telegram account now belongs to" in answer.text
    assert "already" in tg.bot_texts(42)[1] or "already been used" in tg.bot_texts(42)[1]
    assert llm.completions == []
