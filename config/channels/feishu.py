"""Feishu / Lark channel settings (a self-built app with the bot capability, events over the long connection)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from config.base import ChatChannelSection, from_env

FEISHU_DOMAIN = "https://open.feishu.cn"
LARK_DOMAIN = "https://open.larksuite.com"


class FeishuConfig(ChatChannelSection):
    #: The app's credentials from the developer console (``cli_…`` and its secret).
    app_id: str | None = from_env("FEISHU_APP_ID")
    app_secret: str | None = from_env("FEISHU_APP_SECRET")
    #: Open-platform origin: ``https://open.feishu.cn`` (Feishu, China) or ``https://open.larksuite.com``
    #: (Lark, international). Also points the SDK at a self-hosted gateway or a test fake.
    domain: str = FEISHU_DOMAIN
    #: Feishu ``open_id``s (``ou_…``) allowed to talk to the bot; empty = everyone who can reach it.
    allowed_users: list[str] = []
    max_file_bytes: int = 30 * 1024 * 1024
    #: Spacing of reply calls per chat. A card accepts about 5 updates/s; 0.4 s leaves headroom.
    edit_interval_seconds: float = Field(0.4, ge=0, le=60)
    #: Stream replies into a CardKit card entity (Feishu types the new text out; needs the
    #: ``cardkit:card:write`` scope). False, or a refused scope, = one card patched in place per step.
    native_streaming: bool = True
    #: Emoji reaction added to each accepted message (Feishu emoji_type, e.g. "OK"); empty = none.
    receipt_reaction: str = "OK"

    @field_validator("domain")
    @classmethod
    def _origin_only(cls, value: str) -> str:
        value = value.rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.netloc or parts.path or parts.query:
            raise ValueError(
                f"domain must be an origin like {FEISHU_DOMAIN} or {LARK_DOMAIN} (no path), got {value!r}"
            )
        return value

    def required_secrets(self) -> dict[str, str | None]:
        return {"app_id": self.app_id, "app_secret": self.app_secret}
