"""``POST /api/webhooks/telegram``: check the secret header, bound the body, then store the update.

Telegram does not sign webhook bodies; it repeats the ``secret_token`` given to ``setWebhook`` in the
``X-Telegram-Bot-Api-Secret-Token`` header. The header is compared (in constant time) before the body is
read, so a caller without the secret makes us do nothing but answer 401, and nothing is stored.
Everything after that is the channel's (:class:`channels.telegram.webhook.WebhookIntake`): parse with
python-telegram-bot, store in the inbox, and only then answer 200 (Telegram repeats anything else).
"""

from __future__ import annotations

import hmac
import json
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from channels.telegram.channel import TelegramChannel
from channels.telegram.webhook import RETRY_AFTER_SECONDS, SECRET_HEADER, WEBHOOK_PATH, WebhookOutcome
from config.channels.telegram import TelegramConfig
from webhooks.route import read_capped

log = logging.getLogger(__name__)

#: Telegram's updates are a few KB (a message of 4096 characters with entities); far more is not theirs.
MAX_BODY_BYTES = 1024 * 1024


class TelegramWebhookReceiver:
    """Between the route (mounted when the app is built) and the channel (running only after start)."""

    def __init__(self) -> None:
        #: Bound by the service once channels exist; None before start and after stop.
        self.channel: TelegramChannel | None = None

    async def receive(self, payload: dict[str, object]) -> WebhookOutcome:
        intake = self.channel.webhook if self.channel is not None else None
        if intake is None:
            return WebhookOutcome(
                503, {"ok": False, "error": "the Telegram channel is not running"}, RETRY_AFTER_SECONDS
            )
        return await intake.receive(payload)


def _error(status: int, message: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return JSONResponse({"ok": False, "error": message}, status_code=status, headers=headers)


def secret_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison of the header with the configured secret."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def build_router(config: TelegramConfig, receiver: TelegramWebhookReceiver) -> APIRouter:
    router = APIRouter(tags=["telegram"])

    @router.post(
        WEBHOOK_PATH,
        summary="Receive a Telegram update (webhook mode)",
        description=__doc__ or "",
        response_description="{ok, update_id}: the update is stored (or was not for this bot)",
        responses={
            400: {"description": "body is not a JSON object"},
            401: {"description": "missing or wrong X-Telegram-Bot-Api-Secret-Token"},
            413: {"description": "body larger than 1 MB"},
            500: {"description": "the update could not be stored; Telegram repeats it"},
            503: {"description": "webhook not configured, channel not running, or back-pressure"},
        },
    )
    async def telegram_webhook(request: Request) -> Response:
        secret = config.webhook_secret
        if not secret:
            return _error(503, "Telegram webhooks are not configured: set channels.telegram.webhook_secret")
        if not secret_matches(secret, request.headers.get(SECRET_HEADER)):
            log.warning("refused a Telegram webhook request without the right %s header", SECRET_HEADER)
            return _error(401, f"missing or wrong {SECRET_HEADER} header")
        body = await read_capped(request, MAX_BODY_BYTES)
        if body is None:
            return _error(413, f"body larger than {MAX_BODY_BYTES} bytes")
        try:
            payload = json.loads(body)
        except ValueError:
            return _error(400, "body is not valid JSON")
        if not isinstance(payload, dict):
            return _error(400, "body must be a JSON object (a Telegram Update)")
        outcome = await receiver.receive(payload)
        headers = {"Retry-After": str(outcome.retry_after)} if outcome.retry_after else None
        return JSONResponse(outcome.body, status_code=outcome.status, headers=headers)

    return router
