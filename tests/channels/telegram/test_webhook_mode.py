"""Telegram webhook mode: Telegram (the fake) POSTs updates to the real app on a real socket.

What a user or operator notices: messages are answered without polling; a request without the secret
header (anyone who found the URL) is refused and stores nothing; an update Telegram repeats is answered
once; a busy service makes Telegram try again instead of losing the message; stopping leaves the
webhook in place for the other instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from bot.app import create_app
from bot.inbox import inbox_table
from bot.service import Service
from channels.telegram.channel import TelegramChannel
from config.loader import ConfigError
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.telegram import FakeTelegram
from tests.serving import base_url, bound_socket, serving

from .conftest import BOT_USERNAME, TEST_EDIT_INTERVAL

SECRET = "tg-webhook_Secret-0123456789"
PATH = "/api/webhooks/telegram"
HEADER = "X-Telegram-Bot-Api-Secret-Token"


@dataclass
class Served:
    url: str
    service: Service
    client: httpx.AsyncClient

    async def stored(self) -> int:
        async with self.service.db.engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(inbox_table))).scalar_one())

    async def idle(self, timeout: float = 20) -> None:
        assert self.service.manager is not None
        await asyncio.wait_for(self.service.manager.wait_idle(), timeout)


@asynccontextmanager
async def webhook_service(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, **settings_overrides: Any
) -> AsyncIterator[Served]:
    """The real app (create_app, lifespan included) under uvicorn, its public URL what Telegram calls."""
    sock = bound_socket()
    url = base_url(sock)
    telegram = {
        "enabled": True,
        "bot_token": tg.token,
        "bot_username": BOT_USERNAME,
        "api_base_url": tg.url,
        "edit_interval_seconds": TEST_EDIT_INTERVAL,
        "group_edit_interval_seconds": TEST_EDIT_INTERVAL,
        "private_drafts": False,
        "mode": "webhook",
        "webhook_secret": SECRET,
    }
    settings = make_settings(
        tmp_path, llm, server={"public_url": url}, channels={"telegram": telegram}, **settings_overrides
    )
    channel = TelegramChannel(settings.channels.telegram, settings=settings)
    app = create_app(settings, channels={"telegram": channel})
    async with serving(app, sock), httpx.AsyncClient(base_url=url) as client:
        yield Served(url, app.state.service, client)


@pytest.fixture
def tg() -> Any:
    with FakeTelegram(bot_username=BOT_USERNAME, local_mode=True, webhook_retry_seconds=0.2) as server:
        yield server


def a_message_update(tg: FakeTelegram, chat: int, text: str) -> dict[str, Any]:
    """An update exactly as the fake would POST it (not queued at the fake)."""
    message = tg.user_message(chat, text, user_id=chat, push=False)
    return {"update_id": 990_000 + chat, "message": message}


async def test_webhook_mode_registers_the_secret_and_answers_messages_telegram_posts(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    async with webhook_service(tmp_path, llm, tg) as sb:
        (registered,) = tg.calls("setWebhook")
        assert registered["params"]["url"] == f"{sb.url}{PATH}"
        assert registered["params"]["secret_token"] == SECRET
        assert registered["params"]["allowed_updates"] == ["message", "callback_query"]
        assert registered["params"]["drop_pending_updates"] is False

        tg.user_message(42, "hello over the webhook", user_id=42)
        await tg.wait_for_bot_text(42, "echo: hello over the webhook")
        update_id = tg.webhook_deliveries[0]["update_id"]
        assert tg.webhook_statuses(update_id) == [200]
        assert tg.pending_updates() == [], "a 200 answer confirmed the update at Telegram"
        assert tg.calls("getUpdates") == [], "nothing polls in webhook mode"
        health = (await sb.client.get("/health")).json()
        assert health["channels"]["telegram"]["state"] == "connected"

    assert tg.calls("deleteWebhook") == [], "stopping leaves the webhook for the other instances"
    assert tg.webhook_url == f"{sb.url}{PATH}"


@pytest.mark.parametrize("headers", [{}, {HEADER: "not-the-secret"}, {HEADER: SECRET[:-1]}])
async def test_a_request_without_the_right_secret_header_is_refused_and_stores_nothing(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI, headers: dict[str, str]
):
    async with webhook_service(tmp_path, llm, tg) as sb:
        forged = a_message_update(tg, 51, "run rm -rf / please")
        response = await sb.client.post(PATH, json=forged, headers=headers)
        assert response.status_code == 401
        assert response.json() == {"ok": False, "error": f"missing or wrong {HEADER} header"}
        assert await sb.stored() == 0
        assert tg.bot_messages(51) == []
        assert llm.requests == [], "the agent never saw it"


async def test_the_secret_header_admits_an_update_sent_by_anyone_who_has_it(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    """The counterpart of the refusal above: the same request with the header is stored and answered."""
    async with webhook_service(tmp_path, llm, tg) as sb:
        update = a_message_update(tg, 52, "hi with the secret")
        response = await sb.client.post(PATH, json=update, headers={HEADER: SECRET})
        assert response.status_code == 200
        assert response.json() == {"ok": True, "update_id": update["update_id"]}
        assert await sb.stored() == 1
        await tg.wait_for_bot_text(52, "echo: hi with the secret")


async def test_an_oversized_or_malformed_body_is_refused(tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI):
    async with webhook_service(tmp_path, llm, tg) as sb:
        big = b'{"update_id": 1, "padding": "' + b"x" * (1024 * 1024) + b'"}'
        response = await sb.client.post(PATH, content=big, headers={HEADER: SECRET})
        assert response.status_code == 413
        response = await sb.client.post(PATH, content=b"[1, 2]", headers={HEADER: SECRET})
        assert response.status_code == 400
        assert await sb.stored() == 0


async def test_an_update_telegram_repeats_is_answered_once(tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI):
    async with webhook_service(tmp_path, llm, tg) as sb:
        tg.user_message(61, "only once please", user_id=61)
        await tg.wait_for_bot_text(61, "echo: only once please")
        await sb.idle()
        first = tg.webhook_deliveries[0]
        update = {"update_id": first["update_id"], "message": tg.chat_messages(61)[0].payload}
        tg.repeat_update(update)  # Telegram never saw our 200 (a timeout) and sends it again
        await tg.wait_until(lambda: len(tg.webhook_statuses(first["update_id"])) == 2)
        assert tg.webhook_statuses(first["update_id"]) == [200, 200], "a duplicate is confirmed, too"
        await sb.idle()
        await asyncio.sleep(0.3)
        assert [m.text for m in tg.bot_messages(61)] == ["echo: only once please"]
        assert len(llm.requests) == 1
        assert await sb.stored() == 1


async def test_a_busy_service_makes_telegram_repeat_the_update_until_it_is_stored(
    tg: FakeTelegram, tmp_path: Path
):
    def slow_echo(request: dict[str, Any]) -> Reply:
        return Reply(text=f"echo: {last_user_text(request)}", chunk_size=2, delay=0.1)

    with FakeOpenAI(default_reply=slow_echo) as llm:
        async with webhook_service(tmp_path, llm, tg, bus={"queue_size": 1}):
            for chat in (71, 72, 73):
                tg.user_message(chat, f"question {chat}", user_id=chat)
            for chat in (71, 72, 73):
                await tg.wait_for_bot_text(chat, f"echo: question {chat}", timeout=30)
            statuses = [d["status"] for d in tg.webhook_deliveries]
            assert 503 in statuses, "the full service pushed back instead of holding the update in memory"
            assert statuses.count(200) == 3 and tg.pending_updates() == []


async def test_a_secret_telegram_would_refuse_is_refused_by_the_config(tmp_path: Path):
    for bad in ("has spaces", "semi;colon", "x" * 257):
        with pytest.raises(ConfigError) as caught:
            make_settings(tmp_path, channels={"telegram": {"mode": "webhook", "webhook_secret": bad}})
        assert "webhook_secret" in str(caught.value)
        assert bad not in str(caught.value), "the secret itself is not echoed"


async def test_webhook_mode_without_a_secret_names_the_missing_setting(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        make_settings(
            tmp_path, channels={"telegram": {"enabled": True, "bot_token": "1:x", "mode": "webhook"}}
        )
    assert "webhook_secret" in str(caught.value)


async def test_polling_mode_removes_a_webhook_so_getupdates_works(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    """getUpdates is refused (409) while a webhook is set; polling mode deletes it at start and polls."""
    from tests.harness import Harness

    from .conftest import telegram_config

    async with httpx.AsyncClient() as client:
        set_call = await client.post(
            f"{tg.url}/bot{tg.token}/setWebhook",
            data={"url": "http://127.0.0.1:9/hook", "secret_token": SECRET},
        )
        assert set_call.json()["ok"] is True
        refused = await client.post(f"{tg.url}/bot{tg.token}/getUpdates")
        assert refused.status_code == 409
        bad = await client.post(
            f"{tg.url}/bot{tg.token}/setWebhook", data={"url": "http://x/", "secret_token": "a b"}
        )
        assert bad.status_code == 400 and bad.json()["description"].startswith("Bad Request: ")

    settings = make_settings(tmp_path, llm)
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}):  # type: ignore[dict-item]
        assert tg.webhook_url == ""
        tg.user_message(81, "polling again", user_id=81)
        await tg.wait_for_bot_text(81, "echo: polling again")


def test_the_webhook_secret_is_masked_like_the_bot_token(tmp_path: Path):
    from config.secrets import known_secrets

    settings = make_settings(
        tmp_path,
        channels={
            "telegram": {"enabled": True, "bot_token": "1:x", "mode": "webhook", "webhook_secret": SECRET}
        },
    )
    assert SECRET in known_secrets(settings), "logs, tool output and chat mask it"


async def test_doctor_says_where_telegram_sends_updates_and_why_delivery_fails(
    tg: FakeTelegram, tmp_path: Path
):
    public = "https://127.0.0.1:9"  # nothing listens: every delivery fails to connect
    telegram = {"enabled": True, "bot_token": tg.token, "api_base_url": tg.url, "mode": "webhook",
                "webhook_secret": SECRET}  # fmt: skip
    settings = make_settings(tmp_path, server={"public_url": public}, channels={"telegram": telegram})
    channel = TelegramChannel(settings.channels.telegram, settings=settings)
    assert await channel.check() is None, "not registered yet: the next start registers it"

    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        await client.post("/setWebhook", data={"url": f"{public}{PATH}", "secret_token": SECRET})
        assert await channel.check() is None
        tg.user_message(91, "hello?", user_id=91)
        await tg.wait_until(lambda: tg.webhook_deliveries)
        problem = await channel.check()
        assert problem is not None and "last webhook delivery failed: Connection failed" in problem
        assert "1 update(s) waiting" in problem

        await client.post("/setWebhook", data={"url": "https://127.0.0.2:9/hook"})
        assert await channel.check() == (
            f"Telegram sends updates to https://127.0.0.2:9/hook, not {public}{PATH}; "
            "restart the service to register it"
        )


async def test_while_stopping_telegram_is_told_to_try_again_later(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    async with webhook_service(tmp_path, llm, tg) as sb:
        await sb.service.channels["telegram"].pause()  # what shutdown does first
        update = a_message_update(tg, 95, "during shutdown")
        response = await sb.client.post(PATH, json=update, headers={HEADER: SECRET})
        assert response.status_code == 503 and response.headers["Retry-After"] == "5"
        assert await sb.stored() == 0, "left with Telegram, which repeats it (to another instance)"
