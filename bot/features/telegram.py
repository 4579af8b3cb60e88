"""Wires Telegram's webhook mode into the service: the route, and the running channel it hands to.

The route has to exist when the app is built, the channel only once the service starts, so the
:class:`~webhooks.telegram.TelegramWebhookReceiver` sits between them: built here with the route, bound
to the channel at :meth:`start`, unbound at :meth:`stop`. In polling mode nothing is mounted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from bot.features import Foundation, Running
from config.channels.telegram import TelegramConfig

if TYPE_CHECKING:
    from fastapi import APIRouter

    from webhooks.telegram import TelegramWebhookReceiver

log = logging.getLogger(__name__)


class TelegramWebhookFeature:
    name = "telegram-webhook"

    def __init__(self, base: Foundation) -> None:
        self.config: TelegramConfig = base.settings.channels.telegram
        self.receiver: TelegramWebhookReceiver | None = None

    def tables(self) -> list[MetaData]:
        return []

    def routers(self) -> list[APIRouter]:
        if self.config.mode != "webhook":
            return []
        from webhooks.telegram import TelegramWebhookReceiver, build_router  # the Telegram SDK: only here

        self.receiver = TelegramWebhookReceiver()
        return [build_router(self.config, self.receiver)]

    async def start(self, running: Running) -> None:
        channel = running.channels.get("telegram")
        if self.receiver is None or channel is None:
            return
        from channels.telegram.channel import TelegramChannel

        if not isinstance(channel, TelegramChannel):
            log.error(
                "the telegram channel is a %s, not a TelegramChannel; its webhook stays off", type(channel)
            )
            return
        self.receiver.channel = channel

    async def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.channel = None
