"""Telegram webhook mode: Telegram POSTs each update to us, and a 2xx answer is the confirmation.

Why a webhook: with long polling only one process may call ``getUpdates`` per token, so the instance
that polls is the only one that hears Telegram. With a webhook Telegram sends every update to one URL,
and a load balancer can hand each request to any instance sharing the database.

Store, then confirm, here too: Telegram repeats a request that did not get a ``2xx`` answer. So
:meth:`WebhookIntake.receive` answers 200 only once the message is in the durable inbox (or was not for
this bot); while the service pushes back, or is stopping, it answers 503 and Telegram tries again later
(possibly on another instance). A repeated update (same ``update_id``, e.g. our first 200 was lost) is
the same message to the inbox, which stores it once: it is answered 200 and not run again.

The secret header is checked by the HTTP route (:mod:`webhooks.telegram`) before this module sees
anything; this one parses and stores.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import telegram.error as tg_errors
from telegram import Bot, Update, WebhookInfo

from channels.errors import Backpressure, ChannelError
from channels.telegram.polling import ALLOWED_UPDATES, StoreUpdate
from channels.telegram.transport import map_error
from config.channels.telegram import TelegramConfig
from config.schema import Settings

log = logging.getLogger(__name__)

#: Where the service serves Telegram's requests (mounted by :mod:`webhooks.telegram`).
WEBHOOK_PATH = "/api/webhooks/telegram"
#: The header Telegram puts the registered ``secret_token`` in.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: What a refused request tells Telegram (and a load balancer) about when to try again.
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True, slots=True)
class WebhookOutcome:
    """The HTTP answer for one request: Telegram retries anything but 2xx."""

    status: int
    body: dict[str, Any]
    retry_after: int | None = None


def registered_url(config: TelegramConfig, settings: object) -> str | None:
    """``webhook_url`` if set, else ``server.public_url`` + :data:`WEBHOOK_PATH`; None without either."""
    if config.webhook_url:
        return config.webhook_url
    if isinstance(settings, Settings) and settings.server.public_url:
        return settings.server.public_url.rstrip("/") + WEBHOOK_PATH
    return None


class WebhookIntake:
    """Registers the webhook at start, then turns each verified request body into a stored message."""

    def __init__(self, bot: Bot, store: StoreUpdate, *, allowed_updates: Sequence[str] = ALLOWED_UPDATES):
        self.bot = bot
        self.store = store
        self.allowed_updates = list(allowed_updates)
        self.accepting = False
        self.url: str | None = None

    async def register(self, url: str, secret: str) -> None:
        """``setWebhook`` with the secret; pending updates are kept (Telegram delivers them next).

        Raises :class:`ChannelError` naming what Telegram refused (never the secret).
        """
        try:
            await self.bot.set_webhook(
                url=url,
                secret_token=secret,
                allowed_updates=self.allowed_updates,
                drop_pending_updates=False,
            )
        except tg_errors.TelegramError as exc:
            raise ChannelError(f"Telegram refused setWebhook for {url}: {map_error(exc)}") from None
        self.url = url
        self.accepting = True

    def close(self) -> None:
        """Pause: later requests get 503, so Telegram repeats them (to another instance, or after start)."""
        self.accepting = False

    async def receive(self, payload: dict[str, Any]) -> WebhookOutcome:
        """Parse with python-telegram-bot (as polling does), store, and only then say 200."""
        if not self.accepting:
            return _refused(503, "the Telegram channel is stopping; Telegram will repeat this update")
        try:
            update = Update.de_json(payload, self.bot)
        except Exception as exc:  # an update PTB cannot read will not get better when repeated
            log.warning("could not parse a Telegram webhook update: %s: %s", type(exc).__name__, exc)
            return WebhookOutcome(200, {"ok": True, "skipped": "unreadable update"})
        try:
            await self.store(update)
        except Backpressure as exc:
            log.warning("service is busy (%s); Telegram will repeat update %s", exc, update.update_id)
            return _refused(503, f"service busy: {exc}")
        except Exception as exc:
            log.exception("storing Telegram update %s failed; Telegram will repeat it", update.update_id)
            return _refused(500, f"could not store the update: {type(exc).__name__}")
        return WebhookOutcome(200, {"ok": True, "update_id": update.update_id})


def webhook_problem(info: WebhookInfo, expected: str | None) -> str | None:
    """What ``switchboard doctor`` says about ``getWebhookInfo`` in webhook mode; None when it is fine.

    Not registered yet is fine (the next start registers it); a different URL or Telegram's last
    delivery error is what an operator needs to see, since updates then go nowhere.
    """
    if not info.url:
        return None
    if expected and info.url != expected:
        return f"Telegram sends updates to {info.url}, not {expected}; restart the service to register it"
    if info.last_error_message:
        return (
            f"Telegram's last webhook delivery failed: {info.last_error_message} "
            f"({info.pending_update_count} update(s) waiting)"
        )
    return None


def _refused(status: int, message: str) -> WebhookOutcome:
    return WebhookOutcome(status, {"ok": False, "error": message}, RETRY_AFTER_SECONDS)
