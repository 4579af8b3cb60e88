"""Telegram channel settings (a bot created with @BotFather; long polling or a webhook)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from config.base import ChatChannelSection, from_env

#: setWebhook's ``secret_token``: 1-256 characters, only A-Z, a-z, 0-9, ``_`` and ``-`` (Bot API).
WEBHOOK_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class TelegramConfig(ChatChannelSection):
    #: The token @BotFather gives you (``123456:ABC…``). Secret: never logged.
    bot_token: str | None = from_env("TELEGRAM_BOT_TOKEN")
    #: The bot's @username without the ``@``. Optional: it is read from ``getMe`` at start; when set,
    #: a mismatch with the token's bot is reported by ``switchboard doctor``.
    bot_username: str | None = None
    #: Bot API root. Point it at a self-hosted Bot API server or a local fake; ``/bot<token>`` and
    #: ``/file/bot<token>`` are appended.
    api_base_url: str = "https://api.telegram.org"
    #: Telegram user ids or @usernames allowed to talk to the bot; empty = everyone.
    allowed_users: list[str] = []
    #: Largest inbound file fetched (the Bot API's ``getFile`` stops at 20 MB).
    max_file_bytes: int = Field(20 * 1024 * 1024, gt=0)
    #: Spacing of reply calls (send/edit) in a private chat. Telegram allows about 1 message/s per chat;
    #: lower only for tests or a self-hosted Bot API server.
    edit_interval_seconds: float = Field(1.0, ge=0, le=60)
    #: Spacing of reply calls in groups (Telegram allows about 20 messages per minute per group).
    group_edit_interval_seconds: float = Field(3.0, ge=0, le=60)
    #: Stream answers in private chats as a native draft (``sendMessageDraft``) and send the final text
    #: as one new message, instead of editing a placeholder. Groups always edit (drafts are DM-only).
    #: Off by default: a draft cannot carry the ⏹ Stop button (typed /stop still works with drafts on).
    private_drafts: bool = False
    #: While nothing visible changes (the model thinks, a tool runs) "typing…" is re-sent this often.
    #: Telegram shows it for 5 s or until the bot's next message, so keep it a little under 5.
    typing_interval_seconds: float = Field(4.5, gt=0, le=5)
    #: Long-poll duration of one ``getUpdates`` call.
    poll_timeout_seconds: int = Field(25, ge=0, le=50)
    #: At stop, how long long polling may keep offering the updates it already fetched to a service that
    #: refuses them (full); what is still not stored then stays unconfirmed at Telegram for the next start.
    stop_store_grace_seconds: float = Field(5.0, ge=0, le=60)
    #: How updates arrive. ``polling``: this process asks with ``getUpdates`` (one instance per token).
    #: ``webhook``: Telegram POSTs them to ``/api/webhooks/telegram`` on whichever instance the load
    #: balancer picks (docs/channels/telegram.md, "Webhook mode").
    mode: Literal["polling", "webhook"] = "polling"
    #: Webhook mode: the ``secret_token`` given to ``setWebhook``; Telegram sends it back in the
    #: ``X-Telegram-Bot-Api-Secret-Token`` header and requests without it are refused. Secret.
    webhook_secret: str | None = from_env("TELEGRAM_WEBHOOK_SECRET")
    #: Webhook mode: the URL registered with Telegram; default ``server.public_url`` +
    #: ``/api/webhooks/telegram``. Telegram requires HTTPS on port 443, 80, 88 or 8443.
    webhook_url: str | None = None

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: str | None) -> str | None:
        if value and not WEBHOOK_SECRET.match(value):
            raise ValueError(
                "must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule for secret_token)"
            )
        return value or None

    def required_secrets(self) -> dict[str, str | None]:
        if self.mode == "webhook":
            return {"bot_token": self.bot_token, "webhook_secret": self.webhook_secret}
        return {"bot_token": self.bot_token}
