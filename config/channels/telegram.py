from __future__ import annotations

from config.base import ChannelSection


class TelegramConfig(ChannelSection):
    bot_token: str | None = None
    bot_username: str | None = None
    api_base_url: str = "https://api.telegram.org"
    allowed_users: list[str] = []
    max_file_bytes: int = 20 * 1024 * 1024

    def required_secrets(self) -> dict[str, str | None]:
        return {"bot_token": self.bot_token}
